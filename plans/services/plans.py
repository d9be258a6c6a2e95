"""Plans: checked (a file's or the planner's), stored as a version, decided on; the worker asks the
planner and replanner through plans.runtime.planning."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from plans import engine
from plans.bulk import insert_new, insert_rows, new_row, reload, rows_where
from plans.journal.events import append_events
from plans.journal.leases import Lease
from plans.journal.tasks import run_enqueue
from plans.models import Plan, Run, Step
from plans.roles import PEOPLES_CHANNELS, four_eyes_forbids
from plans.selectors.plans import plan_current
from plans.services.approvals import (
    ApprovalRefused,
    four_eyes_refused,
    reason_clean,
    rejection_reason_check,
    reviewer_check,
)
from plans.services.forecasts import plan_forecast
from plans.tools import get_registry


class PlanRefused(ApprovalRefused):
    """A decision on a whole plan that cannot be recorded. Codes as ApprovalRefused's, and
    not_waiting (decided meanwhile, or replaced by a newer version) and stale_plan (the API)."""


def plan_check(data: Any, *, max_steps: int | None) -> tuple[engine.Plan | None, list[str]]:
    """Validate plan data against the registered tools: (plan, []) or (None, problems)."""
    try:
        registry = get_registry(looking_for=_named_tools(data))
        return engine.validate_plan(data, registry, max_steps=max_steps), []
    except engine.PlanInvalid as invalid:
        return None, [str(problem) for problem in invalid.problems]


def _named_tools(data: Any) -> list[str]:
    # A tool a server added since its list was read is looked for before the plan is refused.
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        return []
    return [s["tool"] for s in steps if isinstance(s, dict) and isinstance(s.get("tool"), str)]


def plan_parse_and_check(
    text: str, *, max_steps: int | None
) -> tuple[engine.Plan | None, list[str], Any]:
    """Parse planner text and validate it: (plan, problems, parsed data or None)."""
    try:
        data = engine.parse_planner_output(text)
    except engine.PlanParseError as error:
        return None, [str(error)], None
    plan, problems = plan_check(data, max_steps=max_steps)
    return plan, problems, data


def plan_store(
    *,
    run: Run,
    raw_output: str,
    plan: engine.Plan | None,
    problems: list[str],
    source: str,
    lease: Lease | None = None,
    ends_run_if_invalid: bool = True,
) -> Plan:
    """Store a plan version and its steps; an invalid first plan ends the run as invalid_plan."""
    registry = get_registry()
    # Before the transaction: the run in hand counts the plan calls just made, not yet flushed.
    forecast = (
        plan_forecast(plan=plan, registry=registry, spent_usd=run.cost_usd)
        if plan is not None
        else None
    )
    # Prepared statements, not the ORM: every submitted goal, planner answer and replan stores
    # a plan, and building the ORM's queries cost several times running them.
    with transaction.atomic():
        latest = rows_where(Plan, run_id=run.pk, order_by="-version", limit=1)
        parent = latest[0] if latest else None
        row = Plan(
            run=run,
            version=parent.version + 1 if parent else 1,
            parent=parent,
            source=source,
            raw_output=engine.storable(raw_output),
            is_valid=plan is not None,
            problems=engine.storable(problems),
            forecast=forecast,
        )
        insert_new(row)
        run_fields: dict[str, Any] = {}
        if plan is not None:
            depths = engine.depths(plan)
            insert_rows(
                Step,
                [
                    new_row(
                        Step(
                            plan=row,
                            step_id=step.id,
                            tool=step.tool,
                            args=step.args,
                            depends_on=list(step.depends_on),
                            destructive=registry[step.tool].destructive,
                            round=depths[step.id],
                            repeat=step.repeat,
                        )
                    )
                    for step in plan.steps
                ],
            )
            run_fields["tools_used"] = sorted({*run.tools_used, *(s.tool for s in plan.steps)})
            if forecast is not None and run.forecast_usd is None and forecast["model_usd"]:
                # The first valid plan's forecast is the run's: the one a reviewer approves.
                run_fields["forecast_usd"] = Decimal(forecast["model_usd"])
                run_fields["forecast_tools_usd"] = Decimal(forecast["tools_usd"])
            events = [
                (
                    "plan_created",
                    {
                        "version": row.version,
                        "source": source,
                        "plan": plan.to_json(),
                        "rounds": engine.rounds(plan),
                    },
                )
            ]
        else:
            events = [
                (
                    "plan_invalid",
                    {"version": row.version, "source": source, "problems": row.problems},
                )
            ]
            if ends_run_if_invalid:
                run_fields.update(
                    status=Run.Status.INVALID_PLAN,
                    finished_at=timezone.now(),
                    error="; ".join(row.problems),
                )
                events.append(("run_finished", {"status": Run.Status.INVALID_PLAN}))
        append_events(
            run.pk, events, lease_token=lease.token if lease else None, run_fields=run_fields
        )
    reload(run)
    return row


def plan_decide(
    *,
    plan: Plan,
    reviewer: User | None,
    approve: bool,
    reason: str = "",
    via: str = "web",
    resume: bool = True,
) -> Plan:
    """A reviewer's decision on a whole plan, under the plan-approval policy."""
    if via in PEOPLES_CHANNELS:
        reviewer_check(reviewer)
    reason = reason_clean(reason)
    rejection_reason_check(approve=approve, reason=reason, what=" a plan")
    with transaction.atomic():
        locked = (
            Plan.objects.select_for_update(of=("self",)).select_related("run__goal").get(pk=plan.pk)
        )
        run = locked.run
        if locked.decision:
            raise PlanRefused(
                "already_decided", f"Plan v{locked.version} was already {locked.decision}."
            )
        if run.status != Run.Status.AWAITING_PLAN_APPROVAL or plan_is_outdated(locked):
            raise plan_not_waiting()
        if four_eyes_forbids(run=run, reviewer=reviewer, via=via):
            raise four_eyes_refused("plan")
        locked.decision = Plan.Decision.APPROVED if approve else Plan.Decision.REJECTED
        locked.decided_by = reviewer
        locked.decision_reason = reason
        locked.decided_at = timezone.now()
        locked.save(update_fields=["decision", "decided_by", "decision_reason", "decided_at"])
        append_events(
            run.pk,
            [
                (
                    "plan_decided",
                    {
                        "version": locked.version,
                        "decision": locked.decision,
                        "reviewer": reviewer.get_username() if reviewer else via,
                        "reason": reason,
                    },
                )
            ],
        )
        if resume:
            run_enqueue(run.pk)
    return locked


def plan_decide_seen(
    *, run: Run, version: int, reviewer: User, approve: bool, reason: str = "", via: str = "api"
) -> Plan:
    """Decide the run's plan if `version` (the one its reviewer saw) is still the current one."""
    reviewer_check(reviewer)
    if four_eyes_forbids(run=run, reviewer=reviewer, via=via):
        raise four_eyes_refused("plan")
    rejection_reason_check(approve=approve, reason=reason, what=" a plan")
    plan = plan_current(run)
    if plan is None or plan.version != version:
        raise PlanRefused(
            "stale_plan",
            f"Plan v{version} is not the run's current plan"
            + (f" (v{plan.version} is)." if plan else "."),
        )
    return plan_decide(plan=plan, reviewer=reviewer, approve=approve, reason=reason, via=via)


def plan_not_waiting() -> PlanRefused:
    return PlanRefused("not_waiting", "This plan is not waiting for a decision.")


def plan_is_outdated(plan: Plan) -> bool:
    """Whether a newer valid version replaced the plan."""
    return plan.run.plans.filter(version__gt=plan.version, is_valid=True).exists()
