"""Two-person rules: a call a rule says needs n approvals runs only after the n-th distinct
approval of the same arguments; the author never counts; a reject by anyone is final."""

import pytest
from django.contrib.auth.models import Group, Permission

from plans.models import Approval, ApprovalVote, LedgerEntry, Run, RunEvent, Step
from plans.services.approvals import ApprovalRefused, approval_decide
from tests.reviewing import approve_all_at_once, decider, refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = refund_plan("A-1002", 60000, reason="returned")


@pytest.fixture
def waiting(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    approval = waiting_approval(author, PLAN, goal="Refund A-1002")
    assert approval.approvals_needed == 2
    return approval


def test_the_first_approval_is_counted_and_the_call_waits(waiting, reviewer):
    approval_decide(approval=waiting, reviewer=reviewer, approve=True)

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.PENDING
    assert waiting.approvals_counted == 1
    assert waiting.run.status == Run.Status.AWAITING_APPROVAL
    counted = RunEvent.objects.get(run=waiting.run, kind="approval_counted").payload
    assert (counted["counted"], counted["needed"], counted["reviewer"]) == (1, 2, "bob")
    assert not LedgerEntry.objects.exists()


def test_the_second_distinct_approval_releases_the_call(waiting, reviewer, django_user_model):
    approval_decide(approval=waiting, reviewer=reviewer, approve=True)
    second = decider(django_user_model, "erin")
    approval_decide(approval=waiting, reviewer=second, approve=True)

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.APPROVED
    assert waiting.reviewer == second
    assert Run.objects.get(pk=waiting.run_id).status == Run.Status.COMPLETED
    assert LedgerEntry.objects.filter(kind="refund").count() == 1


def test_one_reviewer_approving_twice_counts_once(waiting, reviewer):
    approval_decide(approval=waiting, reviewer=reviewer, approve=True)
    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=waiting, reviewer=reviewer, approve=True)

    assert refused.value.code == "already_approved"
    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.PENDING and waiting.approvals_counted == 1


def test_the_author_never_counts_even_without_four_eyes(waiting, author, settings):
    settings.AGENTSITE_FOUR_EYES = False
    author.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    author = type(author).objects.get(pk=author.pk)

    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=waiting, reviewer=author, approve=True)

    assert refused.value.code == "four_eyes"
    assert not ApprovalVote.objects.exists()


def test_a_reject_after_one_approval_is_final(waiting, reviewer, django_user_model):
    approval_decide(approval=waiting, reviewer=reviewer, approve=True)
    second = decider(django_user_model, "erin")
    approval_decide(approval=waiting, reviewer=second, approve=False, reason="not returned yet")

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.REJECTED
    assert Step.objects.get(plan__run=waiting.run).status == Step.Status.BLOCKED
    third = decider(django_user_model, "frank")
    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=waiting, reviewer=third, approve=True)
    assert refused.value.code == "already_decided"
    assert not LedgerEntry.objects.exists()


def test_an_edit_by_a_later_approver_restarts_the_count_on_the_new_arguments(
    waiting, reviewer, django_user_model
):
    approval_decide(approval=waiting, reviewer=reviewer, approve=True)
    second = decider(django_user_model, "erin")
    edited = {"order_id": "A-1002", "amount_inr": 55000, "reason": "returned, one item kept"}
    approval_decide(approval=waiting, reviewer=second, approve=True, edited_args=edited)

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.PENDING  # bob approved 60,000, not 55,000
    assert waiting.args == edited and waiting.approvals_counted == 1
    assert not LedgerEntry.objects.exists()

    approval_decide(approval=waiting, reviewer=reviewer, approve=True)  # bob, on the new amount

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.APPROVED
    assert LedgerEntry.objects.get(kind="refund").details["amount_inr"] == 55000


def test_a_decision_on_arguments_other_than_those_seen_is_refused(waiting, reviewer):
    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=waiting, reviewer=reviewer, approve=True, seen_sha256="0" * 64)

    assert refused.value.code == "stale_hash"
    assert not ApprovalVote.objects.exists()


def test_concurrent_approvals_count_exactly_once_each(waiting, django_user_model):
    reviewers = [decider(django_user_model, f"r{i}") for i in range(4)]
    outcomes = approve_all_at_once(waiting, reviewers)

    waiting.refresh_from_db()
    assert waiting.decision == Approval.Decision.APPROVED
    # The first two count (one each); those after them find it decided.
    assert sorted(outcomes) == ["already_decided", "already_decided", "recorded", "recorded"]
    assert ApprovalVote.objects.filter(approval=waiting).count() == 2
    assert RunEvent.objects.filter(run=waiting.run, kind="approval_counted").count() == 1
    assert RunEvent.objects.filter(run=waiting.run, kind="approval_decided").count() == 1


def test_a_routed_request_is_decided_only_by_members_of_its_groups(author, reviewer, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    plan = refund_plan("A-1004", 500, reason="returned")
    approval = waiting_approval(author, plan, goal="Refund A-1004")
    assert approval.groups == ["finance"]

    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=approval, reviewer=reviewer, approve=True)
    assert refused.value.code == "not_in_group"

    reviewer.groups.add(Group.objects.get_or_create(name="finance")[0])
    member = type(reviewer).objects.get(pk=reviewer.pk)
    approval_decide(approval=approval, reviewer=member, approve=True)
    assert LedgerEntry.objects.filter(kind="refund").count() == 1


def test_two_from_finance_means_two_members_of_finance(
    author, reviewer, settings, django_user_model
):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.two_of_finance"]
    approval = waiting_approval(author, PLAN, goal="Refund A-1002")

    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(approval=approval, reviewer=reviewer, approve=True)
    assert refused.value.code == "not_in_group"
    for name in ("fin1", "fin2"):
        approval_decide(
            approval=approval, reviewer=decider(django_user_model, name, "finance"), approve=True
        )
    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.APPROVED
