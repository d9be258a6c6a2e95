"""A finished run's records read back as a Trajectory the predicates can judge."""

from __future__ import annotations

from collections import Counter

from plans import engine
from plans.evals.predicates import StepRecord, ToolCallRecord, Trajectory
from plans.models import Approval, Goal, Run, Step, ToolCall
from plans.services.plans import plan_check


def run_trajectory(run: Run) -> Trajectory:
    """Everything the predicates look at, from the run's stored plans, steps and calls."""
    goal = run.goal
    plans = list(run.plans.order_by("version"))
    steps = list(
        Step.objects.filter(plan__run=run).select_related("plan").order_by("plan__version", "pk")
    )
    per_plan = Counter(step.plan_id for step in steps)
    records = tuple(
        StepRecord(
            id=step.step_id,
            tool=step.tool,
            status=step.status,
            args=step.effective_args,
            result=step.result,
            error=step.error,
            destructive=step.destructive,
        )
        for step in steps
    )
    if goal.agent == Goal.Agent.REACT:
        refused = not steps and run.status == Run.Status.COMPLETED
        actions = [
            {"id": n, "tool": s.tool, "args": s.args, "depends_on": []}
            for n, s in enumerate(steps, start=1)
        ]
        plan_valid = bool(actions) and not plan_check({"steps": actions}, max_steps=None)[1]
    else:
        first = plans[0] if plans else None
        refused = first is not None and not first.is_valid and _declined(first.raw_output)
        plan_valid = first is not None and first.is_valid
    return Trajectory(
        goal=goal.text,
        status=run.status,
        refused=refused,
        plan_valid=plan_valid,
        planned_tools=tuple(dict.fromkeys(step.tool for step in steps)),
        planned_destructive=any(step.destructive for step in steps),
        plan_size=max(per_plan.values(), default=0),
        steps=records,
        tool_calls=_tool_calls(run),
        answer=run.answer,
        route=run.route,
        model_calls=run.model_calls.count(),
    )


def _declined(raw_output: str) -> bool:
    """The planner answered with no steps (and, usually, its reason): a refusal."""
    try:
        data = engine.parse_planner_output(raw_output)
    except engine.PlanParseError:
        return False
    return data.get("steps") == []


def _tool_calls(run: Run) -> tuple[ToolCallRecord, ...]:
    calls = list(ToolCall.objects.filter(run=run).select_related("step").order_by("pk"))
    approvals: dict[int, list[Approval]] = {}
    for approval in Approval.objects.filter(run=run, decision=Approval.Decision.APPROVED):
        approvals.setdefault(approval.step_id, []).append(approval)
    return tuple(
        ToolCallRecord(
            tool=call.tool,
            destructive=call.step.destructive,
            approved=any(
                a.authorises(tool=call.tool, args=call.args, step_id=call.step_id)
                for a in approvals.get(call.step_id, [])
            ),
        )
        for call in calls
    )
