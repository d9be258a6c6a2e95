"""The API's rules in process: tokens, CSRF, rate limit, cursors, errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from plans.api.models import ApiToken
from plans.api.tokens import TokenRefused, token_create, token_revoke
from plans.models import Run
from plans.roles import roles_ensure
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def authors(author, other_author):
    groups = roles_ensure()
    author.groups.add(groups["authors"])
    other_author.groups.add(groups["authors"])
    return author


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def test_a_token_is_shown_once_and_stored_only_as_its_hash(authors):
    token, raw = token_create(user=authors, name="ci", roles=["authors"])

    assert raw.startswith("ags_") and len(raw) > 40
    stored = ApiToken.objects.get(pk=token.pk)
    assert raw not in {stored.token_sha256, stored.prefix, stored.name}
    assert raw.startswith(stored.prefix)


def test_a_token_may_not_carry_a_role_its_owner_does_not_hold(authors):
    with pytest.raises(TokenRefused, match="reviewers"):
        token_create(user=authors, name="too wide", roles=["authors", "reviewers"])


def test_revoked_and_expired_tokens_are_refused(client, authors):
    revoked, raw_revoked = token_create(user=authors, name="old", roles=["authors"])
    token_revoke(token=revoked)
    expiring, raw_expired = token_create(
        user=authors, name="short", roles=["authors"], expires_at=timezone.now() + timedelta(1)
    )
    ApiToken.objects.filter(pk=expiring.pk).update(expires_at=timezone.now())

    for raw in (raw_revoked, raw_expired):
        response = client.get("/api/v1/runs/", headers=bearer(raw))
        assert response.status_code == 401
        assert response.json()["code"] == "token_invalid"
        assert response["WWW-Authenticate"] == "Bearer"


def test_using_a_token_records_when_it_was_last_used(client, authors):
    token, raw = token_create(user=authors, name="ci", roles=["authors"])

    client.get("/api/v1/runs/", headers=bearer(raw))

    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_wrong_token_does_not_fall_back_to_the_session(client, authors):
    client.force_login(authors)

    response = client.get("/api/v1/runs/", headers=bearer("ags_wrong"))

    assert response.status_code == 401


def test_the_browser_session_works_but_its_posts_need_the_csrf_token(authors):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(authors)

    assert browser.get("/api/v1/runs/").status_code == 200
    refused = browser.post("/api/v1/runs/", {"goal": "hello"}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"
    assert not Run.objects.exists()


def test_token_requests_need_no_csrf_token(authors):
    _, raw = token_create(user=authors, name="ci", roles=["authors"])
    script = Client(enforce_csrf_checks=True)

    created = script.post(
        "/api/v1/runs/", {"goal": "hello"}, content_type="application/json", headers=bearer(raw)
    )

    assert created.status_code == 201


def test_creating_runs_too_fast_is_refused_with_retry_after(client, authors, settings):
    settings.AGENTSITE_API_RUNS_PER_MINUTE = 1
    settings.AGENTSITE_API_RUNS_BURST = 2
    _, raw = token_create(user=authors, name="ci", roles=["authors"])
    _, other = token_create(user=authors, name="other", roles=["authors"])

    statuses = [
        client.post(
            "/api/v1/runs/", {"goal": "hi"}, content_type="application/json", headers=bearer(raw)
        )
        for _ in range(3)
    ]

    assert [r.status_code for r in statuses] == [201, 201, 429]
    assert statuses[2].json()["code"] == "rate_limited"
    assert 1 <= int(statuses[2]["Retry-After"]) <= 60
    assert Run.objects.count() == 2
    fresh = client.post(
        "/api/v1/runs/", {"goal": "hi"}, content_type="application/json", headers=bearer(other)
    )
    assert fresh.status_code == 201  # the limit is per token


def test_the_runs_list_pages_with_cursors_without_overlap(client, authors, settings):
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    for n in range(7):
        run_create(author=authors, goal_text=f"goal {n}")
    _, raw = token_create(user=authors, name="ci", roles=["authors"])

    for sort in ("-date", "date", "cost", "-cost", "duration", "-duration"):
        seen, cursor = [], None
        while True:
            params = {"limit": 3, "sort": sort, **({"cursor": cursor} if cursor else {})}
            page = client.get("/api/v1/runs/", params, headers=bearer(raw)).json()
            seen += [r["id"] for r in page["results"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(Run.objects.values_list("pk", flat=True)), sort
        assert len(seen) == 7


def test_bad_query_values_are_422_with_a_code(client, authors):
    _, raw = token_create(user=authors, name="ci", roles=["authors"])

    for query in ({"status": "sleeping"}, {"cursor": "garbage"}, {"limit": 0}):
        response = client.get("/api/v1/runs/", query, headers=bearer(raw))
        assert response.status_code == 422, query
        assert response.json()["code"] in {"invalid_request", "invalid_cursor"}


def test_a_misspelt_option_is_an_error_not_ignored(client, authors):
    _, raw = token_create(user=authors, name="ci", roles=["authors"])

    response = client.post(
        "/api/v1/runs/",
        {"goal": "hi", "options": {"require_plan_aproval": True}},
        content_type="application/json",
        headers=bearer(raw),
    )

    assert response.status_code == 422
    assert "require_plan_aproval" in response.json()["detail"]


def test_the_schema_is_openapi_3_1(client):
    schema = client.get("/api/v1/schema/").json()

    assert schema["openapi"].startswith("3.1")
    assert "/api/v1/runs/" in schema["paths"]


def test_a_goal_the_planner_cannot_take_is_refused_by_the_same_rule_as_the_form(client, authors):
    _, raw = token_create(user=authors, name="ci", roles=["authors"])

    response = client.post(
        "/api/v1/runs/", {"goal": "   "}, content_type="application/json", headers=bearer(raw)
    )

    assert response.status_code == 422
    assert response.json() == {
        "code": "goal_rejected",
        "detail": "The goal is empty: say what you want the agent to do.",
    }
