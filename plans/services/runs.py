"""Creating, starting, cancelling and summarising runs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from plans import engine
from plans.journal.events import append_events
from plans.journal.tasks import run_enqueue
from plans.models import Experiment, Goal, Run
from plans.roles import PEOPLES_CHANNELS, may_submit_goals
from plans.selectors.plans import plan_current
from plans.services.plans import plan_check, plan_store
from plans.services.refusals import Refused, text_clean

GOAL_MAX_CHARS = 2000
NOT_AN_AUTHOR = (
    "Only authors can hand the agent a goal. Ask an administrator to add you to the "
    "“authors” group."
)


class GoalRejected(Refused, ValueError):
    """The run cannot be created: its goal or plan (code goal_invalid) or its author
    (not_an_author); the message says why."""


def goal_clean(text: str) -> str:
    return text_clean(
        text,
        refused=GoalRejected,
        code="goal_invalid",
        holds="The goal holds",
        empty="The goal is empty: say what you want the agent to do.",
        max_chars=GOAL_MAX_CHARS,
        too_long="The goal is {length} characters long; the limit is {limit}.",
    )


def author_check(author: User, *, via: str) -> None:
    """Through the pages and the API, only authors may create runs (the CLI is the operator's)."""
    if via in PEOPLES_CHANNELS and not may_submit_goals(author):
        raise GoalRejected("not_an_author", NOT_AN_AUTHOR)


def run_create(
    *,
    author: User,
    goal_text: str,
    plan_data: Any = None,
    run_dependants_of_failures: bool = False,
    require_plan_approval: bool = False,
    budget_usd: Decimal | None = None,
    budget_tokens: int | None = None,
    max_parallel_steps: int | None = None,
    lift_plan_step_cap: bool = False,
    agent: str = Goal.Agent.PLAN_EXECUTE,
    experiment: Experiment | None = None,
    via: str = "cli",
) -> Run:
    """Create a goal and its run; with plan_data the plan is validated now, skipping the planner.

    agent picks the loop (plan-and-execute or ReAct); an experiment tags the run as an eval run.
    via names the channel: "web" and "api" (people signed in) need an author (author_check).
    """
    author_check(author, via=via)
    _agent_check(agent, plan_data=plan_data, require_plan_approval=require_plan_approval)
    text = goal_clean(goal_text)
    with transaction.atomic():
        goal = Goal.objects.create(
            author=author,
            text=text,
            run_dependants_of_failures=run_dependants_of_failures,
            require_plan_approval=require_plan_approval,
            agent=agent,
        )
        run = Run.objects.create(
            goal=goal,
            experiment=experiment,
            # An explicit 0 is a budget (the run stops before its first model call), not "unset".
            budget_usd=Decimal(
                str(budget_usd if budget_usd is not None else settings.AGENTSITE_RUN_BUDGET_USD)
            ),
            budget_tokens=(
                budget_tokens if budget_tokens is not None else settings.AGENTSITE_RUN_BUDGET_TOKENS
            ),
            max_parallel_steps=_parallel_steps(max_parallel_steps),
        )
        append_events(run.pk, [("run_created", {"goal": text, "author": author.get_username()})])
        if plan_data is not None:
            limit = None if lift_plan_step_cap else settings.AGENTSITE_MAX_PLAN_STEPS
            plan, problems = plan_check(plan_data, max_steps=limit)
            plan_store(
                run=run,
                raw_output=engine.canonical_json(plan_data),
                plan=plan,
                problems=problems,
                source="file",
            )
    return run


def _agent_check(agent: str, *, plan_data: Any, require_plan_approval: bool) -> None:
    if agent not in Goal.Agent.values:
        raise ValueError(f"unknown agent {agent!r}; use one of {', '.join(Goal.Agent.values)}")
    if plan_data is not None and agent != Goal.Agent.PLAN_EXECUTE:
        raise ValueError("a plan file is run by the plan-and-execute agent only")
    if agent == Goal.Agent.REACT and (
        require_plan_approval or settings.AGENTSITE_REQUIRE_PLAN_APPROVAL
    ):
        # ReAct decides each call as it goes: there is no plan a reviewer could approve first.
        raise GoalRejected(
            "goal_invalid",
            "The ReAct agent has no plan to approve before it acts; under plan approval, "
            "choose plan-and-execute.",
        )


def run_start(run: Run) -> None:
    """Hand the run to a worker (after commit); the caller returns at once."""

    run_enqueue(run.pk)


def _parallel_steps(requested: int | None) -> int:
    steps = settings.AGENTSITE_MAX_PARALLEL_STEPS if requested is None else requested
    if steps < 1:
        raise ValueError(f"a run must be allowed at least 1 step at a time, got {steps}")
    return steps


def run_cancel(*, run: Run, user: User | None) -> Run:
    """Ask the run to stop: no new step starts; steps in flight finish and are recorded."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_terminal:
            return locked
        who = user.get_username() if user else "cli"
        append_events(
            locked.pk, [("cancel_requested", {"by": who})], run_fields={"cancel_requested": True}
        )
        if locked.status == Run.Status.AWAITING_APPROVAL or locked.lease_token is None:
            # Nobody is advancing it: a worker picks it up and ends it cleanly.
            run_start(locked)
    locked.refresh_from_db()
    return locked


def run_summary(run: Run) -> dict[str, Any]:
    """Everything the CLI's --json prints about a run."""
    plan = plan_current(run) or run.plans.order_by("-version").first()
    steps = list(plan.steps.all()) if plan else []
    rounds: dict[int, list[int]] = {}
    for step in steps:
        rounds.setdefault(step.round, []).append(step.step_id)
    return {
        "run_id": run.pk,
        "status": run.status,
        "goal": run.goal.text,
        "plan": {
            "version": plan.version if plan else None,
            "valid": plan.is_valid if plan else False,
            "problems": plan.problems if plan else [],
            "steps": [
                {"id": s.step_id, "tool": s.tool, "args": s.args, "depends_on": s.depends_on}
                for s in steps
            ],
        },
        "rounds": [sorted(rounds[depth]) for depth in sorted(rounds)],
        "steps": {
            str(s.step_id): {
                "status": s.status,
                "result": s.result,
                "error": s.error,
                "round": s.round,
                "attempts": s.attempts,
                "reused_from": s.reused_from or None,
            }
            for s in steps
        },
        "answer": run.answer,
        "error": run.error,
        "model_calls": run.model_call_count,
        "tokens": {
            "input": run.input_tokens,
            "output": run.output_tokens,
            "cache_read": run.cache_read_tokens,
            "cache_write": run.cache_write_tokens,
        },
        "cost_usd": float(run.cost_usd),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }
