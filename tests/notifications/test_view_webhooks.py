"""The operators' webhooks page: register endpoints, see deliveries, re-send one."""

from __future__ import annotations

import pytest
from django.utils import timezone

from plans.notifications.models import Delivery, WebhookEndpoint
from plans.roles import roles_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_in(client, django_user_model):
    user = django_user_model.objects.create_user("otto", password="otto-pass-123")
    user.groups.add(roles_ensure()["operators"])
    client.force_login(user)
    return user


def test_an_operator_registers_an_endpoint(client, operator_in, settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = True

    response = client.post(
        "/webhooks/endpoints/",
        {"url": "http://127.0.0.1:9/hook", "events": ["run.finished"], "active": "on"},
        follow=True,
    )

    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.events == ["run.finished"] and endpoint.created_by == operator_in
    assert endpoint.secret in response.content.decode()  # shown once, to copy to the receiver


def test_a_private_address_is_refused_with_the_reason(client, operator_in, settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = False

    response = client.post(
        "/webhooks/endpoints/", {"url": "http://10.0.0.5/hook", "events": ["run.finished"]}
    )

    assert response.status_code == 422
    assert "loopback, private or reserved" in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_deliveries_are_listed_and_one_can_be_resent(client, operator_in):
    endpoint = WebhookEndpoint.objects.create(
        url="https://example.com/hook", secret="x", events=["run.finished"]
    )
    failed = Delivery.objects.create(
        channel="webhook",
        endpoint=endpoint,
        event_id="00000000-0000-0000-0000-0000000000aa",
        event_type="run.finished",
        payload={},
        status="failed",
        attempts=6,
        last_status_code=503,
        last_error="HTTP 503",
        last_latency_ms=120,
        next_attempt_at=timezone.now(),
    )

    page = client.get("/webhooks/").content.decode()
    assert "HTTP 503" in page and "120 ms" in page
    client.post(f"/webhooks/deliveries/{failed.pk}/resend/")

    again = Delivery.objects.exclude(pk=failed.pk).get()
    assert str(again.event_id) == str(failed.event_id) and again.status == "pending"


def test_people_without_the_permission_may_not_manage_webhooks(client, author):
    client.force_login(author)

    assert client.get("/webhooks/").status_code == 403
    assert client.post("/webhooks/endpoints/", {"url": "https://example.com/"}).status_code == 403
