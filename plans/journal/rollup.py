"""The costs page's rollup: kept current by the writes it sums, rebuilt from the raw rows.

Each writer of a model call, tool call, approval decision or run change adds its share to the
rollup (plans.models SpendRollup ... ApprovalRollup) in its own transaction, with
INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n: two workers adding to one bucket at once
both count. Days are site-local (timezone.localdate), as the page's windows are.
`rollup_rebuild()` recomputes every bucket with set-based INSERT ... SELECT (after bulk loads);
`rollup_drift()` names the buckets where the kept rollup and a rebuild differ.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import Group
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    DateField,
    F,
    Func,
    Model,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce, TruncDate
from django.utils import timezone

from plans.bulk import FETCH_ONE, column_sql, execute, prepared_value
from plans.models import (
    Approval,
    ApprovalRollup,
    Goal,
    ModelCall,
    PlannedToolRollup,
    ReviewRollup,
    ReviewWaitRollup,
    Run,
    RunRollup,
    SpendRollup,
    TokenRollup,
    ToolCall,
    ToolRollup,
)

# In the order a transaction adds to them: the run's share (under the run row's lock, taken
# first by every writer of a run), then its tool calls, then its model calls.
ROLLUPS: tuple[type[Model], ...] = (
    ApprovalRollup,
    ReviewRollup,
    ReviewWaitRollup,
    RunRollup,
    TokenRollup,
    PlannedToolRollup,
    ToolRollup,
    SpendRollup,
)
_KEYS: dict[type[Model], tuple[str, ...]] = {
    ApprovalRollup: ("day",),
    ReviewRollup: ("day", "tool", "rule"),
    ReviewWaitRollup: ("day", "dimension", "key", "wait_s"),
    RunRollup: ("day", "author_id"),
    TokenRollup: ("day", "tokens"),
    PlannedToolRollup: ("day", "tool"),
    ToolRollup: ("day", "tool"),
    SpendRollup: ("day", "author_id", "model"),
}
_CENTS_E8 = Decimal("0.00000001")  # the places of a stored amount
_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# A model call's usage priced apart, summed per model (not kept on runs).
_PRICED_APART = ("cache_write_1h_tokens", "web_search_requests")

# Run fields the rollup depends on: a write setting any of them moves the run's share.
RUN_ROLLUP_FIELDS = frozenset({"status", "cost_usd", "tools_used", "forecast_usd", *_TOKEN_FIELDS})


def token_bucket(tokens: int) -> int:
    """Tokens rounded down to two significant figures (exact below 100): a histogram bucket.

    Rounding down keeps order, so the nearest-rank percentile of the buckets is the exact
    percentile rounded down the same way; buckets are at most 10% wide.
    """
    if tokens < 100:
        return tokens
    unit = 10 ** (len(str(tokens)) - 2)
    return tokens // unit * unit


# --- kept current by the writers ----------------------------------------------------------


def model_calls_recorded(
    run_id: int, calls: Iterable[ModelCall], *, before: Mapping[int, ModelCall] | None = None
) -> None:
    """Add model calls just written for a run; `before` holds the stored state of those that
    were on record already (started at their estimate), whose difference is added instead."""
    before = before or {}
    totals: dict[tuple[date, str], dict[str, Any]] = {}
    for call in calls:
        old = before.get(call.pk) if call.pk is not None else None
        assert call.created_at is not None
        sums = totals.setdefault(
            (timezone.localdate(call.created_at), call.model),
            {
                "calls": 0,
                "cost_usd": Decimal(0),
                **dict.fromkeys((*_TOKEN_FIELDS, *_PRICED_APART), 0),
            },
        )
        sums["calls"] += 0 if old else 1
        sums["cost_usd"] += call.cost_usd - (old.cost_usd if old else 0)
        for name in (*_TOKEN_FIELDS, *_PRICED_APART):
            sums[name] += getattr(call, name) - (getattr(old, name) if old else 0)
    for (day, model), increments in sorted(totals.items()):
        _add(SpendRollup, {"day": day, "model": model}, increments, author_of_run=run_id)


def tool_calls_recorded(rows: Iterable[Mapping[str, Any]]) -> None:
    """Add ToolCall rows just inserted (given as their column values)."""
    totals: dict[tuple[date, str], list[Any]] = {}
    for row in rows:
        key = (timezone.localdate(row["started_at"]), row["tool"])
        sums = totals.setdefault(key, [0, 0, 0.0])
        sums[0] += 1
        sums[1] += 1 if row["error"] else 0
        sums[2] += row["duration_ms"]
    for (day, tool), (calls, errors, duration_ms) in sorted(totals.items()):
        _add(
            ToolRollup,
            {"day": day, "tool": tool},
            {"calls": calls, "errors": errors, "duration_ms": duration_ms},
        )


# The via of a decision a rule made with no person (approval policies, issue #24).
AUTO_VIA = "rule"
# A stale approval was approved (and counted so when decided); its call then found its target
# changed and was asked again, as a new approval.
_APPROVED = (Approval.Decision.APPROVED, Approval.Decision.STALE)
_DECIDED = (*_APPROVED, Approval.Decision.REJECTED)
_SETTLED = (*_DECIDED, Approval.Decision.EXPIRED)


def review_rule(approval: Approval) -> str:
    """The rule an approval is counted under: the one whose outcome decided, required or routed
    it ("": no rule matched, or the matching rule failed and one reviewer decided)."""
    return approval.rule if approval.rule_outcome else ""


def approvals_recorded(approvals: Iterable[Approval]) -> None:
    """Count the approvals a rule decided as they were asked (inserted already settled)."""
    for approval in approvals:
        if approval.decision in _SETTLED:
            approval_decided(approval)


def approval_decided(approval: Approval) -> None:
    """Count an approval settled: decided by a person or a rule, or expired (settled once: a
    decided approval is never decided again), under the rule that decided or routed it."""
    assert approval.decided_at is not None and approval.decision in _SETTLED
    day = timezone.localdate(approval.decided_at)
    decision = approval.decision
    if decision != Approval.Decision.EXPIRED:
        rejected = decision == Approval.Decision.REJECTED
        _add(ApprovalRollup, {"day": day}, {"decided": 1, "rejected": 1 if rejected else 0})
    _add(
        ReviewRollup,
        {"day": day, "tool": approval.tool, "rule": review_rule(approval)},
        {
            "approved": 1 if decision == Approval.Decision.APPROVED else 0,
            "rejected": 1 if decision == Approval.Decision.REJECTED else 0,
            "expired": 1 if decision == Approval.Decision.EXPIRED else 0,
            "auto": 1 if approval.via == AUTO_VIA else 0,
        },
    )
    if decision == Approval.Decision.EXPIRED or approval.reviewer_id is None:
        return  # no person decided: no time to decide
    wait = token_bucket(wait_seconds(approval.requested_at, approval.decided_at))
    Dimension = ReviewWaitRollup.Dimension
    keys = [
        (Dimension.TOOL.value, approval.tool),
        (Dimension.REVIEWER.value, str(approval.reviewer_id)),
    ]
    groups = Group.objects.filter(user__id=approval.reviewer_id).values_list("name", flat=True)
    keys += [(Dimension.GROUP.value, name) for name in groups]
    for dimension, key in sorted(keys):
        _add(
            ReviewWaitRollup,
            {"day": day, "dimension": dimension, "key": key, "wait_s": wait},
            {"decisions": 1},
        )


def wait_seconds(requested_at: datetime, decided_at: datetime) -> int:
    """Whole seconds between two moments, as the rebuild computes them in SQL: the difference
    of their whole-second timestamps (never below 0)."""
    return max(0, int(decided_at.timestamp()) - int(requested_at.timestamp()))


@dataclasses.dataclass(frozen=True)
class RunShare:
    """What of a run the rollup sums: its share moves when any of these change."""

    author_id: int
    created_at: datetime
    status: str
    tokens: int
    cost_usd: Decimal
    tools_used: tuple[str, ...]
    forecast_usd: Decimal | None = None

    @classmethod
    def locked(cls, run_id: int) -> RunShare | None:
        """The run as stored, its row locked until commit (None if there is no such run)."""
        # On every commit that moves a run's figures: one statement built once, not the ORM's.
        db = connections[DEFAULT_DB_ALIAS]
        row = execute(db, _share_statement(db.vendor), [run_id], fetch=FETCH_ONE)
        if row is None:
            return None
        author_id, created_at, status, tokens, cost_usd, tools_used, forecast_usd = row
        if isinstance(created_at, str):
            created_at = datetime.fromisoformat(created_at)
        if timezone.is_naive(created_at):  # SQLite: stored as UTC without an offset
            created_at = created_at.replace(tzinfo=UTC)
        if isinstance(tools_used, str):  # SQLite: JSON text
            tools_used = json.loads(tools_used)
        return cls(
            author_id,
            created_at,
            status,
            int(tokens),
            Decimal(str(cost_usd)).quantize(_CENTS_E8),
            tuple(tools_used),
            None if forecast_usd is None else Decimal(str(forecast_usd)).quantize(_CENTS_E8),
        )

    def after(self, fields: Mapping[str, Any]) -> RunShare:
        """The share once these run fields are written (token totals come all four together)."""
        tokens = self.tokens
        if any(name in fields for name in _TOKEN_FIELDS):
            tokens = sum(int(fields[name]) for name in _TOKEN_FIELDS)
        return dataclasses.replace(
            self,
            status=fields.get("status", self.status),
            cost_usd=Decimal(fields.get("cost_usd", self.cost_usd)),
            tools_used=tuple(fields.get("tools_used", self.tools_used)),
            tokens=tokens,
            forecast_usd=(
                Decimal(fields["forecast_usd"]).quantize(_CENTS_E8)
                if fields.get("forecast_usd") is not None
                else self.forecast_usd
            ),
        )


@functools.cache
def _share_statement(vendor: str) -> str:
    quote = connection.ops.quote_name
    run, goal = quote(Run._meta.db_table), quote(Goal._meta.db_table)

    def column(name: str) -> str:
        return f"{run}.{column_sql(Run._meta, quote, name)}"

    tokens = " + ".join(column(name) for name in _TOKEN_FIELDS)
    lock = f" FOR UPDATE OF {run}" if vendor == "postgresql" else ""  # SQLite locks it all
    columns = ", ".join(column(name) for name in ("created_at", "status"))
    rest = ", ".join(column(name) for name in ("cost_usd", "tools_used", "forecast_usd"))
    return (
        f"SELECT {goal}.{quote('author_id')}, {columns}, {tokens}, {rest} "  # noqa: S608
        f"FROM {run} JOIN {goal} ON {goal}.{quote('id')} = {column('goal')} "
        f"WHERE {column('id')} = %s{lock}"
    )


def run_share_moved(old: RunShare | None, new: RunShare) -> None:
    """Move a run's share of the rollup from `old` (None: a new run) to `new`."""
    if old == new:
        return
    changes: dict[tuple[type[Model], tuple[Any, ...]], dict[str, Any]] = {}
    for sign, share in ((-1, old), (1, new)):
        if share is None:
            continue
        for model, key, increments in _run_contribution(share):
            sums = changes.setdefault((model, key), {})
            for name, value in increments.items():
                sums[name] = sums.get(name, 0) + sign * value
    for (model, key), increments in sorted(changes.items(), key=_in_lock_order):
        if any(increments.values()):
            _add(model, dict(zip(_KEYS[model], key, strict=True)), increments)


