"""Reading plans and their steps: the current version, the one a page shows, one step."""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, router
from django.db.models import Model

from plans.bulk import column_sql, rows_where
from plans.models import Approval, Goal, HumanQuestion, ModelCall, Plan, Run, Step, ToolCall
from plans.selectors.runs import progress_status


def plan_current(run: Run) -> Plan | None:
    """The run's latest valid plan version, if any."""
    # Prepared SQL: every advance reads it, and the ORM costs it ~0.5 ms (./dev bench).
    plans = rows_where(Plan, run=run.pk, is_valid=True, order_by="-version", limit=1)
    return plans[0] if plans else None


def plan_shown(run: Run) -> Plan | None:
    """The plan the run page shows: the current valid one, else the latest (invalid) attempt."""
    if plan := plan_current(run):
        return plan
    latest = rows_where(Plan, run=run.pk, order_by="-version", limit=1)
    return latest[0] if latest else None


def run_with_goal(run_id: int) -> Run:
    """The run with its goal and the goal's author, as a run page's push shows them (raises
    Run.DoesNotExist).

    Prepared SQL, one table at a time: every push of a watched run reads them, and the ORM's
    join costs ten times the three reads (~0.2 ms).
    """
    runs = rows_where(Run, id=run_id)
    if not runs:
        raise Run.DoesNotExist(f"no run {run_id}")
    run = runs[0]
    (goal,) = rows_where(Goal, id=run.goal_id)
    (goal.author,) = rows_where(get_user_model(), id=goal.author_id)
    run.goal = goal
    return run


def plan_version_get(run: Run, version: int | None) -> Plan | None:
    """The run's plan of that version; without one, the latest valid (else latest) version."""
    plans = run.plans.order_by("-version")
    if version is not None:
        return plans.filter(version=version).first()
    return plans.filter(is_valid=True).first() or plans.first()


def plans_valid(run: Run) -> list[Plan]:
    """The run's valid plan versions, oldest first."""
    return list(Plan.objects.filter(run=run, is_valid=True).order_by("version"))


def plan_steps_list(plan: Plan | None) -> list[Step]:
    """The plan's steps in step order (none without a plan)."""
    return rows_where(Step, plan=plan.pk, order_by="step_id") if plan else []


def plan_step_tally(plan: Plan | None) -> tuple[dict[str, int], int, int]:
    """The plan's steps counted per progress status, the last round started and the last round,
    in one query (no rows read)."""
    if plan is None:
        return {}, 0, 0
    rows = _counted("step_tally", plan.pk)  # (status, tool, count, last round)
    statuses: dict[str, int] = {}
    for status, tool, count, _ in rows:
        shown = progress_status(status, tool)
        statuses[shown] = statuses.get(shown, 0) + count
    # A replanned version that has not started is at no round yet, whatever rounds an
    # earlier version reached.
    started = (last for status, _, _, last in rows if status != Step.Status.PENDING)
    return statuses, max(started, default=0), max((row[3] for row in rows), default=0)


# Up to this many steps are read one by one with prepared SQL (~0.07 ms each); more in one query
# the ORM builds (~1.3 ms).
STEPS_READ_APART = 16


def plan_steps_of(plan: Plan | None, step_ids: Collection[int]) -> list[Step]:
    """Those of the plan's steps, in step order (a live push re-renders only the steps it names)."""
    if plan is None or not step_ids:
        return []
    if len(step_ids) > STEPS_READ_APART:
        return list(plan.steps.filter(step_id__in=step_ids))
    ids = sorted(i for i in step_ids if type(i) is int)
    return [step for i in ids for step in rows_where(Step, plan=plan.pk, step_id=i)]


def plan_steps_page(plan: Plan | None, *, after: int, size: int) -> list[Step]:
    """`size` of the plan's steps after its first `after`, in step order."""
    return list(plan.steps.all()[after : after + size]) if plan else []


def step_get(plan: Plan, step_id: int) -> Step | None:
    return Step.objects.filter(plan=plan, step_id=step_id).first()


def step_inputs(step: Step) -> list[Step]:
    """The steps whose results the step's arguments were resolved from."""
    return list(Step.objects.filter(plan_id=step.plan_id, step_id__in=step.depends_on))


def step_approvals(step: Step) -> list[Approval]:
    return list(
        step.approvals.select_related("reviewer", "supersedes__reviewer").prefetch_related(
            "votes__reviewer"
        )
    )


def step_question(step: Step) -> HumanQuestion | None:
    """The question an ask_human step asked, with who answered it (None for other steps)."""
    return HumanQuestion.objects.filter(step=step).select_related("answered_by").first()


def step_calls(step: Step) -> list[ToolCall]:
    return list(step.tool_calls.order_by("attempt"))


def run_priced_apart(run: Run) -> dict[str, int]:
    """The run's model usage priced apart from its tokens: one-hour cache writes, web searches."""
    ((cache_write_1h, web_searches),) = _counted("priced_apart", run.pk)
    return {"cache_write_1h": cache_write_1h or 0, "web_searches": web_searches or 0}


def run_approval_counts(run: Run) -> dict[str, int]:
    """How many approvals the run asked for, and how many of them are decided."""
    ((requested, decided),) = _counted("approval_counts", run.pk)
    return {"requested": requested, "decided": decided or 0}


def _counted(name: str, pk: int) -> list[tuple[Any, ...]]:
    """The rows of one of the run page's counts for a plan's or a run's pk.

    Plain SQL built once per database: every push of a run page reads these, and building an
    ORM query costs many times what running it does (see plans.bulk).
    """
    connection = connections[router.db_for_read(Step)]
    with connection.cursor() as cursor:
        cursor.execute(_count_statement(connection.alias, name), [pk])
        return cursor.fetchall()


@functools.cache
def _count_statement(alias: str, name: str) -> str:
    quote = connections[alias].ops.quote_name

    def column(model: type[Model], field: str) -> str:
        return column_sql(model._meta, quote, field)

    step, approval, call = (quote(m._meta.db_table) for m in (Step, Approval, ModelCall))
    status, tool, rounds = (column(Step, name) for name in ("status", "tool", "round"))
    decided = f"{column(Approval, 'decision')} <> '{Approval.Decision.PENDING.value}'"
    statements = {
        "step_tally": (
            f"SELECT {status}, {tool}, COUNT(*), MAX({rounds}) FROM {step} "  # noqa: S608
            f"WHERE {column(Step, 'plan')} = %s GROUP BY {status}, {tool}"
        ),
        "approval_counts": (
            f"SELECT COUNT(*), SUM(CASE WHEN {decided} THEN 1 ELSE 0 END) "  # noqa: S608
            f"FROM {approval} WHERE {column(Approval, 'run')} = %s"
        ),
        "priced_apart": (
            f"SELECT SUM({column(ModelCall, 'cache_write_1h_tokens')}), "  # noqa: S608
            f"SUM({column(ModelCall, 'web_search_requests')}) "
            f"FROM {call} WHERE {column(ModelCall, 'run')} = %s"
        ),
    }
    return statements[name]
