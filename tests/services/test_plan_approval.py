"""The plan-approval policy: a reviewer approves the whole plan before any step runs."""

import pytest

from plans.models import Run, RunEvent, ToolCall
from plans.runtime.advance import advance_run
from plans.selectors.plans import plan_current
from plans.services.approvals import ApprovalRefused
from plans.services.plans import plan_decide
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)

GOAL = "Total price of an iPhone 16 and AirPods 4 in INR"


def held_run(author, **options):
    run = run_create(author=author, goal_text=GOAL, require_plan_approval=True, **options)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def test_no_step_runs_before_the_plan_is_approved(author):
    run = held_run(author)

    assert run.status == Run.Status.AWAITING_PLAN_APPROVAL
    assert run.lease_token is None
    assert not ToolCall.objects.filter(run=run).exists()
    assert RunEvent.objects.filter(run=run, kind="plan_approval_requested").count() == 1


def test_an_approved_plan_runs_to_completion(author, reviewer):
    run = held_run(author)

    plan_decide(plan=plan_current(run), reviewer=reviewer, approve=True)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert "92800" in run.answer
    assert plan_current(run).decided_by == reviewer


def test_a_rejected_plan_ends_the_run_blocked_without_running_anything(author, reviewer):
    run = held_run(author)

    plan_decide(plan=plan_current(run), reviewer=reviewer, approve=False, reason="wrong items")

    run.refresh_from_db()
    assert run.status == Run.Status.BLOCKED
    assert "wrong items" in run.error
    assert not ToolCall.objects.filter(run=run).exists()


def test_the_author_cannot_approve_their_own_plan_under_four_eyes(author):
    from django.contrib.auth.models import Permission

    author.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    author = type(author).objects.get(pk=author.pk)
    run = held_run(author)

    with pytest.raises(ApprovalRefused, match="Four-eyes"):
        plan_decide(plan=plan_current(run), reviewer=author, approve=True)
    assert plan_current(run).decision == ""


def test_a_plan_cannot_be_decided_twice(author, reviewer):
    run = held_run(author)
    plan_decide(plan=plan_current(run), reviewer=reviewer, approve=False, reason="no")

    with pytest.raises(ApprovalRefused):
        plan_decide(plan=plan_current(run), reviewer=reviewer, approve=True)


def test_the_global_setting_holds_every_plan(author, settings):
    settings.AGENTSITE_REQUIRE_PLAN_APPROVAL = True
    run = run_create(author=author, goal_text=GOAL)
    advance_run(run.pk)

    assert Run.objects.get(pk=run.pk).status == Run.Status.AWAITING_PLAN_APPROVAL


def test_a_plan_rejection_reason_that_cannot_be_stored_is_refused(author, reviewer):
    run = held_run(author)

    with pytest.raises(ApprovalRefused, match="The reason holds text that cannot be stored"):
        plan_decide(plan=plan_current(run), reviewer=reviewer, approve=False, reason="no\x00")

    assert plan_current(run).decision == ""