def _in_lock_order(change: tuple[tuple[type[Model], tuple[Any, ...]], Any]) -> tuple[Any, ...]:
    (model, key), _ = change
    return (ROLLUPS.index(model), *key)


def _run_contribution(
    share: RunShare,
) -> Iterable[tuple[type[Model], tuple[Any, ...], dict[str, Any]]]:
    day = timezone.localdate(share.created_at)
    completed = share.status == Run.Status.COMPLETED
    # A finished run's forecast beside what it cost: the forecast's error, per day.
    forecasted = share.status in Run.TERMINAL and share.forecast_usd is not None
    yield (
        RunRollup,
        (day, share.author_id),
        {
            "runs": 1,
            "forecasted": 1 if forecasted else 0,
            "forecast_usd": share.forecast_usd if forecasted else Decimal(0),
            "forecast_actual_usd": share.cost_usd if forecasted else Decimal(0),
            "finished": 1 if share.status in Run.TERMINAL else 0,
            "budget_exhausted": 1 if share.status == Run.Status.BUDGET_EXHAUSTED else 0,
            "completed": 1 if completed else 0,
            "completed_tokens": share.tokens if completed else 0,
        },
    )
    if completed:
        yield TokenRollup, (day, token_bucket(share.tokens)), {"runs": 1}
    for tool in share.tools_used:
        yield PlannedToolRollup, (day, tool), {"runs": 1, "cost_usd": share.cost_usd}


