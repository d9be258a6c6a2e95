"""Spend and health across runs, for the costs page."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F, QuerySet, Sum
from django.utils import timezone

from plans.engine.forecast import forecast_error
from plans.models import (
    ApprovalRollup,
    EvalResult,
    PlannedToolRollup,
    RunRollup,
    SpendRollup,
    TokenRollup,
    ToolRollup,
)
from plans.selectors.runs import start_of_day

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
    by_model: list[dict[str, Any]]
    by_author: list[dict[str, Any]]
    by_tool: list[dict[str, Any]]
    tokens: TokenStats
    rejections: Rate
    tool_errors: Rate
    budget_exhaustion: Rate
    runs: int = 0
    generated_at: datetime | None = None
    # Priced apart from the other tokens (plans.llm.pricing), so shown apart.
    cache_write_1h_tokens: int = 0
    web_search_requests: int = 0
    # The eval judge's calls belong to no run, so they are not in total_usd.
    judge_usd: Decimal = Decimal(0)
    judged: int = 0
    # Days with finished runs that had a cost forecast: the forecasts summed beside the cost.
    forecasts: list[dict[str, Any]] = field(default_factory=list)


def cost_report(*, days: int = DEFAULT_COST_WINDOW, now: datetime | None = None) -> CostReport:
    """Spend and health over the last `days` days (today included), read from the rollup
    (plans.journal.rollup): nine queries over a few rows per day, whatever the run count, and
    one over the window's eval results for the judge's spend."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    first_day = today - timedelta(days=days - 1)
    since = start_of_day(first_day)

    spend = SpendRollup.objects.filter(day__gte=first_day)
    daily = _daily(spend, first_day, days)
    total = sum((row["cost"] for row in daily), Decimal(0))
    call_count = sum(row["calls"] for row in daily)
    runs = RunRollup.objects.filter(day__gte=first_day)
    by_model, by_author = _by_model(spend), _by_author(spend, runs)
    for row in [*by_model, *by_author]:
        row["cost"] = _usd(row["cost"])
        row["share"] = float(row["cost"] / total) if total else 0.0
    by_tool = _by_tool(first_day)
    judge_usd, judged = _judge_spend(since)

    # Per day (summed here): the window's totals, and each day's forecasts beside their cost.
    run_days = list(
        runs.values("day")
        .annotate(
            total=Sum("runs"),
            finished=Sum("finished"),
            exhausted=Sum("budget_exhausted"),
            completed=Sum("completed"),
            completed_tokens=Sum("completed_tokens"),
            forecasted=Sum("forecasted"),
            forecast=Sum("forecast_usd"),
            actual=Sum("forecast_actual_usd"),
        )
        .order_by("day")
    )
    run_counts = {
        name: sum(row[name] or 0 for row in run_days)
        for name in ("total", "finished", "exhausted", "completed", "completed_tokens")
    }
    approval_counts = ApprovalRollup.objects.filter(day__gte=first_day).aggregate(
        decided=Sum("decided"), rejected=Sum("rejected")
    )

    return CostReport(
        days=days,
        since=since,
        total_usd=total,
        model_calls=call_count,
        daily=daily,
        by_model=by_model,
        by_author=by_author,
        by_tool=by_tool,
        tokens=_tokens_per_completed_run(
            first_day, run_counts["completed"], run_counts["completed_tokens"]
        ),
        rejections=Rate(approval_counts["rejected"] or 0, approval_counts["decided"] or 0),
        tool_errors=Rate(sum(r["errors"] for r in by_tool), sum(r["calls"] for r in by_tool)),
        budget_exhaustion=Rate(run_counts["exhausted"], run_counts["finished"]),
        runs=run_counts["total"],
        generated_at=now,
        cache_write_1h_tokens=sum(row["cache_write_1h_tokens"] or 0 for row in by_model),
        web_search_requests=sum(row["web_search_requests"] or 0 for row in by_model),
        judge_usd=judge_usd,
        judged=judged,
        forecasts=_forecasts(run_days),
    )


