"""Workers that take queued tasks (advance_run) from the database and run them."""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections
from django.db.utils import OperationalError
from django.tasks.signals import task_enqueued
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

logger = logging.getLogger(__name__)

# Without a wake-up (another process enqueued), a worker looks for work this often.
IDLE_POLL_S = 1.0

_wake = threading.Event()


def _wake_on_enqueue(**_: object) -> None:
    _wake.set()


task_enqueued.connect(_wake_on_enqueue, dispatch_uid="plans.worker.wake")


class RunWorker(Worker):
    """django-tasks-db's worker, woken the moment a task is enqueued in this process."""

    def __init__(self, *, worker_id: str, backend_name: str = "default") -> None:
        super().__init__(
            queue_names=["default"],
            interval=IDLE_POLL_S,
            batch=False,
            backend_name=backend_name,
            startup_delay=False,
            max_tasks=None,
            worker_id=worker_id,
            excluded_queue_names=[],
        )
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.running = False
        self.stopped.set()
        _wake.set()

    def run(self) -> None:
        logger.info("worker %s started", self.worker_id)
        try:
            while self.running:
                close_old_connections()
                task_result = self._claim_next()
                if task_result is not None:
                    self.run_task(task_result)
                    continue
                _wake.wait(self.interval)
                _wake.clear()
        finally:
            close_old_connections()

    def _claim_next(self) -> DBTaskResult | None:
        tasks = DBTaskResult.objects.ready().filter(
            backend_name=self.backend_name, queue_name__in=self.queue_names
        )
        with exclusive_transaction(tasks.db):
            try:
                task_result = tasks.get_locked()
            except OperationalError as error:
                if is_locked_database_exception(error):
                    return None
                raise
            if task_result is not None:
                task_result.claim(self.worker_id)
        return task_result


def start_worker_threads(count: int, *, prefix: str) -> list[RunWorker]:
    """Run `count` workers on daemon threads of this process (the embedded deployment)."""
    workers = [RunWorker(worker_id=f"{prefix}-{i}") for i in range(count)]
    for worker in workers:
        threading.Thread(target=worker.run, name=worker.worker_id, daemon=True).start()
    return workers
