"""Run again and fork: a new run linked to its origin, never inheriting its results or approvals.

"Run again" hands the same goal to the planner afresh; "fork" runs a plan version of the origin
(edited or not) as given. Either way every step runs in the new run, and every destructive step
asks for a fresh approval: an old approval never carries over (approvals bind to their step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from plans import engine
from plans.models import Plan, Run, Step
from plans.services.plans import plan_check
from plans.services.runs import GoalRejected, author_check, run_create, run_start
from plans.tools import get_registry
from plans.ui.charts import shown_json


@dataclass(frozen=True)
class PreviewStep:
    step_id: int
    tool: str
    args: Any
    destructive: bool
    # What happens to it in the new run, in words, and whether it repeats an effect of the origin.
    fate: str
    repeats_effect: bool = False


@dataclass
class ForkPreview:
    problems: list[str] = field(default_factory=list)
    steps: list[PreviewStep] = field(default_factory=list)

    @property
    def destructive_count(self) -> int:
        return sum(1 for step in self.steps if step.destructive)


def plan_json_of(plan: Plan) -> str:
    """A plan version as the editor shows it: the plan file format, pretty-printed."""
    steps = [
        {"id": s.step_id, "tool": s.tool, "args": s.args, "depends_on": s.depends_on}
        for s in plan.steps.order_by("step_id")
    ]
    # Hidden characters as JSON's own \u escapes: the editor reads back the same plan, and a
    # bidi control in an argument cannot make it read otherwise.
    return shown_json({"steps": steps}, indent=2)


def fork_preview(*, origin: Run, plan_text: str) -> ForkPreview:
    """The edited plan's problems (the same list a plan file gets), and what each step would do."""
    try:
        data = json.loads(plan_text)
    except ValueError as error:
        return ForkPreview(problems=[f"the plan is not valid JSON: {error}"])
    plan, problems = plan_check(data, max_steps=settings.AGENTSITE_MAX_PLAN_STEPS)
    if plan is None or problems:
        return ForkPreview(problems=problems or ["the plan could not be read"])
    registry = get_registry()
    # The origin's effects, by the call as planned and as made: a fork's step with the same
    # arguments (placeholders and all, or resolved) would very likely do it again.
    effects: set[str] = set()
    for tool, args, resolved in Step.objects.filter(
        plan__run=origin, destructive=True, status=Step.Status.SUCCEEDED
    ).values_list("tool", "args", "resolved_args"):
        effects.add(engine.args_sha256(tool, args or {}))
        effects.add(engine.args_sha256(tool, resolved or {}))
    preview = ForkPreview()
    for step in plan.steps:
        spec = registry.get(step.tool)
        destructive = bool(spec and spec.destructive)
        repeats = destructive and engine.args_sha256(step.tool, step.args) in effects
        if destructive:
            fate = "needs a fresh approval in the new run; no approval of the origin carries over"
            if repeats:
                fate += f" (it would repeat an effect of run #{origin.pk})"
        elif spec and spec.pure:
            fate = "runs again (results are never taken from another run)"
        else:
            fate = "runs again"
        preview.steps.append(
            PreviewStep(step.id, step.tool, dict(step.args), destructive, fate, repeats)
        )
    return preview


def run_rerun(*, origin: Run, author: User, via: str = "web") -> Run:
    """The same goal, with the same options, planned afresh as a new run linked to its origin."""
    goal = origin.goal
    with transaction.atomic():
        run = run_create(
            author=author,
            goal_text=goal.text,
            run_dependants_of_failures=goal.run_dependants_of_failures,
            require_plan_approval=goal.require_plan_approval,
            agent=goal.agent,
            via=via,
        )
        _link(run, origin, Run.Origin.RERUN, None)
    run_start(run)
    return run


def run_fork(
    *, origin: Run, author: User, plan_text: str, version: int | None, via: str = "web"
) -> Run:
    """A new run of the given plan (a version of the origin's, maybe edited); GoalRejected with
    the problems if the plan is not valid, and nothing is created then."""
    author_check(author, via=via)  # before the plan's problems: they are not an outsider's
    preview = fork_preview(origin=origin, plan_text=plan_text)
    if preview.problems:
        raise GoalRejected("goal_invalid", "The plan has problems: " + "; ".join(preview.problems))
    goal = origin.goal
    with transaction.atomic():
        run = run_create(
            author=author,
            goal_text=goal.text,
            plan_data=json.loads(plan_text),
            run_dependants_of_failures=goal.run_dependants_of_failures,
            require_plan_approval=goal.require_plan_approval,
            via=via,
        )
        _link(run, origin, Run.Origin.FORK, version)
    run_start(run)
    return run


def _link(run: Run, origin: Run, kind: str, version: int | None) -> None:
    run.origin = origin
    run.origin_kind = kind
    run.origin_plan_version = version
    run.save(update_fields=["origin", "origin_kind", "origin_plan_version"])
