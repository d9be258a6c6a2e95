"""Deadlines from approval rules: reminders and escalations go out once each, through the
notifier (webhook events and e-mail), in the timeline and the audit; escalation opens a
routed request to the escalation groups; ttl sets the expiry."""

from datetime import timedelta

import pytest
from django.utils import timezone

from plans.models import Approval, RunEvent
from plans.notifications.deliveries import deliveries_for_events
from plans.notifications.models import WebhookEndpoint
from plans.runtime.sweeper import sweep_once
from plans.selectors.approvals import approvals_queue
from plans.services.approvals import approvals_chase, approvals_expire
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


def test_a_reminder_goes_out_once_when_it_falls_due(author):
    approval = refund(author)
    assert approvals_chase() == 0  # not due yet
    past(approval, remind_at=True)

    assert approvals_chase() == 1
    assert approvals_chase() == 0  # once

    assert RunEvent.objects.filter(run=approval.run, kind="approval_reminded").count() == 1


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
