"""Crash recovery: queues every run that needs a worker and has none, and only those.

A run needs a worker when its lease expired (its worker died or stalled), when it is active
but nobody ever took it (the process died between commit and enqueue), or when it is parked
and a decision or a cancel was recorded after it parked but its continuation never came.
Tasks left RUNNING by a dead worker are marked failed. Every worker process sweeps every
lease/3 seconds, and also as the next lease falls due, so a dead worker's runs resume about a
lease after its last heartbeat and at worst lease + sweep interval. The sweep also carries out
what falls due with no request to prompt it: approval expiries, reminders, escalations and
the approval digest (no cron, no thread per request). One sweep at a time
(a PostgreSQL advisory lock, SQLite's write lock), and never a run that already has a queued
or live task: a run is not queued twice.
"""

from __future__ import annotations

import logging
import threading
import traceback
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, connections, transaction
from django.db.models import Exists, Min, OuterRef, Q, Subquery
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.bulk import KeptConnection, connection_lost, connection_used
from plans.journal.leases import lease_seconds
from plans.journal.tasks import advance_run_task
from plans.models import Run, RunEvent
from plans.services.approvals import approvals_chase, approvals_expire
from plans.services.digests import digests_queue_due
from plans.services.questions import questions_expire

logger = logging.getLogger(__name__)

TASK_PATH = "plans.journal.tasks.advance_run_task"
ACTIVE = (Run.Status.PLANNING, Run.Status.RUNNING)
PARKED = (Run.Status.AWAITING_APPROVAL, Run.Status.AWAITING_PLAN_APPROVAL)
# Events that give a parked run something to do.
WAKE_KINDS = ("approval_decided", "question_answered", "plan_decided", "cancel_requested")
# Any constant shared by every agentsite process: pg_try_advisory_xact_lock's key.
SWEEP_LOCK_KEY = 7_160_372_511
# The shortest sleep when the next lease falls due very soon.
MIN_DELAY_S = 0.05


class WorkerLost(Exception):
    """The worker running this task stopped renewing its run's lease."""


def sweep_interval() -> float:
    return lease_seconds() / 3


def sweep_once() -> list[int]:
    """Queue every run that needs a worker and has none; returns their ids.

    Approvals left pending past their time limit expire first (their runs are continued), the
    approval rules' reminders and escalations that fell due go out, and so does the approval
    digest once per AGENTSITE_APPROVAL_DIGEST_S (whichever process claims the period).
    """
    approvals_expire()
    approvals_chase()
    questions_expire()
    digests_queue_due()
    with transaction.atomic():
        if not _sweep_lock():
            return []  # another process is sweeping right now
        now = timezone.now()
        live, stuck = _running_tasks(now)
        for task_id, run_id in stuck:
            task_abandon(task_id, f"run {run_id}: the worker stopped renewing its lease")
        queued = set(_run_ids_of(DBTaskResult.objects.filter(status=TaskResultStatus.READY)))
        requeue = sorted(_runs_needing_a_worker(now) - queued - live)
        for run_id in requeue:
            advance_run_task.enqueue(run_id)
    if stuck:
        runs = _brief([run_id for _, run_id in stuck])
        logger.warning("sweeper: tasks of runs %s were left running by a lost worker", runs)
    if requeue:
        logger.warning("sweeper re-queued %d run(s): %s", len(requeue), _brief(requeue))
    return requeue


def _brief(run_ids: list[int], shown: int = 20) -> str:
    """The first run ids, and how many more: a log line stays readable after a big outage."""
    text = ", ".join(str(run_id) for run_id in run_ids[:shown])
    return text if len(run_ids) <= shown else f"{text} and {len(run_ids) - shown:,} more"


def sweep_delay(now: datetime | None = None) -> float:
    """Seconds until the next sweep: the interval, or sooner when a lease falls due sooner."""
    now = now or timezone.now()
    interval = sweep_interval()
    next_expiry = (
        Run.objects.exclude(status__in=Run.TERMINAL)
        .filter(lease_token__isnull=False, lease_expires_at__gt=now)
        .aggregate(at=Min("lease_expires_at"))["at"]
    )
    if next_expiry is None:
        return interval
    due_in = (next_expiry - now).total_seconds() + MIN_DELAY_S
    return max(MIN_DELAY_S, min(interval, due_in))


def _sweep_lock() -> bool:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [SWEEP_LOCK_KEY])
            return bool(cursor.fetchone()[0])
    # SQLite: the transaction began IMMEDIATE (settings), so it already holds the write lock.
    return True


