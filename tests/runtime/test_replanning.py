"""Bounded replanning after failures, through the real Anthropic SDK on a mock transport."""

import json

import pytest

from plans.models import Approval, ModelCall, Run, RunEvent, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


def plan(*steps):
    return json.dumps({"steps": list(steps)})


def step(step_id, tool, args, depends_on=()):
    return {"id": step_id, "tool": tool, "args": args, "depends_on": list(depends_on)}


def run_goal(author, text="Total price of an iPhone 16 and a fallback"):
    run = run_create(author=author, goal_text=text)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def test_a_failure_leads_to_one_replan_that_keeps_unchanged_results(author, claude_plans):
    server = claude_plans(
        plan(
            step(1, "price", {"item": "iPhone 16"}),
            step(2, "explode", {"message": "supplier down"}),
            step(3, "echo", {"text": "{{1}} and {{2}}"}, [1, 2]),
        ),
        plan(
            step(1, "price", {"item": "iPhone 16"}),
            step(2, "echo", {"text": "fallback"}),
            step(3, "echo", {"text": "{{1}} and {{2}}"}, [1, 2]),
        ),
    )

    run = run_goal(author)

    v1, v2 = run.plans.order_by("version")
    steps = {s.step_id: s for s in v2.steps.all()}
    assert server.purposes == ["plan", "replan", "answer"]
    assert v2.parent_id == v1.pk and v2.source == "replan"
    assert run.status == Run.Status.COMPLETED
    assert steps[3].result == "79900 and fallback"
    assert ToolCall.objects.filter(run=run, tool="price").count() == 1  # reused, not rerun
    reused = RunEvent.objects.get(run=run, kind="step_finished", payload__reused_from__isnull=False)
    assert reused.payload["reused_from"] == "plan v1 step 1"
    assert list(ModelCall.objects.filter(run=run).values_list("purpose", flat=True)) == [
        "plan",
        "replan",
        "answer",
    ]
    assert RunEvent.objects.filter(run=run, kind="replan_started").count() == 1


def test_a_replan_calls_tools_not_declared_pure_again_and_never_reuses_across_an_effect(
    author, reviewer, claude_plans, settings
):
    from tests import bank_tools

    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools", "tests.bank_tools"]
    bank_tools.reset(A=100, B=0)
    move = {"source": "A", "target": "B", "amount": 30}
    server = claude_plans(
        plan(
            step(1, "now", {}),
            step(2, "double", {"number": 4}),
            step(3, "transfer", move),
            step(4, "explode", {"message": "supplier down"}, [3]),
        ),
        plan(
            step(1, "now", {}),
            step(2, "double", {"number": 4}),
            step(3, "balance", {"account": "A"}),
        ),
    )
    run = run_create(author=author, goal_text="Move 30 and report")
    advance_run(run.pk)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    run.refresh_from_db()
    v2 = {s.step_id: s for s in run.plans.get(version=2).steps.all()}
    assert server.purposes == ["plan", "replan", "answer"]
    assert bank_tools.calls["now"] == 2  # time-dependent: called again in version 2
    assert v2[1].reused_from == ""
    # double is pure, but a transfer ran after version 1's call began: not reused.
    assert bank_tools.calls["double"] == 2 and v2[2].reused_from == ""
    assert v2[3].result == 70


def test_replanning_stops_at_the_limit_and_the_answer_says_what_failed(
    author, claude_plans, settings
):
    settings.AGENTSITE_MAX_REPLANS = 1
    failing = plan(step(1, "explode", {"message": "supplier down"}))
    server = claude_plans(failing, plan(step(1, "explode", {"message": "still down"})))

    run = run_goal(author)

    assert server.purposes == ["plan", "replan", "answer"]
    assert run.plans.count() == 2
    assert run.status == Run.Status.FAILED
    answer_prompt = server.prompts[-1]
    assert "still down" in answer_prompt and "status failed" in answer_prompt
    assert run.answer.startswith("Here is what happened")


def test_a_replan_may_not_propose_a_declined_destructive_call_again(author, reviewer, claude_plans):
    refund = step(2, "issue_refund", {"order_id": "A-1001", "amount_inr": 2499, "reason": "dmg"})
    claude_plans(
        plan(step(1, "explode", {"message": "crm down"}), refund),
        plan(step(1, "echo", {"text": "crm back"}), refund),
    )
    run = run_create(author=author, goal_text="Refund order A-1001")
    advance_run(run.pk)
    approval_decide(
        approval=Approval.objects.get(run=run), reviewer=reviewer, approve=False, reason="no"
    )

    run.refresh_from_db()
    v2 = run.plans.get(version=2)
    assert not v2.is_valid
    assert any("declined issue_refund" in problem for problem in v2.problems)
    assert run.status == Run.Status.BLOCKED
    assert Step.objects.get(plan__version=1, plan__run=run, step_id=2).status == "blocked"