def _add(
    model: type[Model],
    key: Mapping[str, Any],
    increments: Mapping[str, Any],
    *,
    author_of_run: int | None = None,
) -> None:
    """Add increments to one bucket, creating it if need be, in one atomic statement."""
    by_run = author_of_run is not None
    db = connections[DEFAULT_DB_ALIAS]
    sql = _add_statement(db.vendor, model, tuple(key), tuple(increments), by_run)
    params = [
        value if name.endswith("_id") else prepared_value(model, name, value, db)
        for name, value in {**key, **increments}.items()
    ]
    if by_run:
        params.insert(0, author_of_run)
    execute(db, sql, params)  # prepared: the recorder adds tool calls every commit


@functools.cache
def _add_statement(
    vendor: str,
    model: type[Model],
    keys: tuple[str, ...],
    increments: tuple[str, ...],
    by_run: bool,
) -> str:
    """The upsert of one bucket; by_run: the author is the given run's (its id the first value)."""
    meta = model._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    column = {name: _column(model, name) for name in (*keys, *increments)}
    columns, values = [], []
    if by_run:
        # The author of the run, looked up inside the statement: no round trip for it.
        columns.append(quote("author_id"))
        values.append(_author_of_run_sql())
    columns += [column[name] for name in (*keys, *increments)]
    values += ["%s"] * (len(keys) + len(increments))
    conflict = [column[name] for name in keys]
    if by_run:
        conflict.insert(conflict.index(column["day"]) + 1, quote("author_id"))
    updates = [f"{column[n]} = {table}.{column[n]} + excluded.{column[n]}" for n in increments]
    # Identifiers come from model metadata; every value is a parameter.
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)}) "  # noqa: S608
        f"ON CONFLICT ({', '.join(conflict)}) DO UPDATE SET {', '.join(updates)}"
    )


