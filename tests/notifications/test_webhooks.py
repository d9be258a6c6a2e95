"""Webhooks: signed, retried with backoff, never followed through redirects, never to private
addresses unless allowed, and a hanging receiver holds up nobody else."""

from __future__ import annotations

import pytest

from plans.models import Run
from plans.notifications.deliveries import delivery_resend
from plans.notifications.dispatch import notifier
from plans.notifications.http import UrlRefused, url_check
from plans.notifications.models import Delivery, WebhookEndpoint
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.integration.support import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("notifications_on")]

PRICE_PLAN = {"steps": [{"id": 1, "tool": "price", "args": {"item": "Pixel 10"}, "depends_on": []}]}


def endpoint(receiver, path: str, events: list[str]) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        url=f"{receiver.url}{path}", secret=receiver.secret, events=events
    )


def finish_a_run(author) -> Run:
    run = run_create(author=author, goal_text="What does an adapter cost?", plan_data=PRICE_PLAN)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    return run


def settled(hook: WebhookEndpoint, count: int = 1) -> list[Delivery]:
    def done() -> list[Delivery] | None:
        rows = list(Delivery.objects.filter(endpoint=hook).order_by("pk"))
        finished = [row for row in rows if row.status != Delivery.Status.PENDING]
        return rows if len(rows) >= count and len(finished) == len(rows) else None

    return wait_until(done, timeout=20, every=0.05, what=f"{count} deliveries to {hook.url}")


def test_a_subscribed_endpoint_receives_signed_events_of_the_types_it_chose(author, receiver):
    hook = endpoint(receiver, "/ok", ["run.created", "run.finished"])

    run = finish_a_run(author)

    rows = settled(hook, count=2)
    assert [row.event_type for row in rows] == ["run.created", "run.finished"]
    assert all(row.status == "delivered" and row.attempts == 1 for row in rows)
    assert all(row.last_status_code == 204 and row.last_latency_ms is not None for row in rows)
    requests = receiver.at("/ok")
    assert len(requests) == 2 and all(receiver.verified(r) for r in requests)
    # Two sends at a time: the endpoint may receive them in either order (each is dated).
    (finished_request,) = [r for r in requests if r.json["type"] == "run.finished"]
    finished = finished_request.json
    assert finished["id"] == str(rows[1].event_id)
    assert finished_request.headers["X-Agentsite-Delivery"] == finished["id"]
    assert finished["created_at"]
    assert finished["data"]["run"]["id"] == run.pk
    assert finished["data"]["payload"] == {"status": "completed"}


def test_a_wrong_secret_does_not_verify(author, receiver):
    hook = endpoint(receiver, "/ok", ["run.finished"])
    finish_a_run(author)
    settled(hook)
    request = receiver.at("/ok")[0]
    receiver.secret = "another secret"

    assert not receiver.verified(request)


def test_a_receiver_that_fails_twice_gets_the_delivery_on_the_third_attempt(author, receiver):
    hook = endpoint(receiver, "/fail-twice", ["run.finished"])

    finish_a_run(author)

    [row] = settled(hook)
    assert row.status == "delivered" and row.attempts == 3
    requests = receiver.at("/fail-twice")
    assert len(requests) == 3
    assert len({r.json["id"] for r in requests}) == 1  # the same event, retried
    assert all(receiver.verified(r) for r in requests)


def test_a_hanging_receiver_fails_on_record_and_delays_no_other_endpoint(
    author, receiver, settings
):
    settings.AGENTSITE_WEBHOOK_TIMEOUT_S = 0.5
    settings.AGENTSITE_NOTIFY_MAX_ATTEMPTS = 2
    hanging = endpoint(receiver, "/hang", ["run.created", "run.finished"])
    healthy = endpoint(receiver, "/ok", ["run.created", "run.finished"])

    finish_a_run(author)

    assert [row.status for row in settled(healthy, count=2)] == ["delivered", "delivered"]
    assert Delivery.objects.filter(endpoint=hanging, status="pending").exists()
    rows = settled(hanging, count=2)
    assert all(row.status == "failed" and row.attempts == 2 for row in rows)
    assert all(row.last_error == "no answer within 0.5 s" for row in rows)


