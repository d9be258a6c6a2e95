"""The gate with approval rules: a rule decides on the exact resolved arguments, once; a stored
decision is never re-evaluated, so no rule change turns a reject into a run."""

import pytest

from plans.demo import approval_rules as demo_rules
from plans.models import Approval, LedgerEntry, Run, RunEvent, Step
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests.reviewing import refund_plan

pytestmark = pytest.mark.django_db(transaction=True)

DEMO = ["plans.demo.approval_rules"]


def start(author, order_id="A-1001", amount=800):
    run = run_create(
        author=author,
        goal_text=f"Refund {amount} on {order_id}",
        plan_data=refund_plan(order_id, amount, reason="damaged"),
    )
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def test_a_small_refund_on_a_delivered_order_is_approved_by_the_rule_and_runs(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = DEMO
    run = start(author, "A-1001", 800)

    assert run.status == Run.Status.COMPLETED
    approval = Approval.objects.get(run=run)
    assert approval.decision == Approval.Decision.APPROVED
    assert approval.via == Approval.Via.RULE and approval.reviewer is None
    assert approval.rule == "small_refund_on_delivered_order"
    assert approval.rule_version == demo_rules.small_refund_on_delivered_order.version
    assert approval.rule_outcome == Approval.RuleOutcome.APPROVE
    assert LedgerEntry.objects.filter(kind="refund").count() == 1
    decided = RunEvent.objects.get(run=run, kind="approval_decided").payload
    assert decided["reviewer"] == "rule small_refund_on_delivered_order"
    assert decided["rule_version"] == approval.rule_version
    # Nobody was asked: no request event, so no e-mail or webhook for reviewers.
    assert not RunEvent.objects.filter(run=run, kind="approval_requested").exists()
    # A rule waits for nobody: decided at the very moment of the request, as stored.
    assert approval.decided_at == approval.requested_at


def test_the_same_refund_on_an_order_not_delivered_is_routed_to_finance(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = DEMO
    run = start(author, "A-1004", 800)

    assert run.status == Run.Status.AWAITING_APPROVAL
    approval = Approval.objects.get(run=run)
    assert approval.decision == Approval.Decision.PENDING
    assert approval.rule == "refund_before_delivery_goes_to_finance"
    assert approval.groups == ["finance"] and approval.approvals_needed == 1
    requested = RunEvent.objects.get(run=run, kind="approval_requested").payload
    assert requested["rule"] == approval.rule and requested["groups"] == ["finance"]
    assert not LedgerEntry.objects.exists()


def test_a_refund_over_fifty_thousand_needs_two_reviewers(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = DEMO
    run = start(author, "A-1002", 60_000)

    approval = Approval.objects.get(run=run)
    assert approval.rule == "large_refund_needs_two_reviewers"
    assert approval.approvals_needed == 2 and approval.groups == []


def test_a_refund_a_rule_denies_is_blocked_with_the_rules_reason(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = DEMO
    run = start(author, "A-1002", 600_000)

    step = Step.objects.get(plan__run=run, step_id=1)
    assert step.status == Step.Status.BLOCKED
    assert "huge_refund" in step.error and "bank desk" in step.error
    assert step.result.startswith("BLOCKED: issue_refund was denied by approval rule huge_refund")
    approval = Approval.objects.get(run=run)
    assert approval.decision == Approval.Decision.REJECTED and approval.via == Approval.Via.RULE
    assert not LedgerEntry.objects.exists()


def test_without_a_matching_rule_one_reviewer_decides_as_before(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = DEMO
    run = start(author, "A-1001", 2_000)

    approval = Approval.objects.get(run=run)
    assert approval.decision == Approval.Decision.PENDING
    assert (approval.rule, approval.approvals_needed, approval.groups) == ("", 1, [])


def test_a_rejection_stays_final_when_the_rules_change_to_approve_it(author, reviewer, settings):
    run = start(author, "A-1001", 2_000)
    approval = Approval.objects.get(run=run)
    approval_decide(approval=approval, reviewer=reviewer, approve=False, reason="no", resume=False)

    # The rules are loosened before the run continues: the call is not evaluated again.
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.approve_everything"]
    advance_run(run.pk)
    advance_run(run.pk)  # and once more, as a recovering worker would

    run.refresh_from_db()
    assert run.status == Run.Status.BLOCKED
    assert Step.objects.get(plan__run=run).status == Step.Status.BLOCKED
    assert list(Approval.objects.filter(run=run).values_list("decision", flat=True)) == ["rejected"]
    assert not LedgerEntry.objects.exists()


def test_a_request_made_before_the_rules_changed_still_waits_for_a_person(author, settings):
    run = start(author, "A-1001", 2_000)
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.approve_everything"]
    advance_run(run.pk)

    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert Approval.objects.get(run=run).decision == Approval.Decision.PENDING
    assert not LedgerEntry.objects.exists()


def test_a_rule_that_raises_leaves_the_call_to_a_reviewer_and_says_why(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.raises_first"]
    run = start(author, "A-1001", 800)

    approval = Approval.objects.get(run=run)
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert approval.decision == Approval.Decision.PENDING
    assert approval.rule == "broken_lookup"
    assert "KeyError" in approval.rule_error
    assert not LedgerEntry.objects.exists()


def test_rule_modules_that_cannot_be_loaded_leave_the_call_to_a_reviewer(author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.no_such_module"]
    run = start(author, "A-1001", 800)

    approval = Approval.objects.get(run=run)
    assert approval.decision == Approval.Decision.PENDING
    assert "no_such_module" in approval.rule_error


def test_the_authors_groups_are_read_once_for_a_round_of_calls_the_rules_see(author, settings):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.AGENTSITE_APPROVAL_RULE_MODULES = DEMO
    steps = [
        {**refund_plan(order, 800, reason="damaged")["steps"][0], "id": i}
        for i, order in enumerate(("A-1001", "A-1002", "A-1004"), start=1)
    ]
    run = run_create(author=author, goal_text="Three refunds", plan_data={"steps": steps})

    with CaptureQueriesContext(connection) as queries:
        advance_run(run.pk)

    assert Approval.objects.filter(run=run).count() == 3
    groups_read = [q["sql"] for q in queries if '"auth_user_groups"' in q["sql"]]
    assert len(groups_read) == 1, groups_read