def _author_of_run_sql() -> str:
    quote = connection.ops.quote_name
    run, goal = quote(Run._meta.db_table), quote(Goal._meta.db_table)
    return (
        f"(SELECT {goal}.{quote('author_id')} FROM {run} JOIN {goal} "  # noqa: S608
        f"ON {goal}.{quote('id')} = {run}.{quote('goal_id')} WHERE {run}.{quote('id')} = %s)"
    )


def _column(model: type[Model], name: str) -> str:
    """The quoted column of a rollup's field, named by attname ("author_id") or name."""
    return column_sql(model._meta, connection.ops.quote_name, name.removesuffix("_id"))


# --- rebuilt from the raw rows -------------------------------------------------------------


def _run_tokens() -> Any:
    return F("input_tokens") + F("output_tokens") + F("cache_read_tokens") + F("cache_write_tokens")


def _local_day(timestamp: str) -> Func:
    """The site-local day of a timestamp, as TruncDate gives it. On SQLite with a UTC site, the
    date of the stored UTC text: TruncDate calls into Python for each row, ten times slower."""
    if connection.vendor == "sqlite" and timezone.get_current_timezone_name() == "UTC":
        return Func(F(timestamp), function="date", output_field=DateField())
    return TruncDate(timestamp)


def _token_bucket_sql(tokens: Any) -> Case:
    """token_bucket() in SQL: integer division rounds down on SQLite and PostgreSQL alike."""
    whens = [When(**{f"{tokens}__lt": 100}, then=F(tokens))]
    for digits in range(3, 20):
        unit = 10 ** (digits - 2)
        whens.append(When(**{f"{tokens}__lt": 10**digits}, then=F(tokens) / unit * unit))
    return Case(*whens, default=F(tokens))


