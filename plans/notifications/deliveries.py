"""Turning committed run events into deliveries, attempting them, and re-sending one."""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from plans.bulk import rows_where
from plans.models import Goal, Run
from plans.notifications import emails
from plans.notifications.catalog import FINISHED_EMAIL_STATUSES, KIND_TO_TYPE
from plans.notifications.http import post
from plans.notifications.models import Delivery, WebhookEndpoint
from plans.notifications.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature,
)
from plans.services.digests import digest_readers

Status = Delivery.Status


def deliveries_for_events(run_id: int, events: list[dict[str, Any]]) -> list[Delivery]:
    """The webhook calls and emails these committed events call for (created pending)."""
    typed = [(KIND_TO_TYPE[e["kind"]], e) for e in events if e["kind"] in KIND_TO_TYPE]
    if not typed:
        return []
    # Prepared: read for every batch of committed events a run's end brings.
    endpoints = rows_where(WebhookEndpoint, active=True, order_by="id")
    # Most events are wanted by nobody: settle that before reading the run or building bodies
    # (this thread shares the interpreter with every run's executor).
    typed = [
        (event_type, event)
        for event_type, event in typed
        if _may_email(event_type, event) or any(event_type in e.events for e in endpoints)
    ]
    if not typed:
        return []
    run = _run_with_author(run_id)
    if run is None:
        return []
    now = timezone.now()
    rows: list[Delivery] = []
    for event_type, event in typed:
        subscribed = [endpoint for endpoint in endpoints if event_type in endpoint.events]
        body = webhook_body(run, event_type, event) if subscribed else {}
        rows += [
            Delivery(
                channel=Delivery.Channel.WEBHOOK,
                endpoint=endpoint,
                event_id=body["id"],
                event_type=event_type,
                run=run,
                payload=body,
                next_attempt_at=now,
            )
            for endpoint in subscribed
        ]
        rows += _emails_for(run, event_type, event, now)
    created = []
    for row in rows:
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            continue  # its dedupe key is taken: that email is already on its way
        created.append(row)
    return created


def _run_with_author(run_id: int) -> Run | None:
    """The run, its goal and author, by prepared statements (the ORM's query building would be
    most of this thread's time on a busy worker)."""
    runs = rows_where(Run, id=run_id)
    if not runs:
        return None
    run = runs[0]
    (run.goal,) = rows_where(Goal, id=run.goal_id)
    (run.goal.author,) = rows_where(get_user_model(), id=run.goal.author_id)
    return run


def _may_email(event_type: str, event: dict[str, Any]) -> bool:
    """Whether _emails_for could want an email for this event, before reading anything."""
    if event_type in (
        "approval.requested",
        "approval.stale",
        "plan.approval_requested",
        "approval.reminded",
        "approval.escalated",
    ):
        return True
    return (
        event_type == "run.finished" and event["payload"].get("status") in FINISHED_EMAIL_STATUSES
    )


def _emails_for(run: Run, event_type: str, event: dict[str, Any], now: datetime) -> list[Delivery]:
    payload = event["payload"]
    # Rendered when due: a short wait lets the other steps of the round join the same email.
    later = now + timedelta(seconds=settings.AGENTSITE_APPROVAL_EMAIL_DELAY_S)
    if event_type in ("approval.requested", "approval.stale"):
        plan_version = run.plans.filter(is_valid=True).order_by("-version").values("version")[:1]
        version = plan_version[0]["version"] if plan_version else 0
        # A request made again (its target changed) is news even if its round was mailed.
        again = f":stale{payload.get('approval')}" if event_type == "approval.stale" else ""
        return _per_reviewer(
            run,
            event_type,
            {"email": "approval_round", "run": run.pk, "round": payload.get("round")},
            dedupe=f"approval-round:{run.pk}:v{version}:r{payload.get('round')}{again}",
            due=later,
        )
    if event_type in ("approval.reminded", "approval.escalated"):
        # Chasing one request: its deciders are reminded (each reminder anew: they repeat),
        # the escalation groups are told (once).
        kind = "approval_reminder" if event_type == "approval.reminded" else "approval_escalated"
        email = {"email": kind, "run": run.pk, "approval": payload.get("approval")}
        dedupe = f"{kind}:{payload.get('approval')}"
        if "reminder" in payload:
            email["reminder"] = payload["reminder"]
            dedupe += f":{payload['reminder']}"
        return _per_reviewer(run, event_type, email, dedupe=dedupe, due=now)
    if event_type == "plan.approval_requested":
        return _per_reviewer(
            run,
            event_type,
            {"email": "plan_waiting", "run": run.pk, "version": payload.get("version")},
            dedupe=f"plan-waiting:{run.pk}:v{payload.get('version')}",
            due=now,
        )
    if (
        event_type == "run.finished"
        and payload.get("status") in FINISHED_EMAIL_STATUSES
        # Checked now, not only when sending: an author without an address is nobody to tell,
        # and a row for each such run would take the write lock beside every run's own writes.
        # (One who turned these emails off gets a row, skipped when due: the choice is on record.)
        and run.goal.author.email
    ):
        return [
            _email_row(
                run,
                event_type,
                {"email": "run_finished", "run": run.pk},
                dedupe=f"run-finished:{run.pk}",
                due=now,
            )
        ]
    return []


