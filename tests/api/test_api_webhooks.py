"""Webhook endpoints managed through the API: operators only (token role operators), the page's
rules for URLs, events and secrets, the secret shown once, deliveries listed and re-sent."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from plans.api.tokens import token_create
from plans.notifications.models import Delivery, WebhookEndpoint
from plans.roles import roles_ensure

pytestmark = pytest.mark.django_db

API = "/api/v1/webhooks"


@pytest.fixture
def operator_token(django_user_model):
    user = django_user_model.objects.create_user("olga")
    user.groups.add(roles_ensure()["operators"])
    _, raw = token_create(user=user, name="ops", roles=["operators"])
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


@pytest.fixture
def reviewer_token(reviewer):
    reviewer.groups.add(roles_ensure()["reviewers"])
    _, raw = token_create(user=reviewer, name="rev", roles=["reviewers"])
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_an_operator_registers_lists_changes_and_deletes_an_endpoint(
    client, operator_token, settings
):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = True
    created = client.post(
        f"{API}/endpoints/",
        {"url": "http://127.0.0.1:9/hook", "events": ["approval.requested", "run.finished"]},
        content_type="application/json",
        **operator_token,
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    secret = body["secret"]
    assert len(secret) >= 32 and body["created_by"] == "olga" and body["active"] is True
    endpoint = WebhookEndpoint.objects.get(pk=body["id"])
    assert endpoint.secret == secret

    listed = client.get(f"{API}/endpoints/", **operator_token).json()
    assert [e["url"] for e in listed] == ["http://127.0.0.1:9/hook"]
    assert "secret" not in listed[0]

    paused = client.patch(
        f"{API}/endpoints/{endpoint.pk}/",
        {"active": False, "events": ["run.finished"]},
        content_type="application/json",
        **operator_token,
    ).json()
    assert paused["active"] is False and paused["events"] == ["run.finished"]
    assert paused["secret"] is None  # unchanged: not shown again
    endpoint.refresh_from_db()
    assert endpoint.secret == secret and endpoint.url == "http://127.0.0.1:9/hook"

    rotated = client.patch(
        f"{API}/endpoints/{endpoint.pk}/",
        {"secret": "a-new-secret-of-ours"},
        content_type="application/json",
        **operator_token,
    ).json()
    assert rotated["secret"] == "a-new-secret-of-ours"

    assert client.delete(f"{API}/endpoints/{endpoint.pk}/", **operator_token).status_code == 204
    assert not WebhookEndpoint.objects.exists()
    missing = client.get(f"{API}/endpoints/{endpoint.pk}/", **operator_token)
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_the_pages_rules_refuse_bad_endpoints_naming_what_is_wrong(client, operator_token):
    private = client.post(
        f"{API}/endpoints/",
        {"url": "http://127.0.0.1/hook", "events": ["run.finished"]},
        content_type="application/json",
        **operator_token,
    )
    assert private.status_code == 422 and private.json()["code"] == "endpoint_invalid"
    assert "loopback, private or reserved address" in private.json()["detail"]

    unknown = client.post(
        f"{API}/endpoints/",
        {"url": "https://hooks.example.com/x", "events": ["run.exploded"]},
        content_type="application/json",
        **operator_token,
    )
    assert unknown.status_code == 422 and unknown.json()["code"] == "invalid_request"
    assert not WebhookEndpoint.objects.exists()


def test_only_operators_manage_webhooks(client, reviewer_token, operator_token, settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = True
    endpoint = WebhookEndpoint.objects.create(url="http://127.0.0.1:9/", events=["run.finished"])
    for method, path in (
        ("get", "/endpoints/"),
        ("post", "/endpoints/"),
        ("get", f"/endpoints/{endpoint.pk}/"),
        ("delete", f"/endpoints/{endpoint.pk}/"),
        ("post", "/deliveries/1/resend/"),
    ):
        kwargs = {"content_type": "application/json"} if method == "post" else {}
        data = {"url": "http://127.0.0.1:9/", "events": ["run.finished"]}
        args = (data,) if method == "post" else ()
        refused = getattr(client, method)(f"{API}{path}", *args, **kwargs, **reviewer_token)
        assert refused.status_code == 403, (method, path)
        assert refused.json()["code"] == "not_an_operator"
    assert WebhookEndpoint.objects.count() == 1


def test_deliveries_are_listed_and_one_is_resent_under_the_same_event_id(client, operator_token):
    endpoint = WebhookEndpoint.objects.create(url="http://127.0.0.1:9/", events=["run.finished"])
    failed = Delivery.objects.create(
        channel="webhook",
        endpoint=endpoint,
        event_id=uuid.uuid4(),
        event_type="run.finished",
        payload={"id": "x"},
        status="failed",
        attempts=6,
        last_error="ConnectionRefusedError",
        next_attempt_at=timezone.now(),
    )
    [listed] = client.get(f"{API}/endpoints/{endpoint.pk}/deliveries/", **operator_token).json()
    assert listed["status"] == "failed" and listed["attempts"] == 6

    again = client.post(f"{API}/deliveries/{failed.pk}/resend/", **operator_token)
    assert again.status_code == 201
    assert again.json()["event_id"] == str(failed.event_id)
    assert again.json()["status"] == "pending"
    assert client.post(f"{API}/deliveries/999999/resend/", **operator_token).status_code == 404