def _forecasts(run_days: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each day with forecast runs, then the window's total (day None); none without a forecast."""
    rows = [
        _forecast_row(row["day"], row["forecasted"], _usd(row["forecast"]), _usd(row["actual"]))
        for row in run_days
        if row["forecasted"]
    ]
    if rows:
        rows.append(
            _forecast_row(
                None,
                sum(row["runs"] for row in rows),
                sum((row["forecast"] for row in rows), Decimal(0)),
                sum((row["actual"] for row in rows), Decimal(0)),
            )
        )
    return rows


def _forecast_row(
    day: date | None, runs: int, forecast: Decimal, actual: Decimal
) -> dict[str, Any]:
    error = forecast_error(forecast, actual)
    return {"day": day, "runs": runs, "forecast": forecast, "actual": actual, "error": error}


def _judge_spend(since: datetime) -> tuple[Decimal, int]:
    """What the eval judge cost for experiments started in the window, and answers judged."""
    verdicts = EvalResult.objects.filter(
        experiment__created_at__gte=since, judge__isnull=False
    ).values_list("judge", flat=True)
    total, judged = Decimal(0), 0
    for verdict in verdicts:
        if isinstance(verdict, dict) and "cost_usd" in verdict:
            total += Decimal(str(verdict["cost_usd"]))
            judged += 1
    return _usd(total), judged


def _daily(spend: QuerySet[SpendRollup], first_day: date, days: int) -> list[dict[str, Any]]:
    """Cost and calls of each day of the window, days without calls included."""
    per_day: dict[date, dict[str, Any]] = {
        row["day"]: dict(row)
        for row in spend.values("day").annotate(cost=Sum("cost_usd"), calls=Sum("calls")).order_by()
    }
    daily: list[dict[str, Any]] = []
    for offset in range(days):
        day = first_day + timedelta(days=offset)
        row = per_day.get(day, {})
        daily.append({"day": day, "cost": _usd(row.get("cost")), "calls": row.get("calls") or 0})
    return daily


def _by_model(spend: QuerySet[SpendRollup]) -> list[dict[str, Any]]:
    return _rows(
        spend.values("model")
        .annotate(
            calls=Sum("calls"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            cache_write_1h_tokens=Sum("cache_write_1h_tokens"),
            web_search_requests=Sum("web_search_requests"),
            cost=Sum("cost_usd"),
        )
        .filter(calls__gt=0)
        .order_by("-cost", "model")
    )


def _by_author(spend: QuerySet[SpendRollup], runs: QuerySet[RunRollup]) -> list[dict[str, Any]]:
    # Runs an author created in the window (a run counts once, however many days it calls).
    runs_by_author = dict(
        runs.values_list("author").annotate(n=Sum("runs")).order_by().values_list("author", "n")
    )
    by_author = _rows(
        spend.values("author_id", name=F("author__username"))
        .annotate(calls=Sum("calls"), cost=Sum("cost_usd"))
        .filter(calls__gt=0)
        .order_by("-cost", "name")
    )
    for row in by_author:
        row["author"] = row.pop("name")
        row["runs"] = runs_by_author.get(row.pop("author_id"), 0)
    return by_author


def _by_tool(first_day: date) -> list[dict[str, Any]]:
    by_tool = _rows(
        ToolRollup.objects.filter(day__gte=first_day)
        .values("tool")
        .annotate(
            calls=Sum("calls"),
            errors=Sum("errors"),
            duration_ms=Sum("duration_ms"),
        )
        .filter(calls__gt=0)
        .order_by("-calls", "tool")
    )
    # Tools spend no tokens, so a tool's cost is that of the runs whose plan uses it: a run
    # using several tools counts fully under each.
    planned: dict[str, dict[str, Any]] = {
        row["tool"]: dict(row)
        for row in PlannedToolRollup.objects.filter(
            day__gte=first_day, tool__in=[row["tool"] for row in by_tool]
        )
        .values("tool")
        .annotate(runs=Sum("runs"), cost=Sum("cost_usd"))
        .order_by()
    }
    for row in by_tool:
        row["error_rate"] = Rate(row["errors"], row["calls"]).rate
        row["avg_ms"] = row.pop("duration_ms") / row["calls"]
        planning = planned.get(row["tool"], {})
        row["runs"] = planning.get("runs") or 0
        row["runs_cost"] = _usd(planning.get("cost"))
    return by_tool


def _tokens_per_completed_run(first_day: date, runs: int, tokens: int) -> TokenStats:
    """Average exact; median and p95 from the histogram, rounded down to two figures."""
    if runs <= 0:
        return TokenStats(runs=0, average=None, p50=None, p95=None)
    histogram = (
        TokenRollup.objects.filter(day__gte=first_day, runs__gt=0)
        .values_list("tokens")
        .annotate(n=Sum("runs"))
        .order_by("tokens")
    )
    buckets = list(histogram.values_list("tokens", "n"))
    return TokenStats(
        runs=runs,
        average=tokens / runs,
        p50=histogram_percentile(buckets, runs, 0.50),
        p95=histogram_percentile(buckets, runs, 0.95),
    )


def histogram_percentile(
    buckets: Iterable[tuple[int, int]], total: int, fraction: float
) -> int | None:
    """Nearest rank over (value, count) buckets in ascending order: the smallest value with at
    least `fraction` of the total at or below it."""
    rank, seen = max(1, math.ceil(fraction * total)), 0
    for bucket, count in buckets:
        seen += count
        if seen >= rank:
            return int(bucket)
    return None  # the histogram holds fewer than counted: a rollup to rebuild


def _usd(value: Decimal | float | None) -> Decimal:
    """A summed amount as the page shows it: SQLite sums decimals as floats."""
    return Decimal(str(value or 0)).quantize(Decimal("0.00000001"))


def _rows(values: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A values() query's rows as plain dicts, to which the report adds computed columns."""
    return [dict(row) for row in values]