# A rollup's rows as one aggregate query over the raw rows: ({rollup column: its column}, query).
Source = tuple[dict[str, str], QuerySet[Any]]


def _sources() -> dict[type[Model], Source]:
    terminal = Q(status__in=Run.TERMINAL)
    completed = Q(status=Run.Status.COMPLETED)
    forecasted = terminal & Q(forecast_usd__isnull=False)
    runs = Run.objects.annotate(day=_local_day("created_at"), author=F("goal__author_id"))
    run_key = {"day": "day", "author_id": "author"}
    tokens = {name: f"sum_{name}" for name in _TOKEN_FIELDS}
    return {
        SpendRollup: _spend_source(
            run_key, {**tokens, **{name: f"sum_{name}" for name in _PRICED_APART}}
        ),
        RunRollup: (
            {
                **run_key,
                "runs": "n",
                "finished": "n_finished",
                "budget_exhausted": "n_exhausted",
                "completed": "n_completed",
                "completed_tokens": "n_tokens",
                "forecasted": "n_forecasted",
                "forecast_usd": "sum_forecast",
                "forecast_actual_usd": "sum_forecast_actual",
            },
            runs.values("day", "author")
            .annotate(
                n=Count("id"),
                n_finished=Count("id", filter=terminal),
                n_exhausted=Count("id", filter=Q(status=Run.Status.BUDGET_EXHAUSTED)),
                n_completed=Count("id", filter=completed),
                n_tokens=Coalesce(Sum(_run_tokens(), filter=completed), 0),
                n_forecasted=Count("id", filter=forecasted),
                sum_forecast=Coalesce(Sum("forecast_usd", filter=forecasted), Decimal(0)),
                sum_forecast_actual=Coalesce(Sum("cost_usd", filter=forecasted), Decimal(0)),
            )
            .order_by(),
        ),
        TokenRollup: (
            {"day": "day", "tokens": "bucket", "runs": "n"},
            runs.filter(completed)
            .annotate(total=_run_tokens())
            .annotate(bucket=_token_bucket_sql("total"))
            .values("day", "bucket")
            .annotate(n=Count("id"))
            .order_by(),
        ),
        ToolRollup: _tool_source(),
        PlannedToolRollup: (
            {"day": "day", "tool": "tool", "runs": "n", "cost_usd": "cost"},
            _planned_by_tool(runs),
        ),
        ApprovalRollup: _approval_source(),
        ReviewRollup: _review_source(),
    }


def _review_source() -> Source:
    decision = Approval.Decision
    return (
        {
            "day": "day",
            "tool": "tool",
            "rule": "rule_name",
            "approved": "n_approved",
            "rejected": "n_rejected",
            "expired": "n_expired",
            "auto": "n_auto",
        },
        Approval.objects.filter(decision__in=_SETTLED)
        .annotate(
            day=_local_day("decided_at"),
            # review_rule(), in SQL.
            rule_name=Case(When(rule_outcome="", then=Value("")), default=F("rule")),
        )
        .values("day", "tool", "rule_name")
        .annotate(
            n_approved=Count("id", filter=Q(decision__in=_APPROVED)),
            n_rejected=Count("id", filter=Q(decision=decision.REJECTED)),
            n_expired=Count("id", filter=Q(decision=decision.EXPIRED)),
            n_auto=Count("id", filter=Q(via=AUTO_VIA) & ~Q(decision=decision.EXPIRED)),
        )
        .order_by(),
    )


