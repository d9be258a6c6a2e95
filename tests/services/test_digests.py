"""The approval digest without cron: the sweep claims each period once and queues one e-mail
per reader who chose the digest, each to that reader alone (the notifier renders and sends
it). The clock is the test's (digests_queue_due(now=...))."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from plans.models import Delivery, DigestPeriod, NotificationPreference
from plans.services.digests import digest_period_start, digests_queue_due

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def digest_on(settings):
    settings.AGENTSITE_NOTIFICATIONS = True  # no run event here, so no notifier thread starts
    settings.AGENTSITE_APPROVAL_DIGEST_S = 24 * 3600


@pytest.fixture
def readers(django_user_model):
    def person(name, choice, email=True):
        user = django_user_model.objects.create_user(
            name, email=f"{name}@example.com" if email else ""
        )
        NotificationPreference.objects.create(user=user, approval_emails=choice)
        return user

    dora, dan = person("dora", "daily"), person("dan", "daily")
    person("erin", "each_round")
    person("nobody", "daily", email=False)
    return [dora, dan]


def digests():
    return list(
        Delivery.objects.filter(event_type="approval.digest")
        .order_by("pk")
        .values_list("payload", "dedupe_key", "status")
    )


def test_the_digest_goes_out_once_a_period_one_email_per_reader(readers):
    dora, dan = readers

    assert digests_queue_due(now=NOON) == 2  # never sent: due at once
    assert digests_queue_due(now=NOON + timedelta(hours=11, minutes=59)) == 0  # same day
    assert digests_queue_due(now=NOON + timedelta(hours=12)) == 2  # the next day (UTC)
    assert digests_queue_due(now=NOON + timedelta(hours=13)) == 0

    assert digests() == [
        (
            {"email": "digest", "user": dora.pk},
            f"approval-digest:20261207T000000:u{dora.pk}",
            "pending",
        ),
        (
            {"email": "digest", "user": dan.pk},
            f"approval-digest:20261207T000000:u{dan.pk}",
            "pending",
        ),
        (
            {"email": "digest", "user": dora.pk},
            f"approval-digest:20261208T000000:u{dora.pk}",
            "pending",
        ),
        (
            {"email": "digest", "user": dan.pk},
            f"approval-digest:20261208T000000:u{dan.pk}",
            "pending",
        ),
    ]
    claimed = DigestPeriod.objects.get()
    assert claimed.period_start == datetime(2026, 12, 8, tzinfo=UTC)


def test_a_period_already_claimed_queues_nothing(readers):
    DigestPeriod.objects.create(
        name="approval_digest", period_start=datetime(2026, 12, 7, tzinfo=UTC)
    )

    assert digests_queue_due(now=NOON) == 0
    assert digests() == []


def test_no_digest_when_its_period_is_zero_or_notifications_are_off(readers, settings):
    settings.AGENTSITE_APPROVAL_DIGEST_S = 0
    assert digests_queue_due(now=NOON) == 0
    settings.AGENTSITE_APPROVAL_DIGEST_S = 24 * 3600
    settings.AGENTSITE_NOTIFICATIONS = False
    assert digests_queue_due(now=NOON) == 0
    assert digests() == [] and not DigestPeriod.objects.exists()


@pytest.mark.parametrize(
    ("period_s", "start"),
    [
        (24 * 3600, datetime(2026, 12, 7, tzinfo=UTC)),
        (3600, datetime(2026, 12, 7, 12, tzinfo=UTC)),
        (7 * 24 * 3600, datetime(2026, 12, 3, tzinfo=UTC)),  # weeks from the epoch: Thursdays
    ],
)
def test_periods_are_counted_from_the_unix_epoch(period_s, start):
    assert digest_period_start(NOON + timedelta(minutes=1), period_s) == start
