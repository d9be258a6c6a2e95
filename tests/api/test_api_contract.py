"""What the schema promises a generated client: who gets a 401, the 400 for unparseable JSON,
the headers it may send, and a 409 stale_hash that hands over the current arguments."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from plans.api.tokens import token_create
from plans.models import Approval, Run
from plans.roles import roles_ensure
from tests.services.test_approvals import start_refund

pytestmark = pytest.mark.django_db(transaction=True)  # the refund run's executor commits

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def schema(client):
    return client.get("/api/v1/schema/").json()


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_operation_answers_401_without_credentials_even_with_csrf_checks_on(schema):
    browser = Client(enforce_csrf_checks=True)

    for path, method, operation in operations(schema):
        if method == "get":
            response = browser.get(concrete(path))
        else:
            response = browser.generic(
                method.upper(), concrete(path), b"{}", content_type="application/json"
            )
        assert response.status_code == 401, f"{method} {path}: {response.content[:200]}"
        assert response.json()["code"] == "not_authenticated", f"{method} {path}"
        assert response["WWW-Authenticate"] == "Bearer"
        assert "401" in operation["responses"], f"{method} {path} does not declare its 401"
    assert not Run.objects.exists()


def test_a_signed_in_browser_still_needs_the_csrf_token_on_every_unsafe_operation(schema, author):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(author)

    for path, method, _ in operations(schema):
        if method != "get":
            response = browser.generic(
                method.upper(), concrete(path), b"{}", content_type="application/json"
            )
            assert response.status_code == 403, f"{method} {path}"
            assert response.json()["code"] == "csrf_failed"


def test_unparseable_json_is_a_400_every_operation_with_a_body_declares(schema, author):
    author.groups.add(*roles_ensure().values())
    _, raw = token_create(user=author, name="ci", roles=["authors", "reviewers"])
    client = Client(raise_request_exception=False)
    run = start_refund(author)

    with_body = [(p, m, o) for p, m, o in operations(schema) if "requestBody" in o]
    assert len(with_body) >= 3
    for path, method, operation in with_body:
        response = client.generic(
            method.upper(),
            concrete(path.replace("{run_id}", str(run.pk))),
            b'{"goal": "unterminated',
            content_type="application/json",
            headers={"Authorization": f"Bearer {raw}"},
        )
        assert response.status_code == 400, f"{method} {path}: {response.content[:200]}"
        assert response.json()["code"] == "bad_request"
        declared = operation["responses"].get("400")
        assert declared is not None, f"{method} {path} does not declare its 400"
        assert declared["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorOut"
        }


def header_parameters(operation) -> dict[str, dict]:
    return {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "header"}


def test_the_schema_declares_the_headers_the_api_honours(schema):
    create = header_parameters(schema["paths"]["/api/v1/runs/"]["post"])
    events = header_parameters(schema["paths"]["/api/v1/runs/{run_id}/events/"]["get"])

    assert create["Idempotency-Key"]["schema"] == {"type": "string", "maxLength": 200}
    assert not create["Idempotency-Key"]["required"]
    assert events["Last-Event-ID"]["schema"]["type"] == "string"
    assert "resume" in events["Last-Event-ID"]["description"]


def test_a_stale_hash_answers_with_the_current_arguments_and_their_hash(author, reviewer):
    reviewer.groups.add(roles_ensure()["reviewers"])
    _, raw = token_create(user=reviewer, name="ci", roles=["reviewers"])
    approval = Approval.objects.get(run=start_refund(author))

    response = Client().post(
        "/api/v1/approvals/decide/",
        {"decision": "approve", "approvals": [{"id": approval.pk, "args_sha256": "0" * 64}]},
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )

    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "stale_hash"
    assert body["current"] == [
        {
            "id": approval.pk,
            "tool": "issue_refund",
            "args": approval.args,
            "args_sha256": approval.args_sha256,
        }
    ]
    assert Approval.objects.get(pk=approval.pk).decision == "pending"


def readme_error_table() -> dict[int, set[str]]:
    text = README.read_text()
    table = text[text.index("| Status | Codes |") :].split("\n\n", 1)[0]
    declared: dict[int, set[str]] = {}
    for row in table.splitlines()[2:]:
        status, codes = row.split("|")[1:3]
        declared[int(status)] = set(re.findall(r"`([a-z_]+)`", codes))
    return declared


def test_the_readmes_error_table_lists_every_status_the_schema_declares(schema):
    table = readme_error_table()
    in_schema = {
        int(status)
        for _, _, operation in operations(schema)
        for status in operation["responses"]
        if int(status) >= 400
    }

    assert in_schema <= table.keys(), f"missing from the README: {in_schema - table.keys()}"
    assert "bad_request" in table[400] and "stale_hash" in table[409]
    assert "listed_twice" in table[422]


def test_every_refusal_code_the_api_answers_is_in_the_readmes_table():
    from plans.api.errors import REFUSALS

    table = readme_error_table()

    missing = sorted(
        f"{status} {code}"
        for status, code, _ in REFUSALS.values()
        if code not in table.get(status, set())
    )
    assert missing == []