def _review_wait_sources() -> list[Source]:
    """People's decisions by tool, by reviewer and by each group of the reviewer (as the groups
    are now: a rebuild cannot know who was in which group when they decided)."""
    decided = (
        Approval.objects.filter(decision__in=_DECIDED, reviewer__isnull=False)
        .exclude(via=AUTO_VIA)
        .annotate(day=_local_day("decided_at"), wait=_wait_seconds_sql())
        .annotate(bucket=_token_bucket_sql("wait"))
    )
    columns = {"day": "day", "dimension": "dim", "key": "who", "wait_s": "bucket", "decisions": "n"}
    Dimension = ReviewWaitRollup.Dimension
    keyed = [
        (Dimension.TOOL, decided.annotate(who=F("tool"))),
        (Dimension.REVIEWER, decided.annotate(who=Cast("reviewer_id", CharField()))),
        (
            Dimension.GROUP,
            decided.filter(reviewer__groups__isnull=False).annotate(
                who=F("reviewer__groups__name")
            ),
        ),
    ]
    return [
        (
            columns,
            query.annotate(dim=Value(dimension.value))
            .values("day", "dim", "who", "bucket")
            .annotate(n=Count("id"))
            .order_by(),
        )
        for dimension, query in keyed
    ]


def _wait_seconds_sql() -> RawSQL:
    """wait_seconds() in SQL: decided_at's whole-second timestamp minus requested_at's."""
    quote = connection.ops.quote_name
    table = quote(Approval._meta.db_table)
    decided, requested = (f"{table}.{quote(name)}" for name in ("decided_at", "requested_at"))
    if connection.vendor == "postgresql":
        epoch, larger = "FLOOR(EXTRACT(EPOCH FROM {}))::bigint", "GREATEST"
    else:
        # Whole seconds of the text's own seconds: strftime rounds fractions to milliseconds,
        # so 01.9996 would read as 02 where Python's int(timestamp()) reads 01.
        epoch, larger = "CAST(strftime('%%s', substr({}, 1, 19)) AS INTEGER)", "MAX"
    sql = f"{larger}(0, {epoch.format(decided)} - {epoch.format(requested)})"
    return RawSQL(sql, [], output_field=BigIntegerField())  # noqa: S611 - no values in it


def _spend_source(run_key: dict[str, str], tokens: dict[str, str]) -> Source:
    return (
        {**run_key, "model": "model", "calls": "n", **tokens, "cost_usd": "cost"},
        ModelCall.objects.annotate(day=_local_day("created_at"), author=F("run__goal__author_id"))
        .values("day", "author", "model")
        .annotate(
            n=Count("id"),
            **{column: Sum(name) for name, column in tokens.items()},
            cost=Sum("cost_usd"),
        )
        .order_by(),
    )


def _tool_source() -> Source:
    return (
        {
            "day": "day",
            "tool": "tool",
            "calls": "n",
            "errors": "n_errors",
            "duration_ms": "duration",
        },
        ToolCall.objects.annotate(day=_local_day("started_at"))
        .values("day", "tool")
        .annotate(
            n=Count("id"),
            n_errors=Count("id", filter=~Q(error="")),
            duration=Sum("duration_ms"),
        )
        .order_by(),
    )


def _approval_source() -> Source:
    return (
        {"day": "day", "decided": "n", "rejected": "n_rejected"},
        Approval.objects.filter(decision__in=_DECIDED)
        .annotate(day=_local_day("decided_at"))
        .values("day")
        .annotate(
            n=Count("id"),
            n_rejected=Count("id", filter=Q(decision=Approval.Decision.REJECTED)),
        )
        .order_by(),
    )