def _running_tasks(now: datetime) -> tuple[set[int], list[tuple[str, int]]]:
    """Runs whose task is RUNNING on a live worker, and (task id, run id) of lost ones."""
    grace = now - timedelta(seconds=lease_seconds())
    running = list(
        DBTaskResult.objects.filter(task_path=TASK_PATH, status=TaskResultStatus.RUNNING).only(
            "id", "args_kwargs", "started_at"
        )
    )
    run_ids = {_run_id(task) for task in running}
    leased = set(
        Run.objects.filter(
            pk__in=run_ids, lease_token__isnull=False, lease_expires_at__gte=now
        ).values_list("pk", flat=True)
    )
    live: set[int] = set()
    stuck: list[tuple[str, int]] = []
    for task in running:
        run_id = _run_id(task)
        # A worker takes the lease right after claiming the task and renews it throughout:
        # claimed a lease ago and its run still unleased means the worker is gone.
        if run_id in leased or (task.started_at and task.started_at >= grace):
            live.add(run_id)
        else:
            stuck.append((str(task.pk), run_id))
    return live, stuck


def task_abandon(task_id: Any, reason: str) -> None:
    """Mark a RUNNING task failed: its worker is gone, and its run will be queued again."""
    error = WorkerLost(reason)
    # Conditional, so a worker that finishes the task at this moment keeps its outcome.
    DBTaskResult.objects.filter(pk=task_id, status=TaskResultStatus.RUNNING).update(
        status=TaskResultStatus.FAILED,
        finished_at=timezone.now(),
        exception_class_path=f"{WorkerLost.__module__}.{WorkerLost.__qualname__}",
        traceback="".join(traceback.format_exception(error)),
        return_value=None,
    )


def _runs_needing_a_worker(now: datetime) -> set[int]:
    grace = now - timedelta(seconds=lease_seconds())
    not_terminal = Run.objects.exclude(status__in=Run.TERMINAL)
    expired = not_terminal.filter(lease_token__isnull=False, lease_expires_at__lt=now)
    # Created a lease ago and never taken: its enqueue was lost (or its worker crashed).
    orphaned = Run.objects.filter(status__in=ACTIVE, lease_token__isnull=True, created_at__lt=grace)
    last_parked = (
        RunEvent.objects.filter(run=OuterRef("pk"), kind="run_parked")
        .order_by("-seq")
        .values("seq")[:1]
    )
    events = RunEvent.objects.filter(run=OuterRef("pk"), at__lt=grace)
    # A decision or cancel recorded after the run parked, a lease ago: its continuation was lost.
    # (A cancelled run is never left parked, whichever of the two committed first.)
    woken = (
        Run.objects.filter(status__in=PARKED, lease_token__isnull=True)
        .annotate(parked_seq=Subquery(last_parked))
        .filter(
            Exists(events.filter(kind__in=WAKE_KINDS, seq__gt=OuterRef("parked_seq")))
            | (Q(cancel_requested=True) & Exists(events.filter(kind="cancel_requested")))
        )
    )
    return {
        *expired.values_list("pk", flat=True),
        *orphaned.values_list("pk", flat=True),
        *woken.values_list("pk", flat=True),
    }


def _run_ids_of(tasks) -> list[int]:
    return [_run_id(task) for task in tasks.filter(task_path=TASK_PATH).only("args_kwargs")]


def _run_id(task: DBTaskResult) -> int:
    args = task.args_kwargs.get("args") or []
    return int(args[0] if args else task.args_kwargs.get("kwargs", {}).get("run_id"))


def start_sweeper_thread() -> threading.Event:
    """Sweep on a daemon thread until the returned event is set."""
    stop = threading.Event()

    def loop() -> None:
        delay = sweep_interval()
        kept = KeptConnection("the sweeper")
        while not stop.wait(delay):
            try:
                kept.check()
                used = None
                try:
                    used = connection_used()
                    sweep_once()
                except Exception as error:
                    if used is None or not connection_lost(used=used):
                        raise
                    # Dropped since the check (a restart): once more, reconnected. A sweep is
                    # one transaction, and queues only runs without a task.
                    logger.warning("sweeper: connection lost (%s); sweeping again", error)
                    sweep_once()
                delay = sweep_delay()
            except Exception:
                logger.exception("sweep failed")
                connections.close_all()
                delay = sweep_interval()

    threading.Thread(target=loop, name="sweeper", daemon=True).start()
    return stop
