"""Review analytics for operators: what waits now, how long people take to decide, and how
requests end, per tool, group, reviewer and rule; read from the rollup, never the approvals."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, Min, Q, Sum
from django.utils import timezone

from plans.models import TERMINAL_STATUSES, Approval, ReviewRollup, ReviewWaitRollup, Run
from plans.selectors.costs import histogram_percentile
from plans.selectors.runs import start_of_day

REVIEW_WINDOWS = (1, 7, 30)
LIVE_STATUSES = sorted(set(Run.Status) - set(TERMINAL_STATUSES))
DEFAULT_REVIEW_WINDOW = 7

# Waiting requests by age: (label, lower bound); each holds those at least this old and
# younger than the next.
AGES: tuple[tuple[str, timedelta], ...] = (
    ("under 1 hour", timedelta(0)),
    ("1 to 8 hours", timedelta(hours=1)),
    ("8 to 24 hours", timedelta(hours=8)),
    ("1 to 3 days", timedelta(days=1)),
    ("over 3 days", timedelta(days=3)),
)


@dataclass(frozen=True)
class DecideTime:
    """Time to decide under one key (a tool, group or reviewer): seconds, rounded down to two
    significant figures (the rollup's histogram)."""

    key: str
    decisions: int
    p50_s: int | None
    p95_s: int | None

    @property
    def p50_ms(self) -> int | None:
        return None if self.p50_s is None else self.p50_s * 1000

    @property
    def p95_ms(self) -> int | None:
        return None if self.p95_s is None else self.p95_s * 1000


@dataclass(frozen=True)
class Outcomes:
    """How the requests under one key (a tool, a rule) were settled."""

    key: str
    approved: int
    rejected: int
    expired: int
    auto: int

    @property
    def settled(self) -> int:
        return self.approved + self.rejected + self.expired

    def share(self, part: int) -> float | None:
        return part / self.settled if self.settled else None

    @property
    def rates(self) -> dict[str, float | None]:
        return {
            "approved": self.share(self.approved),
            "rejected": self.share(self.rejected),
            "expired": self.share(self.expired),
            "auto": self.share(self.auto),
        }


@dataclass
class ReviewReport:
    days: int
    since: datetime
    generated_at: datetime
    waiting: list[tuple[str, int]]
    waiting_total: int
    oldest_waiting_since: datetime | None
    decide_times: dict[str, list[DecideTime]] = field(default_factory=dict)
    by_tool: list[Outcomes] = field(default_factory=list)
    by_rule: list[Outcomes] = field(default_factory=list)


def review_report(
    *, days: int = DEFAULT_REVIEW_WINDOW, now: datetime | None = None
) -> ReviewReport:
    """The analytics over the last `days` days (today included): one query for what waits now
    (by the waiting requests' index), the rest over the rollup's few rows per day."""
    now = now or timezone.now()
    first_day = timezone.localdate(now) - timedelta(days=days - 1)
    waiting, total, oldest = _waiting_by_age(now)
    outcomes = ReviewRollup.objects.filter(day__gte=first_day)
    return ReviewReport(
        days=days,
        since=start_of_day(first_day),
        generated_at=now,
        waiting=waiting,
        waiting_total=total,
        oldest_waiting_since=oldest,
        decide_times=_decide_times(first_day),
        by_tool=_outcomes(outcomes, "tool"),
        by_rule=_outcomes(outcomes, "rule"),
    )


def _waiting_by_age(now: datetime) -> tuple[list[tuple[str, int]], int, datetime | None]:
    bounds = [now - lower for _, lower in AGES] + [None]
    counts: dict[str, Any] = {}
    for index in range(len(AGES)):
        newest, oldest = bounds[index], bounds[index + 1]
        rule = Q(requested_at__lte=newest)
        if oldest is not None:
            rule &= Q(requested_at__gt=oldest)
        counts[f"n{index}"] = Count("id", filter=rule)
    # From the live runs to their pending requests (the approvals' index on run, decision and
    # time, read alone): never a run's row per request, and never the requests left pending
    # on runs that ended.
    row = Approval.objects.filter(
        decision=Approval.Decision.PENDING, run_id__in=_live_run_ids()
    ).aggregate(oldest=Min("requested_at"), **counts)
    waiting = [(label, row[f"n{index}"]) for index, (label, _) in enumerate(AGES)]
    return waiting, sum(n for _, n in waiting), row["oldest"]


def _live_run_ids() -> Any:
    """The ids of the runs not over, as each database reads them from an index alone."""
    if connection.vendor == "postgresql":
        # run_live_idx's own condition: an index-only scan of the live runs.
        return Run.objects.exclude(status__in=TERMINAL_STATUSES).values("pk")
    # SQLite matches that partial index only with ANALYZE statistics (without, it reads the
    # whole status index); a search of the status index per live status needs none.
    return Run.objects.filter(status__in=LIVE_STATUSES).values("pk")


def _decide_times(first_day: Any) -> dict[str, list[DecideTime]]:
    histogram = (
        ReviewWaitRollup.objects.filter(day__gte=first_day, decisions__gt=0)
        .values_list("dimension", "key", "wait_s")
        .annotate(n=Sum("decisions"))
        .order_by("dimension", "key", "wait_s")
    )
    buckets: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for dimension, key, wait_s, n in histogram:
        buckets[(dimension, key)].append((wait_s, n))
    reviewer_ids = [int(key) for (dim, key) in buckets if dim == "reviewer" and key.isdecimal()]
    names = dict(get_user_model().objects.filter(pk__in=reviewer_ids).values_list("pk", "username"))
    times: dict[str, list[DecideTime]] = {d.value: [] for d in ReviewWaitRollup.Dimension}
    for (dimension, key), rows in buckets.items():
        decisions = sum(n for _, n in rows)
        label = str(names.get(int(key), f"user {key}")) if dimension == "reviewer" else key
        times.setdefault(dimension, []).append(
            DecideTime(
                key=label,
                decisions=decisions,
                p50_s=histogram_percentile(rows, decisions, 0.50),
                p95_s=histogram_percentile(rows, decisions, 0.95),
            )
        )
    for rows_of in times.values():
        rows_of.sort(key=lambda time: (-time.decisions, time.key))
    return times


def _outcomes(rows: Any, by: str) -> list[Outcomes]:
    summed = (
        rows.values(by)
        .annotate(a=Sum("approved"), r=Sum("rejected"), e=Sum("expired"), auto_n=Sum("auto"))
        .order_by(by)
    )
    found = [
        Outcomes(
            key=row[by], approved=row["a"], rejected=row["r"], expired=row["e"], auto=row["auto_n"]
        )
        for row in summed
    ]
    found = [o for o in found if o.settled]
    return sorted(found, key=lambda o: (-o.settled, o.key))