def _planned_by_tool(runs: QuerySet[Any]) -> QuerySet[Any]:
    return runs.exclude(tools_used=[]).values("day", "cost_usd", "tools_used")


def rollup_rebuild() -> None:
    """Recompute the whole rollup from the raw rows, set-based (INSERT ... SELECT GROUP BY)."""
    with transaction.atomic():
        for model in ROLLUPS:
            model._default_manager.all().delete()
        for model, (columns, query) in _sources().items():
            if model is PlannedToolRollup:
                _insert_planned_by_tool(query)
            else:
                _insert_select(model, columns, query)
        for columns, query in _review_wait_sources():
            _insert_select(ReviewWaitRollup, columns, query)


def _insert_select(model: type[Model], columns: Mapping[str, str], query: QuerySet[Any]) -> None:
    meta = model._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    names = [_column(model, c) for c in columns]
    picked = ", ".join(f"source.{quote(name)}" for name in columns.values())
    select, params = query.query.sql_with_params()
    sql = (
        f"INSERT INTO {table} ({', '.join(names)}) "  # noqa: S608
        f"SELECT {picked} FROM ({select}) AS source"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _insert_planned_by_tool(runs: QuerySet[Any]) -> None:
    """Runs by creation day and each tool their plan uses: their count and summed cost."""
    meta = PlannedToolRollup._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    select, params = runs.query.sql_with_params()
    # Each run once per element of its tools_used array.
    if connection.vendor == "postgresql":
        each, tool = "jsonb_array_elements_text(source.tools_used) AS used(tool)", "used.tool"
    else:
        each, tool = "json_each(source.tools_used) AS used", "used.value"
    names = [_column(PlannedToolRollup, c) for c in ("day", "tool", "runs", "cost_usd")]
    sql = (
        f"INSERT INTO {table} ({', '.join(names)}) "  # noqa: S608
        f"SELECT source.day, {tool}, COUNT(*), SUM(source.cost_usd) "
        f"FROM ({select}) AS source CROSS JOIN {each} GROUP BY source.day, {tool}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


class _Discard(Exception):
    """Raised to roll a trial rebuild back."""


def rollup_drift() -> list[str]:
    """The buckets where the kept rollup differs from one rebuilt from the raw rows (nothing
    is changed): e.g. "ToolRollup day=2026-12-01 tool=price: calls 3 != 4 (rebuilt)"."""
    kept = _rollup_rows()
    try:
        with transaction.atomic():
            rollup_rebuild()
            rebuilt = _rollup_rows()
            raise _Discard
    except _Discard:
        pass
    drift = []
    for model in ROLLUPS:
        name = model.__name__
        for key in sorted(kept[name].keys() | rebuilt[name].keys(), key=str):
            ours, theirs = kept[name].get(key, {}), rebuilt[name].get(key, {})
            differing = [
                f"{column} {ours.get(column, 0)} != {theirs.get(column, 0)} (rebuilt)"
                for column in sorted(ours.keys() | theirs.keys())
                if not _same(ours.get(column, 0), theirs.get(column, 0))
            ]
            if differing:
                where = " ".join(f"{k}={v}" for k, v in zip(_KEYS[model], key, strict=True))
                drift.append(f"{name} {where}: {', '.join(differing)}")
    return drift


def _rollup_rows() -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    rows: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    for model in ROLLUPS:
        keys = _KEYS[model]
        values = [f.attname for f in model._meta.concrete_fields if not f.primary_key]
        rows[model.__name__] = {
            tuple(row[k] for k in keys): {c: v for c, v in row.items() if c not in keys}
            for row in model._default_manager.values(*values)
        }
    return rows


def _same(ours: Any, theirs: Any) -> bool:
    # SQLite sums decimals and durations as floats: equal to within their rounding.
    if isinstance(ours, int) and isinstance(theirs, int):
        return ours == theirs
    return abs(float(ours) - float(theirs)) < 1e-6
