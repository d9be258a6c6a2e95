"""Spend limits checked before every model call: the run's budget, the author's daily cap,
and the global model-call rate limit (a token bucket shared through the database)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connections, router, transaction
from django.db.models import F, Sum
from django.utils import timezone

from plans.bulk import FETCH_ONE, execute, prepared_value
from plans.models import RateBucket, Run, SpendRollup

MODEL_CALLS_BUCKET = "model-calls"


def author_daily_problem(run: Run, *, next_call_usd: Decimal) -> str | None:
    """None if the author's spend today plus this call stays within the daily cap."""
    cap = Decimal(str(settings.AGENTSITE_AUTHOR_DAILY_USD))
    if cap <= 0:
        return None
    spent = author_spent_today(run.goal.author_id)
    if spent + next_call_usd <= cap:
        return None
    return (
        f"{run.goal.author.get_username()} has spent ${spent:.4f} today; this call (about "
        f"${next_call_usd:.4f}) would pass the daily cap of ${cap:.2f}"
    )


def author_spent_today(author_id: int) -> Decimal:
    """USD of every model call today (UTC) in the author's runs, started calls at their estimate.

    Read from the spend rollup, which the recorder adds each call to in the transaction that
    records it: a few rows, where summing the calls themselves walked every run the author ever
    had (10 ms before each model call at 5,000 runs, and growing).
    """
    alias = router.db_for_read(SpendRollup)
    connection = connections[alias]
    today = prepared_value(SpendRollup, "day", timezone.localdate(), connection)
    row = execute(connection, _spent_on_sql(alias), [today, author_id], fetch=FETCH_ONE)
    return Decimal(str(row[0])) if row and row[0] is not None else Decimal(0)


@functools.cache
def _spent_on_sql(alias: str) -> str:
    """The ORM's SQL for an author's spend on a day, compiled once (params: day, author).

    It runs before every model call, and building the query cost more than running it.
    """
    query = (
        SpendRollup.objects.using(alias)
        .filter(day=date(2000, 1, 2))
        .filter(author_id=-1)
        .order_by()
        .values("author_id")
        .annotate(total=Sum("cost_usd"))
        .values("total")
        .query
    )
    sql, params = query.get_compiler(alias).as_sql()
    if len(params) != 2 or params[1] != -1:
        raise AssertionError(f"expected the day and the author as parameters, got {params}")
    return sql


def rate_limit_wait(*, sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Take one model call from the shared bucket, waiting for it if needed.

    Returns None once a call may be made, or a message when none came within the patience.
    """
    per_minute = settings.AGENTSITE_MODEL_CALLS_PER_MINUTE
    if per_minute <= 0:
        return None
    patience = settings.AGENTSITE_RATE_LIMIT_PATIENCE_S
    deadline = time.monotonic() + patience
    while True:
        wait_s = _take_token(per_minute)
        if wait_s == 0:
            return None
        if time.monotonic() + wait_s > deadline:
            return (
                f"the model-call rate limit ({per_minute:g} per minute, shared by all runs) "
                f"left no call within {patience:g} s"
            )
        sleep(wait_s)


def _take_token(per_minute: float) -> float:
    """0 if a token was taken, else the seconds until one is due."""
    return bucket_take(
        MODEL_CALLS_BUCKET, per_minute=per_minute, burst=settings.AGENTSITE_MODEL_CALLS_BURST
    )


def bucket_take(name: str, *, per_minute: float, burst: float) -> float:
    """Take one token from the named bucket shared by every process: 0, or seconds until due.

    Holds under concurrency on SQLite and PostgreSQL: at most burst + rate x elapsed are taken.
    """
    rate = per_minute / 60
    capacity = max(1.0, float(burst))
    with transaction.atomic():
        # A write first takes the lock at once on every database: the row's on PostgreSQL (as
        # FOR UPDATE would), the database's write lock on SQLite (where select_for_update() does
        # nothing). The clock is read only once it is held, so no request computes from a time
        # older than the last one written.
        if not _lock_bucket(name):
            RateBucket.objects.get_or_create(
                name=name, defaults={"tokens": capacity, "refilled_at": timezone.now()}
            )
            _lock_bucket(name)
        bucket = RateBucket.objects.get(name=name)
        now = timezone.now()
        tokens = min(capacity, bucket.tokens + _seconds(now, bucket.refilled_at) * rate)
        # Never backwards: a clock behind the last writer's (another machine's) adds nothing.
        refilled_at = max(now, bucket.refilled_at)
        taken = tokens >= 1
        RateBucket.objects.filter(pk=bucket.pk).update(
            tokens=tokens - 1 if taken else tokens, refilled_at=refilled_at
        )
        return 0.0 if taken else (1 - tokens) / rate


def _lock_bucket(name: str) -> bool:
    """Lock the bucket's row until the transaction ends; False if it does not exist yet."""
    return RateBucket.objects.filter(name=name).update(tokens=F("tokens")) > 0


def _seconds(now: datetime, then: datetime) -> float:
    return max(0.0, (now - then) / timedelta(seconds=1))