def _per_reviewer(
    run: Run, event_type: str, payload: dict[str, Any], *, dedupe: str, due: datetime
) -> list[Delivery]:
    """One email per reviewer, to them alone: nobody sees who else was asked, and each carries
    links signed for its reader."""
    return [
        _email_row(
            run, event_type, {**payload, "user": user.pk}, dedupe=f"{dedupe}:u{user.pk}", due=due
        )
        for user in emails.deciders(run)
    ]


def _email_row(
    run: Run, event_type: str, payload: dict[str, Any], *, dedupe: str, due: datetime
) -> Delivery:
    return Delivery(
        channel=Delivery.Channel.EMAIL,
        event_id=uuid.uuid4(),
        event_type=event_type,
        run=run,
        payload=payload,
        dedupe_key=dedupe,
        next_attempt_at=due,
    )


def webhook_body(run: Run, event_type: str, event: dict[str, Any]) -> dict[str, Any]:
    """What a receiver gets: an id (kept across retries and re-sends), a time, and the data."""
    return {
        "id": str(uuid.uuid4()),
        "type": event_type,
        "created_at": event["at"],
        "data": {
            "run": {
                "id": run.pk,
                "url": emails.absolute(reverse("plans:run_detail", args=[run.pk])),
                "api_url": emails.absolute(f"/api/v1/runs/{run.pk}/"),
                "goal": run.goal.text,
                "author": run.goal.author.get_username(),
            },
            "seq": event["seq"],
            "kind": event["kind"],
            "payload": event["payload"],  # as stored: redacted
        },
    }


# --- attempts --------------------------------------------------------------------------------


def delivery_attempt(delivery: Delivery) -> Delivery:
    """Attempt a claimed delivery once and record how it went (and when to retry, if ever)."""
    if delivery.channel == Delivery.Channel.WEBHOOK:
        status_code, latency_ms, error, skipped = _attempt_webhook(delivery)
    else:
        status_code, latency_ms, error, skipped = _attempt_email(delivery)
    attempts = delivery.attempts + (0 if skipped else 1)
    now = timezone.now()
    fields: dict[str, Any] = {
        "attempts": attempts,
        "last_status_code": status_code,
        "last_error": error,
        "last_latency_ms": latency_ms,
        "claimed_until": None,
    }
    if skipped:
        fields.update(status=Status.SKIPPED, finished_at=now)
    elif not error:
        fields.update(status=Status.DELIVERED, finished_at=now)
    elif attempts >= settings.AGENTSITE_NOTIFY_MAX_ATTEMPTS:
        fields.update(status=Status.FAILED, finished_at=now)
    else:
        fields["next_attempt_at"] = now + timedelta(seconds=retry_delay(attempts))
    Delivery.objects.filter(pk=delivery.pk).update(**fields)
    for name, value in fields.items():
        setattr(delivery, name, value)
    return delivery