def test_a_redirect_is_not_followed(author, receiver, settings):
    settings.AGENTSITE_NOTIFY_MAX_ATTEMPTS = 2
    hook = endpoint(receiver, "/redirect", ["run.finished"])

    finish_a_run(author)

    [row] = settled(hook)
    assert row.status == "failed" and row.attempts == 2
    assert len(receiver.at("/redirect")) == 2
    assert row.last_status_code == 302
    assert "redirects are not followed" in row.last_error
    assert receiver.at("/ok") == []


def test_loopback_and_private_urls_are_refused_unless_allowed(author, receiver, settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = False
    settings.AGENTSITE_NOTIFY_MAX_ATTEMPTS = 1
    for url in (
        receiver.url,
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest",
        "http://[::1]:8000/",
        "ftp://example.com/",
    ):
        with pytest.raises(UrlRefused):
            url_check(url)
    hook = endpoint(receiver, "/ok", ["run.finished"])  # registered while it was allowed

    finish_a_run(author)

    [row] = settled(hook)
    assert row.status == "failed" and "loopback, private or reserved" in row.last_error
    assert receiver.at("/ok") == []


def test_a_delivery_can_be_resent_with_the_same_event_id(author, receiver):
    hook = endpoint(receiver, "/ok", ["run.finished"])
    finish_a_run(author)
    [first] = settled(hook)

    delivery_resend(delivery=first)
    notifier.wake()

    rows = settled(hook, count=2)
    assert [row.status for row in rows] == ["delivered", "delivered"]
    assert rows[0].event_id == rows[1].event_id
    assert [r.json["id"] for r in receiver.at("/ok")] == [str(first.event_id)] * 2


def test_a_backlog_for_a_dead_endpoint_does_not_crowd_out_the_others(author, receiver):
    from django.utils import timezone

    hanging = endpoint(receiver, "/hang", ["run.finished"])
    Delivery.objects.bulk_create(
        Delivery(
            channel="webhook",
            endpoint=hanging,
            event_id="00000000-0000-0000-0000-000000000001",
            event_type="run.finished",
            payload={"backlog": n},
            next_attempt_at=timezone.now(),
        )
        for n in range(300)
    )
    healthy = endpoint(receiver, "/ok", ["run.finished"])

    finish_a_run(author)

    # 300 sends of 5 s, two at a time, would take over 12 minutes to get out of the way.
    [row] = settled(healthy)
    assert row.status == "delivered"
    assert len(receiver.at("/hang")) <= 2


def test_events_nobody_wants_read_nothing_but_the_endpoints(author, receiver):
    """The notifier shares the interpreter with every run: an event no endpoint subscribes to
    and no email is about costs it one query, not the run's rows nor a webhook body."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from plans.notifications.deliveries import deliveries_for_events

    endpoint(receiver, "/created", ["run.created"])
    run = run_create(author=author, goal_text="What does an adapter cost?", plan_data=PRICE_PLAN)
    cancelled = {"kind": "run_finished", "seq": 9, "at": "", "payload": {"status": "cancelled"}}
    decided = {"kind": "plan_decided", "seq": 10, "at": "", "payload": {}}

    with CaptureQueriesContext(connection) as queries:
        assert deliveries_for_events(run.pk, [cancelled, decided]) == []
    assert len(queries) == 1 and "webhookendpoint" in queries[0]["sql"].lower()

    created = {"kind": "run_created", "seq": 1, "at": "", "payload": {}}
    (row,) = deliveries_for_events(run.pk, [created, cancelled])
    assert row.event_type == "run.created" and row.payload["data"]["run"]["goal"] == run.goal.text
