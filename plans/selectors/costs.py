"""Spend and health across runs, for the costs page."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from plans.models import Approval, ModelCall, Run, ToolCall
from plans.selectors.runs import start_of_day, uses_tool
from plans.ui.charts import Bar, bar_chart_svg, usd_label

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
    since = start_of_day(first_day)

    calls = ModelCall.objects.filter(created_at__gte=since)
    per_day: dict[date, dict[str, Any]] = {
        row["day"]: dict(row)
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

    by_model = _rows(
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
    by_author = _rows(
        calls.values(author=F("run__goal__author__username"))
        .annotate(calls=Count("id"), runs=Count("run", distinct=True), cost=Sum("cost_usd"))
        .order_by("-cost", "author")
    )
    for row in [*by_model, *by_author]:
        row["share"] = float(row["cost"] / total) if total else 0.0

    tool_calls = ToolCall.objects.filter(started_at__gte=since)
    by_tool = _rows(
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
                f"tool_{index}": Sum("cost_usd", filter=uses_tool(row["tool"]))
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


def _rows(values: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A values() query's rows as plain dicts, to which the report adds computed columns."""
    return [dict(row) for row in values]
