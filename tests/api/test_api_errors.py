"""Hostile bodies and failures: a size limit answered 413, and JSON errors, never a traceback."""

from __future__ import annotations

import pytest
from django.test import Client

from plans.api.tokens import token_create
from plans.models import Run
from plans.roles import roles_ensure

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024


@pytest.fixture
def token(author):
    author.groups.add(roles_ensure()["authors"])
    return token_create(user=author, name="ci", roles=["authors"])[1]


@pytest.fixture
def api():
    # Errors come back as the server would send them, not raised into the test.
    return Client(raise_request_exception=False)


def post(api: Client, token: str, body: object, path: str = "/api/v1/runs/"):
    return api.post(
        path, body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


def assert_json_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    assert b"Traceback" not in response.content
    body = response.json()
    assert body["code"] == code and body["detail"]
    return body


@pytest.mark.parametrize("debug", [True, False])
def test_a_body_over_the_limit_is_413_json_with_a_code_in_debug_or_not(api, token, settings, debug):
    settings.DEBUG = debug

    response = post(api, token, {"goal": "x" * (5 * MIB)})

    body = assert_json_error(response, 413, "body_too_large")
    assert f"{MIB} bytes" in body["detail"] and "AGENTSITE_MAX_BODY_BYTES" in body["detail"]
    assert Run.objects.count() == 0


def test_the_limit_is_a_setting(api, token, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100

    assert_json_error(post(api, token, {"goal": "a" * 200}), 413, "body_too_large")
    assert post(api, token, {"goal": "hi"}).status_code == 201


def test_a_goal_over_its_length_limit_is_a_422_naming_the_field(api, token):
    response = post(api, token, {"goal": "x" * 2001})

    body = assert_json_error(response, 422, "invalid_request")
    assert body["problems"] == ["goal: String should have at most 2000 characters"]


@pytest.mark.parametrize("debug", [True, False])
def test_a_failure_inside_the_api_is_a_json_500_without_a_traceback(
    api, token, settings, monkeypatch, debug
):
    settings.DEBUG = debug

    def broken(run):
        raise RuntimeError("internal detail the client must not see")

    monkeypatch.setattr("plans.api.runs.run_summary", broken)

    response = post(api, token, {"goal": "hi"})

    assert_json_error(response, 500, "server_error")
    assert b"internal detail" not in response.content


@pytest.mark.parametrize("debug", [True, False])
def test_errors_django_answers_around_the_api_are_json_too(api, token, settings, debug):
    settings.DEBUG = debug
    auth = {"Authorization": f"Bearer {token}"}

    unknown = api.get("/api/v1/nowhere/", headers=auth)
    bad_host = api.get("/api/v1/runs/", headers={**auth, "Host": "attacker.example"})

    assert_json_error(unknown, 404, "not_found")
    assert_json_error(bad_host, 400, "bad_request")
    if debug:
        # Django refuses to redirect a POST to the slashed path, in debug by raising.
        assert_json_error(post(api, token, {"goal": "hi"}, "/api/v1/runs"), 500, "server_error")
    assert api.get("/nowhere/").status_code == 404  # the pages keep their own error pages
    assert not api.get("/nowhere/")["Content-Type"].startswith("application/json")


def test_the_schema_declares_the_413_of_every_operation_with_a_body(api):
    schema = api.get("/api/v1/schema/").json()

    with_body = [
        (path, method, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
        if "requestBody" in operation
    ]
    assert len(with_body) >= 3
    for path, method, operation in with_body:
        error = operation["responses"].get("413")
        assert error is not None, f"{method} {path} does not declare its 413"
        assert error["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorOut"
        }
