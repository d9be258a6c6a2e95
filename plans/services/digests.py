"""The approval digest without cron: the workers' sweep claims each period once, across every
process (a conditional UPDATE that must change exactly one row, as healthchecks' sendalerts
claims a check), and queues one e-mail per reader for the notifier to render and send."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from plans.models import Delivery, DigestPeriod, NotificationPreference

APPROVAL_DIGEST = "approval_digest"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def digest_readers() -> QuerySet[User]:
    """Active people with an address who chose the daily digest of approvals waiting."""
    return (
        get_user_model()
        .objects.filter(
            is_active=True,
            notification_preference__approval_emails=NotificationPreference.ApprovalEmails.DAILY,
        )
        .exclude(email="")
        .order_by("pk")
    )


def digest_period_start(now: datetime, period_s: float) -> datetime:
    """The start of the period `now` falls in: periods of period_s seconds counted from the
    Unix epoch (a day's starts at midnight UTC)."""
    elapsed = (now - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=elapsed // period_s * period_s)


def digests_queue_due(*, now: datetime | None = None) -> int:
    """If this period's approval digest has not gone out, claim the period and queue one e-mail
    per reader (each to that reader alone, rendered when sent). Returns how many were queued:
    0 if the period was claimed already (here or by another process), or the digest is off."""
    period_s = settings.AGENTSITE_APPROVAL_DIGEST_S
    if period_s <= 0 or not settings.AGENTSITE_NOTIFICATIONS:
        return 0
    now = now or timezone.now()
    start = digest_period_start(now, period_s)
    claimed = DigestPeriod.objects.filter(name=APPROVAL_DIGEST)
    if claimed.filter(period_start__gte=start).exists():
        return 0  # the usual answer: one read per sweep
    with transaction.atomic():
        # Never sent: due at once (the row starts at the epoch).
        DigestPeriod.objects.bulk_create(
            [DigestPeriod(name=APPROVAL_DIGEST, period_start=EPOCH)], ignore_conflicts=True
        )
        # The claim: of processes racing for the period, one changes the row, the rest nothing.
        if claimed.filter(period_start__lt=start).update(period_start=start, claimed_at=now) != 1:
            return 0
        queued = [
            Delivery(
                channel=Delivery.Channel.EMAIL,
                event_id=uuid.uuid4(),
                event_type="approval.digest",
                payload={"email": "digest", "user": reader.pk},
                dedupe_key=f"approval-digest:{start:%Y%m%dT%H%M%S}:u{reader.pk}",
                next_attempt_at=now,
            )
            for reader in digest_readers()
        ]
        Delivery.objects.bulk_create(queued)
    return len(queued)
