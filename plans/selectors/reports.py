"""Read-only queries (selectors) behind the runs list, the run audit, its export and costs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import Avg, Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from plans.engine.plan_diff import PlanDiff, plan_diff, reused_results
from plans.guards.audit import chain_problems
from plans.models import Approval, ModelCall, Plan, Run, RunEvent, Step, ToolCall
from plans.ui.charts import Bar, Span, bar_chart_svg, gantt_svg, usd_label
from plans.ui.graphs import STATUS_COLOURS

# --- who sees what ---------------------------------------------------------------------------


def runs_visible_to(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Run]:
    """Authors see their own runs; plans.view_all_runs sees every run."""
    runs = Run.objects.select_related("goal__author")
    if not user.is_authenticated:
        return runs.none()
    if user.has_perm("plans.view_all_runs"):
        return runs
    return runs.filter(goal__author=user)


# --- the runs list ---------------------------------------------------------------------------

# Each order ends with the primary key so pages never overlap or skip rows with equal keys.
# Every leading key has an index: created_at, cost_usd, and duration_ms (a stored generated
# column). Unfinished runs have no duration and sort after the finished ones either way.
RUN_SORTS: dict[str, tuple[Any, ...]] = {
    "-date": ("-created_at", "-pk"),
    "date": ("created_at", "pk"),
    "-cost": ("-cost_usd", "-pk"),
    "cost": ("cost_usd", "pk"),
    "-duration": (F("duration_ms").desc(nulls_last=True), "-pk"),
    "duration": (F("duration_ms").asc(nulls_last=True), "pk"),
}
DEFAULT_RUN_SORT = "-date"


@dataclass(frozen=True)
class RunFilters:
    """What the runs list is narrowed to; None means no constraint."""

    status: str | None = None
    author: str | None = None  # username
    date_from: date | None = None  # created on or after this day
    date_to: date | None = None  # created on or before this day
    tool: str | None = None  # the run's current plan calls this tool
    sort: str = DEFAULT_RUN_SORT


def runs_matching(
    *, viewer: AbstractBaseUser | AnonymousUser, filters: RunFilters
) -> QuerySet[Run]:
    """The viewer's runs narrowed by the filters, in the requested order, goal and author joined."""
    runs = runs_visible_to(viewer)
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.author:
        runs = runs.filter(goal__author__username=filters.author)
    # Day bounds become timestamps so the created_at index serves the range.
    if filters.date_from:
        runs = runs.filter(created_at__gte=_start_of_day(filters.date_from))
    if filters.date_to and filters.date_to < date.max:  # up to date.max is no bound at all
        runs = runs.filter(created_at__lt=_start_of_day(filters.date_to + timedelta(days=1)))
    if filters.tool:
        runs = runs.filter(_uses_tool(filters.tool))
    return runs.order_by(*RUN_SORTS.get(filters.sort, RUN_SORTS[DEFAULT_RUN_SORT]))


def _uses_tool(tool: str) -> Q:
    """Runs whose current plan calls the tool, matched exactly on the element of tools_used."""
    # tools_used is denormalised for this filter: one short column per run, no join. (A join
    # through steps was tried: without ANALYZE statistics SQLite probed every step using the
    # tool once per run, and one author's page did not finish in ten minutes at 100,000 runs.)
    if connection.vendor == "postgresql":
        return Q(tools_used__contains=[tool])  # jsonb @>: exact, and 4x faster than text search
    # SQLite has no JSON containment: search the JSON text for the quoted name (as Django's
    # JSONField writes it), so "price" does not match "flight_price". LIKE ignores ASCII case:
    # two tools named alike but for case would match each other (tool names are lowercase).
    return Q(tools_used__icontains=json.dumps(tool))


