"""Recovers runs whose worker died: expired leases and orphaned runs are queued again."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.db import close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.leases import lease_seconds
from plans.models import Run

logger = logging.getLogger(__name__)

TASK_PATH = "plans.tasks.advance_run_task"
ACTIVE = (Run.Status.PLANNING, Run.Status.RUNNING)


class WorkerLost(Exception):
    """The worker running this task stopped renewing its run's lease."""


def sweep_interval() -> float:
    return lease_seconds() / 3


def sweep_once() -> list[int]:
    """Queue every active run that nobody advances; returns their ids."""
    from plans.tasks import advance_run_task

    now = timezone.now()
    grace = now - timedelta(seconds=lease_seconds())
    candidates = list(
        Run.objects.filter(status__in=ACTIVE)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_token__isnull=True, created_at__lt=grace))
        .values_list("pk", flat=True)
    )
    if not candidates:
        return []
    queued = _runs_with_tasks(TaskResultStatus.READY)
    running = _runs_with_tasks(TaskResultStatus.RUNNING)
    requeued = []
    for run_id in candidates:
        for task in running.get(run_id, []):
            # Its worker is gone (the lease expired): record that, so it is not RUNNING forever.
            task.set_failed(WorkerLost(f"run {run_id}: the worker stopped renewing its lease"))
        if run_id not in queued:
            with transaction.atomic():
                advance_run_task.enqueue(run_id)
            requeued.append(run_id)
    if requeued:
        logger.warning("sweeper re-queued runs %s", requeued)
    return requeued


def _runs_with_tasks(status: str) -> dict[int, list[DBTaskResult]]:
    tasks: dict[int, list[DBTaskResult]] = {}
    for task in DBTaskResult.objects.filter(task_path=TASK_PATH, status=status):
        args = task.args_kwargs.get("args") or [task.args_kwargs.get("kwargs", {}).get("run_id")]
        tasks.setdefault(args[0], []).append(task)
    return tasks


def start_sweeper_thread() -> threading.Event:
    """Sweep on a daemon thread until the returned event is set."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(sweep_interval()):
            try:
                sweep_once()
            except Exception:
                logger.exception("sweep failed")
            finally:
                close_old_connections()

    threading.Thread(target=loop, name="sweeper", daemon=True).start()
    return stop
