"""Claims: "I'm on it" shows who and since when; others decide only after an explicit,
audited takeover or once the claim lapses; a claim never holds off expiry."""

from datetime import timedelta

import pytest
from django.utils import timezone

from plans.models import Approval, RunEvent
from plans.services.approvals import (
    ApprovalRefused,
    approval_claim,
    approval_decide,
    approvals_expire,
)
from tests.reviewing import decider, refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(author):
    return waiting_approval(author, refund_plan())


@pytest.fixture
def erin(django_user_model):
    return decider(django_user_model, "erin")


def test_a_claim_shows_who_and_since_when(waiting, reviewer):
    claimed = approval_claim(approval=waiting, reviewer=reviewer)

    assert claimed.claimed_by == reviewer and claimed.claim_until is not None
    event = RunEvent.objects.get(run=waiting.run, kind="approval_claimed").payload
    assert (event["reviewer"], event["took_over_from"]) == ("bob", "")


def test_another_reviewer_may_not_decide_a_claimed_request(waiting, reviewer, erin):
    approval_claim(approval=waiting, reviewer=reviewer)

    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=waiting, reviewer=erin, approve=True)
    assert refused.value.code == "claimed" and "bob claimed this" in str(refused.value)
    with pytest.raises(ApprovalRefused) as again:
        approval_claim(approval=waiting, reviewer=erin)
    assert again.value.code == "claimed"

    approval_decide(approval=waiting, reviewer=reviewer, approve=True)  # the claimer may
    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.APPROVED


def test_taking_a_claim_over_is_explicit_and_audited(waiting, reviewer, erin):
    approval_claim(approval=waiting, reviewer=reviewer)

    approval_claim(approval=waiting, reviewer=erin, take_over=True)
    approval_decide(approval=waiting, reviewer=erin, approve=False, reason="no")

    taken = RunEvent.objects.filter(run=waiting.run, kind="approval_claimed").last().payload
    assert (taken["reviewer"], taken["took_over_from"]) == ("erin", "bob")


def test_a_claim_lapses_after_the_configured_time(waiting, reviewer, erin, settings):
    settings.AGENTSITE_APPROVAL_CLAIM_S = 60
    approval_claim(approval=waiting, reviewer=reviewer)
    Approval.objects.filter(pk=waiting.pk).update(claimed_at=timezone.now() - timedelta(minutes=2))

    approval_decide(approval=waiting, reviewer=erin, approve=True)

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.APPROVED


def test_a_claim_never_holds_off_expiry(waiting, reviewer, settings):
    approval_claim(approval=waiting, reviewer=reviewer)
    settings.AGENTSITE_APPROVAL_TTL_S = 60
    Approval.objects.filter(pk=waiting.pk).update(requested_at=timezone.now() - timedelta(hours=1))

    assert approvals_expire() == [waiting.run_id]
    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.EXPIRED


def test_only_someone_who_may_decide_it_may_claim_it(waiting, author, outsider):
    with pytest.raises(ApprovalRefused) as refused:
        approval_claim(approval=waiting, reviewer=outsider)
    assert refused.value.code == "not_a_reviewer"