def _start_of_day(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


# --- one run's audit -------------------------------------------------------------------------


@dataclass
class PlanVersion:
    plan: Plan
    steps: list[Step]
    # Set by run_audit_get for a replan: how this version differs from the one it replaced.
    diff: PlanDiff | None = None


@dataclass
class RunRecords:
    """Everything recorded about a run, each list in the order it happened."""

    run: Run
    versions: list[PlanVersion]
    approvals: list[Approval]
    model_calls: list[ModelCall]
    tool_calls: list[ToolCall]
    events: list[RunEvent]


@dataclass
class RunAudit(RunRecords):
    timeline_svg: SafeString | None = None
    chain_problems: list[str] = field(default_factory=list)


def run_records_get(*, run: Run) -> RunRecords:
    """Load a run's plans with steps, approvals, model calls, tool calls and events (6 queries)."""
    plans = run.plans.order_by("version").select_related("decided_by").prefetch_related("steps")
    return RunRecords(
        run=run,
        versions=[PlanVersion(plan=plan, steps=list(plan.steps.all())) for plan in plans],
        approvals=list(
            run.approvals.select_related("reviewer", "step__plan").order_by("requested_at", "pk")
        ),
        model_calls=list(run.model_calls.order_by("created_at", "pk")),
        tool_calls=list(run.tool_calls.select_related("step__plan").order_by("started_at", "pk")),
        events=list(run.events.order_by("seq")),
    )


def run_audit_get(*, run: Run, now: datetime | None = None) -> RunAudit:
    """The run's records, its step timeline drawn as SVG, and a check of its event hash chain."""
    records = run_records_get(run=run)
    spans = run_timeline(records, now=now or timezone.now())
    audit = RunAudit(**vars(records), chain_problems=chain_problems(run))
    _compare_versions(records)
    if spans:
        # gantt_svg builds XML elements, so every label in it is escaped by the serialiser.
        audit.timeline_svg = mark_safe(  # noqa: S308
            gantt_svg(spans, title=f"Timeline of the steps of run {run.pk}")
        )
    return audit


def _compare_versions(records: RunRecords) -> None:
    """Give every version after the first a diff against its parent (else the one before it)."""
    by_pk = {version.plan.pk: version for version in records.versions}
    reused = reused_results(records.events)
    for previous, version in zip(records.versions, records.versions[1:], strict=False):
        base = by_pk.get(version.plan.parent_id, previous)
        version.diff = PlanDiff(
            old_version=base.plan.version,
            new_version=version.plan.version,
            changes=plan_diff(
                base.steps, version.steps, reused_from=reused.get(version.plan.version)
            ),
        )


def run_timeline(records: RunRecords, *, now: datetime) -> list[Span]:
    """One span per started step, from the run's start, grouped by (plan version and) round."""
    started = [
        (version.plan.version, step)
        for version in records.versions
        for step in version.steps
        if step.started_at
    ]
    if not started:
        return []
    origin = min([step.started_at for _, step in started] + [records.run.started_at or now])
    several_versions = len({number for number, _ in started}) > 1
    ongoing_until = records.run.finished_at or now
    spans = []
    for number, step in sorted(
        started, key=lambda item: (item[0], item[1].round, item[1].started_at)
    ):
        end = step.finished_at or ongoing_until
        seconds = (end - step.started_at).total_seconds()
        group = (
            f"Plan v{number} · round {step.round}" if several_versions else f"Round {step.round}"
        )
        spans.append(
            Span(
                group=group,
                label=f"{step.step_id} · {step.tool}",
                start=(step.started_at - origin).total_seconds(),
                end=(end - origin).total_seconds(),
                fill=STATUS_COLOURS.get(step.status, STATUS_COLOURS["pending"]),
                title=f"step {step.step_id} · {step.tool}: {step.status}, {seconds:.3f} s",
                open_ended=step.finished_at is None,
            )
        )
    return spans


EXPORT_FORMAT = "agentsite.run-export/1"


def run_export_data(*, run: Run) -> dict[str, Any]:
    """The whole run as JSON-ready data: run, goal, plans and steps, and every record."""
    records = run_records_get(run=run)
    goal = run.goal
    version_of = {version.plan.pk: version.plan.version for version in records.versions}
    return {
        "format": EXPORT_FORMAT,
        "exported_at": timezone.now(),
        "run": {
            "id": run.pk,
            "status": run.status,
            "answer": run.answer,
            "error": run.error,
            "budget_usd": run.budget_usd,
            "budget_tokens": run.budget_tokens,
            "max_parallel_steps": run.max_parallel_steps,
            "cancel_requested": run.cancel_requested,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cache_read_tokens": run.cache_read_tokens,
            "cache_write_tokens": run.cache_write_tokens,
            "cost_usd": run.cost_usd,
            "model_call_count": run.model_call_count,
            "round_count": run.round_count,
            "tools_used": run.tools_used,
            "created_at": run.created_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "duration_ms": run.duration_ms,
            "last_seq": run.last_seq,
            "last_event_hash": run.last_event_hash,
        },
        "goal": {
            "id": goal.pk,
            "text": goal.text,
            "author": goal.author.get_username(),
            "run_dependants_of_failures": goal.run_dependants_of_failures,
            "require_plan_approval": goal.require_plan_approval,
            "created_at": goal.created_at,
        },
        "plans": [
            {
                "version": version.plan.version,
                "parent_version": version_of.get(version.plan.parent_id),
                "source": version.plan.source,
                "is_valid": version.plan.is_valid,
                "problems": version.plan.problems,
                "raw_output": version.plan.raw_output,
                "created_at": version.plan.created_at,
                "decision": version.plan.decision,
                "decided_by": (
                    version.plan.decided_by.get_username() if version.plan.decided_by else None
                ),
                "decision_reason": version.plan.decision_reason,
                "decided_at": version.plan.decided_at,
                "steps": [
                    {
                        "id": step.step_id,
                        "tool": step.tool,
                        "args": step.args,
                        "depends_on": step.depends_on,
                        "destructive": step.destructive,
                        "round": step.round,
                        "status": step.status,
                        "resolved_args": step.resolved_args,
                        "result": step.result,
                        "error": step.error,
                        "attempts": step.attempts,
                        "started_at": step.started_at,
                        "finished_at": step.finished_at,
                    }
                    for step in version.steps
                ],
            }
            for version in records.versions
        ],
        "approvals": [
            {
                "id": approval.pk,
                "plan_version": approval.step.plan.version,
                "step": approval.step.step_id,
                "tool": approval.tool,
                "requested_args": approval.requested_args,
                "args": approval.args,
                "edited": approval.args != approval.requested_args,
                "args_sha256": approval.args_sha256,
                "decision": approval.decision,
                "reviewer": approval.reviewer.get_username() if approval.reviewer else None,
                "via": approval.via,
                "reason": approval.reason,
                "requested_at": approval.requested_at,
                "decided_at": approval.decided_at,
            }
            for approval in records.approvals
        ],
        "model_calls": [
            {
                "id": call.pk,
                "purpose": call.purpose,
                "model": call.model,
                "input_tokens": call.input_tokens,
                "output_tokens": call.output_tokens,
                "cache_read_tokens": call.cache_read_tokens,
                "cache_write_tokens": call.cache_write_tokens,
                "prices": call.prices,
                "cost_usd": call.cost_usd,
                "latency_ms": call.latency_ms,
                "error": call.error,
                "created_at": call.created_at,
            }
            for call in records.model_calls
        ],
        "tool_calls": [
            {
                "id": call.pk,
                "plan_version": call.step.plan.version,
                "step": call.step.step_id,
                "tool": call.tool,
                "attempt": call.attempt,
                "args": call.args,
                "result": call.result,
                "error": call.error,
                "idempotency_key": call.idempotency_key,
                "started_at": call.started_at,
                "duration_ms": call.duration_ms,
            }
            for call in records.tool_calls
        ],
        "events": [
            {
                "seq": event.seq,
                "kind": event.kind,
                "payload": event.payload,
                "at": event.at,
                "prev_hash": event.prev_hash,
                "hash": event.hash,
            }
            for event in records.events
        ],
    }


# --- costs and health ------------------------------------------------------------------------

COST_WINDOWS = (7, 30, 90)
DEFAULT_COST_WINDOW = 30


@dataclass(frozen=True)
class Rate:
    """part of whole, e.g. rejected of decided approvals; rate is None when whole is 0."""

    part: int
    whole: int

    @property
    def rate(self) -> float | None:
        return self.part / self.whole if self.whole else None


@dataclass(frozen=True)
class TokenStats:
    runs: int
    average: float | None
    p50: int | None
    p95: int | None


@dataclass
class CostReport:
    days: int
    since: datetime
    total_usd: Decimal
    model_calls: int
    daily: list[dict[str, Any]]
    daily_svg: SafeString
    by_model: list[dict[str, Any]]
    by_author: list[dict[str, Any]]
    by_tool: list[dict[str, Any]]
    tokens: TokenStats
    rejections: Rate
    tool_errors: Rate
    budget_exhaustion: Rate
    runs: int = 0
    generated_at: datetime | None = None


def cost_report(*, days: int = DEFAULT_COST_WINDOW, now: datetime | None = None) -> CostReport:
    """Spend and health over the last `days` days (today included), about ten queries."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    first_day = today - timedelta(days=days - 1)
    since = _start_of_day(first_day)

    calls = ModelCall.objects.filter(created_at__gte=since)
    per_day = {
        row["day"]: row
        for row in calls.annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(cost=Sum("cost_usd"), calls=Count("id"))
        .order_by()
    }
    daily = []
    for offset in range(days):
        day = first_day + timedelta(days=offset)
        row = per_day.get(day, {})
        daily.append(
            {"day": day, "cost": row.get("cost") or Decimal(0), "calls": row.get("calls", 0)}
        )
    total = sum((row["cost"] for row in daily), Decimal(0))
    call_count = sum(row["calls"] for row in daily)

    by_model = list(
        calls.values("model")
        .annotate(
            calls=Count("id"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            cost=Sum("cost_usd"),
        )
        .order_by("-cost", "model")
    )
    by_author = list(
        calls.values(author=F("run__goal__author__username"))
        .annotate(calls=Count("id"), runs=Count("run", distinct=True), cost=Sum("cost_usd"))
        .order_by("-cost", "author")
    )
    for row in [*by_model, *by_author]:
        row["share"] = float(row["cost"] / total) if total else 0.0

    tool_calls = ToolCall.objects.filter(started_at__gte=since)
    by_tool = list(
        tool_calls.values("tool")
        .annotate(
            calls=Count("id"),
            errors=Count("id", filter=~Q(error="")),
            runs=Count("run", distinct=True),
            avg_ms=Avg("duration_ms"),
        )
        .order_by("-calls", "tool")
    )
    runs = Run.objects.filter(created_at__gte=since)
    # Tools spend no tokens, so a tool's cost is that of the runs whose plan uses it: a run
    # using several tools counts fully under each. One scan of the window's runs for all tools.
    planned_cost = (
        runs.aggregate(
            **{
                f"tool_{index}": Sum("cost_usd", filter=_uses_tool(row["tool"]))
                for index, row in enumerate(by_tool)
            }
        )
        if by_tool
        else {}
    )
    for index, row in enumerate(by_tool):
        row["error_rate"] = Rate(row["errors"], row["calls"]).rate
        row["runs_cost"] = planned_cost[f"tool_{index}"] or Decimal(0)

    run_counts = runs.aggregate(
        total=Count("id"),
        finished=Count("id", filter=Q(status__in=Run.TERMINAL)),
        exhausted=Count("id", filter=Q(status=Run.Status.BUDGET_EXHAUSTED)),
    )
    # Decided by a reviewer: expired requests were never decided.
    decided = Approval.objects.filter(
        decided_at__gte=since,
        decision__in=[Approval.Decision.APPROVED, Approval.Decision.REJECTED],
    )
    approval_counts = decided.aggregate(
        decided=Count("id"), rejected=Count("id", filter=Q(decision=Approval.Decision.REJECTED))
    )

    return CostReport(
        days=days,
        since=since,
        total_usd=total,
        model_calls=call_count,
        daily=daily,
        daily_svg=mark_safe(  # noqa: S308 - built from XML elements, escaped on serialisation
            bar_chart_svg(
                [
                    Bar(
                        label=row["day"].strftime("%b %-d"),
                        value=float(row["cost"]),
                        title=f"{row['day']:%a %b %-d}: ${row['cost']:.6f} in {row['calls']} "
                        + ("call" if row["calls"] == 1 else "calls"),
                    )
                    for row in daily
                ],
                value_label=usd_label,
                title=f"Model spend per day, last {days} days",
            )
        ),
        by_model=by_model,
        by_author=by_author,
        by_tool=by_tool,
        tokens=_tokens_per_completed_run(runs.filter(status=Run.Status.COMPLETED)),
        rejections=Rate(approval_counts["rejected"], approval_counts["decided"]),
        tool_errors=Rate(sum(r["errors"] for r in by_tool), sum(r["calls"] for r in by_tool)),
        budget_exhaustion=Rate(run_counts["exhausted"], run_counts["finished"]),
        runs=run_counts["total"],
        generated_at=now,
    )


def _tokens_per_completed_run(runs: QuerySet[Run]) -> TokenStats:
    tokens = F("input_tokens") + F("output_tokens") + F("cache_read_tokens")
    totals = sorted(runs.values_list(tokens + F("cache_write_tokens"), flat=True))
    if not totals:
        return TokenStats(runs=0, average=None, p50=None, p95=None)

    def percentile(fraction: float) -> int:
        # Nearest rank: the smallest value with at least `fraction` of the runs at or below it.
        return totals[max(1, math.ceil(fraction * len(totals))) - 1]

    return TokenStats(
        runs=len(totals),
        average=sum(totals) / len(totals),
        p50=percentile(0.50),
        p95=percentile(0.95),
    )