def retry_delay(attempts: int) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^(attempts-1))]."""
    ceiling = min(
        settings.AGENTSITE_NOTIFY_RETRY_CAP_S,
        settings.AGENTSITE_NOTIFY_RETRY_BASE_S * 2 ** (attempts - 1),
    )
    return random.uniform(0, ceiling)


def _attempt_webhook(delivery: Delivery) -> tuple[int | None, int | None, str, bool]:
    endpoint = delivery.endpoint
    if endpoint is None:
        return None, None, "the endpoint was deleted", True
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode()
    timestamp = int(time.time())
    headers = {
        SIGNATURE_HEADER: signature(endpoint.secret, timestamp, body),
        TIMESTAMP_HEADER: str(timestamp),
        EVENT_HEADER: delivery.event_type,
        DELIVERY_HEADER: str(delivery.event_id),
    }
    outcome = post(endpoint.url, body, headers, timeout=settings.AGENTSITE_WEBHOOK_TIMEOUT_S)
    return outcome.status_code, outcome.latency_ms, outcome.error, False


# E-mails to reviewers: one each, to them alone, with decision links signed for its reader.
PER_REVIEWER_EMAILS = frozenset(
    {"approval_round", "plan_waiting", "approval_reminder", "approval_escalated"}
)


def _attempt_email(delivery: Delivery) -> tuple[int | None, int | None, str, bool]:
    payload = delivery.payload
    kind = payload.get("email")
    if kind in PER_REVIEWER_EMAILS and "user" not in payload:
        return _split_per_reviewer(delivery)
    if kind == "approval_round":
        email = emails.approval_round_email(payload["run"], payload["round"], payload["user"])
    elif kind == "plan_waiting":
        email = emails.plan_waiting_email(payload["run"], payload["version"], payload["user"])
    elif kind == "run_finished":
        email = emails.run_finished_email(payload["run"])
    elif kind == "digest":
        reader = digest_readers().filter(pk=payload["user"]).first()  # still wants it
        email = emails.digest_email(reader) if reader is not None else None
    elif kind in ("approval_reminder", "approval_escalated"):
        email = emails.approval_chase_email(
            payload["approval"],
            escalated=kind != "approval_reminder",
            user_id=payload["user"],
            reminder=payload.get("reminder", 1),
        )
    else:
        return None, None, f"unknown email {kind!r}", True
    if email is None:
        return None, None, "", True  # nobody to tell, or nothing waits any more
    Delivery.objects.filter(pk=delivery.pk).update(recipients=email.recipients)
    delivery.recipients = email.recipients
    return send_email(email)


def _split_per_reviewer(delivery: Delivery) -> tuple[int | None, int | None, str, bool]:
    """A reviewers' email queued before they went one per reviewer: split into those, due now
    (this row is then skipped, naming who they went to)."""
    run = _run_with_author(delivery.payload["run"])
    if run is None:
        return None, None, "", True
    rows = _per_reviewer(
        run,
        delivery.event_type,
        delivery.payload,
        dedupe=delivery.dedupe_key or f"split:{delivery.pk}",
        due=timezone.now(),
    )
    for row in rows:
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            continue
    recipients = [user.email for user in emails.deciders(run)]
    Delivery.objects.filter(pk=delivery.pk).update(recipients=recipients)
    delivery.recipients = recipients
    return None, None, "", True


def send_email(email: emails.Email) -> tuple[int | None, int | None, str, bool]:
    started = time.monotonic()
    message = EmailMultiAlternatives(
        subject=email.subject,
        body=email.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=email.recipients,
    )
    message.attach_alternative(email.html, "text/html")
    try:
        message.send()
    except Exception as error:  # SMTP errors, refused connections, timeouts: all retried
        latency = round((time.monotonic() - started) * 1000)
        return None, latency, f"{type(error).__name__}: {error}", False
    return None, round((time.monotonic() - started) * 1000), "", False


def delivery_resend(*, delivery: Delivery) -> Delivery:
    """A new delivery of the same notification (same event id), attempted afresh."""
    return Delivery.objects.create(
        channel=delivery.channel,
        endpoint=delivery.endpoint,
        event_id=delivery.event_id,
        event_type=delivery.event_type,
        run=delivery.run,
        payload=delivery.payload,
        next_attempt_at=timezone.now(),
    )


def deliveries_due(
    now: datetime, *, limit: int, busy_endpoints: set[int], mail_busy: bool
) -> list[Delivery]:
    """Due deliveries, leaving out targets that have all the sends in flight they may have
    (so a backlog for a dead endpoint cannot crowd out the others)."""
    due = (
        Delivery.objects.filter(status=Status.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .exclude(endpoint_id__in=busy_endpoints)
    )
    if mail_busy:
        due = due.exclude(channel=Delivery.Channel.EMAIL)
    return list(due.select_related("endpoint").order_by("next_attempt_at", "pk")[:limit])


def delivery_claim(delivery: Delivery, now: datetime, *, hold_s: float) -> bool:
    """Claim a due delivery for this process (another process then leaves it alone)."""
    claimed = (
        Delivery.objects.filter(pk=delivery.pk, status=Status.PENDING)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + timedelta(seconds=hold_s))
    )
    return claimed == 1


def next_due_at() -> datetime | None:
    row = (
        Delivery.objects.filter(status=Status.PENDING)
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    return row


def digests_send() -> int:
    """Email each daily-digest reviewer what waits for them now (send_approval_digest, from
    cron); each email recorded as a delivery. The sweep queues the same, once per period."""
    sent = 0
    for user in digest_readers():
        email = emails.digest_email(user)
        if email is None:
            continue
        status_code, latency_ms, error, _ = send_email(email)
        now = timezone.now()
        Delivery.objects.create(
            channel=Delivery.Channel.EMAIL,
            event_id=uuid.uuid4(),
            event_type="approval.digest",
            recipients=email.recipients,
            payload={"email": "digest", "user": user.pk},
            status=Status.FAILED if error else Status.DELIVERED,
            attempts=1,
            last_status_code=status_code,
            last_error=error,
            last_latency_ms=latency_ms,
            next_attempt_at=now,
            finished_at=now,
        )
        sent += 0 if error else 1
    return sent
