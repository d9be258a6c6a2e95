"""Deadlines from approval rules: reminders (every remind_after until the request is decided,
escalated or expired) and escalations (once) go out through the notifier (webhook events and
e-mail), in the timeline and the audit; escalation opens a routed request to the escalation
groups; ttl sets the expiry. The sweeps' clock is the test's (approvals_chase(now=...))."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from plans.models import Approval, RunEvent
from plans.notifications.deliveries import deliveries_for_events
from plans.notifications.emails import approval_chase_email
from plans.notifications.models import WebhookEndpoint
from plans.runtime.sweeper import sweep_once
from plans.selectors.approvals import approvals_queue
from plans.services.approvals import approval_decide, approvals_chase, approvals_expire
from tests.reviewing import decider, refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def chasing_rules(settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.chased"]


def refund(author):
    return waiting_approval(author, refund_plan())


def past(approval, **fields):
    Approval.objects.filter(pk=approval.pk).update(
        **{name: timezone.now() - timedelta(seconds=1) for name in fields}
    )


def test_the_rule_sets_the_deadlines_when_the_request_is_made(author):
    approval = refund(author)

    assert approval.groups == ["support"] and approval.escalate_to == ["finance"]
    asked = approval.requested_at
    assert abs((approval.remind_at - asked).total_seconds() - 600) < 5
    assert abs((approval.escalate_at - asked).total_seconds() - 3600) < 5
    assert abs((approval.expires_at - asked).total_seconds() - 7200) < 5


def reminders_of(approval):
    return [
        event.payload["reminder"]
        for event in RunEvent.objects.filter(run=approval.run, kind="approval_reminded")
    ]


def test_a_reminder_repeats_every_remind_after_until_the_request_is_escalated(author):
    approval = refund(author)  # remind_after 10 min, escalate_after 1 h
    first = approval.remind_at
    minutes = lambda n: first + timedelta(minutes=n)  # noqa: E731 - the sweeps' clock

    assert approvals_chase(now=minutes(0) - timedelta(seconds=1)) == 0  # not due yet
    assert approvals_chase(now=minutes(0)) == 1
    assert approvals_chase(now=minutes(9)) == 0  # one per interval
    assert approvals_chase(now=minutes(10)) == 1
    assert approvals_chase(now=minutes(25)) == 1  # a late sweep: the next is 10 min after it
    assert approvals_chase(now=minutes(34)) == 0
    assert approvals_chase(now=minutes(35)) == 1
    assert reminders_of(approval) == [1, 2, 3, 4]
    approval.refresh_from_db()
    assert approval.reminders == 4 and approval.reminded_at == minutes(35)

    assert approvals_chase(now=minutes(45)) == 1
    assert approvals_chase(now=minutes(50)) == 1  # the escalation, 1 h after the request
    assert RunEvent.objects.get(run=approval.run, kind="approval_escalated")
    for later in (55, 60, 120, 600):
        assert approvals_chase(now=minutes(later)) == 0  # escalated: no more reminders
    assert reminders_of(approval) == [1, 2, 3, 4, 5]


def test_reminders_stop_once_the_request_is_decided_or_expired(author, reviewer):
    support = Group.objects.create(name="support")
    reviewer.groups.add(support)
    decided, expiring = refund(author), refund(author)
    first = decided.remind_at
    assert approvals_chase(now=first + timedelta(seconds=1)) == 2

    approval_decide(approval=decided, reviewer=reviewer, approve=False, reason="no")
    Approval.objects.filter(pk=expiring.pk).update(expires_at=timezone.now())
    approvals_expire()

    assert approvals_chase(now=first + timedelta(minutes=20)) == 0
    assert reminders_of(decided) == reminders_of(expiring) == [1]


def test_each_reminder_is_an_audit_row_a_webhook_event_and_an_email(author, reviewer):
    reviewer.email = "bob@example.com"
    reviewer.save()
    reviewer.groups.add(Group.objects.create(name="support"))
    approval = refund(author)
    WebhookEndpoint.objects.create(
        url="https://example.com/hook",
        secret="s" * 32,
        events=["approval.reminded"],
        created_by=reviewer,
    )
    for minutes in (0, 10):
        approvals_chase(now=approval.remind_at + timedelta(minutes=minutes))
    events = list(RunEvent.objects.filter(run=approval.run, kind="approval_reminded"))
    assert [event.payload["reminder"] for event in events] == [1, 2]
    assert all(event.hash for event in events)  # on the run's audit chain

    rows = deliveries_for_events(
        approval.run_id,
        [
            {"seq": e.seq, "kind": e.kind, "payload": e.payload, "at": e.at.isoformat()}
            for e in events
        ],
    )

    emails = [row.payload["reminder"] for row in rows if row.channel == "email"]
    webhooks = [
        row.payload["data"]["payload"]["reminder"] for row in rows if row.channel == "webhook"
    ]
    assert sorted(emails) == sorted(webhooks) == [1, 2]  # the second is not taken for the first
    second = approval_chase_email(approval.pk, escalated=False, user_id=reviewer.pk, reminder=2)
    assert second is not None and second.recipients == ["bob@example.com"]
    assert second.subject.endswith(
        "still waits for a decision (reminder 2) (rule refunds_to_support)"
    )


def test_an_escalation_brings_the_request_to_the_escalation_groups_queue(author, django_user_model):
    approval = refund(author)
    fiona = decider(django_user_model, "fiona", "finance")
    assert not approvals_queue(fiona, scope="mine").exists()
    past(approval, escalate_at=True)

    sweep_once()  # the worker side's sweep sends them: no cron, no thread per request

    approval.refresh_from_db()
    assert approval.groups == ["support", "finance"] and approval.escalated_at is not None
    assert list(approvals_queue(fiona, scope="mine")) == [approval]
    event = RunEvent.objects.get(run=approval.run, kind="approval_escalated").payload
    assert event["to"] == ["finance"]


def test_reminders_and_escalations_are_webhook_events_and_emails(author, reviewer):
    reviewer.email = "bob@example.com"  # one e-mail row each reviewer with an address
    reviewer.save()
    approval = refund(author)
    WebhookEndpoint.objects.create(
        url="https://example.com/hook",
        secret="s" * 32,
        events=["approval.reminded", "approval.escalated"],
        created_by=reviewer,
    )
    past(approval, remind_at=True, escalate_at=True)
    approvals_chase()
    events = [
        {"seq": e.seq, "kind": e.kind, "payload": e.payload, "at": e.at.isoformat()}
        for e in RunEvent.objects.filter(
            run=approval.run, kind__in=["approval_reminded", "approval_escalated"]
        )
    ]

    rows = deliveries_for_events(approval.run_id, events)

    kinds = sorted((row.channel, row.event_type) for row in rows)
    assert kinds == [
        ("email", "approval.escalated"),
        ("email", "approval.reminded"),
        ("webhook", "approval.escalated"),
        ("webhook", "approval.reminded"),
    ]


def test_the_rules_ttl_expires_it(author):
    approval = refund(author)
    now = timezone.now()
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=now - timedelta(hours=2, seconds=1), expires_at=now - timedelta(seconds=1)
    )

    assert approvals_expire() == [approval.run_id]
    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.EXPIRED
    assert approval.reason == "approval expired: no decision within 2 h"


def test_a_decided_request_is_not_chased(author, django_user_model):
    approval = refund(author)
    Approval.objects.filter(pk=approval.pk).update(decision=Approval.Decision.REJECTED)
    past(approval, remind_at=True, escalate_at=True)

    assert approvals_chase() == 0
