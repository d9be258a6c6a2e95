"""Workers that take queued tasks (advance_run) from the database and run them.

An idle worker sleeps until it is woken: at once by an enqueue in its own process, through
PostgreSQL LISTEN/NOTIFY by an enqueue in any other process, and every IDLE_POLL_S regardless
(the fallback for SQLite across processes and for a notification missed while reconnecting).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections, router
from django.db.utils import OperationalError
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

logger = logging.getLogger(__name__)

# Without a wake-up, a worker looks for work this often.
IDLE_POLL_S = 1.0
# The PostgreSQL channel an enqueue notifies (see plans.runtime.tasks.announce_enqueued).
TASKS_CHANNEL = "agentsite_tasks"


def gc_tune_for_serving() -> None:
    """Collect garbage the way a long-running process that advances runs wants to.

    What startup imported is frozen out of the collector's scans, and young collections run
    every 50,000 allocations instead of 700: measured, collections were ~8% of a 500-step run.
    Call once, after startup's imports.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


class Waker:
    """Wakes idle workers; a wake-up that arrives while a worker is busy is not lost."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.generation = 0

    def wake(self, count: int = 1) -> None:
        with self._condition:
            self.generation += 1
            self._condition.notify(count)

    def wake_all(self) -> None:
        with self._condition:
            self.generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep until a wake-up after generation `seen`, or the timeout."""
        with self._condition:
            self._condition.wait_for(lambda: self.generation != seen, timeout)


waker = Waker()


def worker_id_prefix() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class RunWorker(Worker):
    """django-tasks-db's worker, sleeping on the process's Waker instead of a fixed interval."""

    def __init__(
        self, *, worker_id: str, backend_name: str = "default", interval: float | None = None
    ) -> None:
        super().__init__(
            queue_names=["default"],
            interval=IDLE_POLL_S if interval is None else interval,
            batch=False,
            backend_name=backend_name,
            startup_delay=False,
            max_tasks=None,
            worker_id=worker_id,
            excluded_queue_names=[],
        )
        self.current: DBTaskResult | None = None
        self.thread: threading.Thread | None = None

    def stop(self) -> None:
        """Take no new task; the one running (if any) carries on."""
        self.running = False
        waker.wake_all()

    def run(self) -> None:
        logger.info("worker %s started", self.worker_id)
        try:
            while self.running:
                # Read before looking, so an enqueue that commits meanwhile cuts the sleep short.
                seen = waker.generation
                task_result = self._claim_or_none()
                if task_result is None:
                    waker.wait(seen, self.interval)
                    continue
                # Pass the baton: if more tasks are queued, another idle worker takes the next.
                waker.wake()
                self.current = task_result
                try:
                    self.run_task(task_result)
                except Exception:
                    # Recording the outcome failed (the database went away); the sweeper recovers.
                    logger.exception("worker %s: task %s", self.worker_id, task_result.id)
                    connections.close_all()
                finally:
                    self.current = None
        finally:
            connections.close_all()
            logger.info("worker %s stopped", self.worker_id)

    def _claim_or_none(self) -> DBTaskResult | None:
        # The thread keeps its connection (whatever CONN_MAX_AGE says, which is about
        # requests): reconnecting for every look would put a connection setup on every hand-off.
        try:
            return self._claim_next()
        except Exception as error:
            # One line, not a traceback: every thread says it every second the database is away.
            logger.warning("worker %s could not look for tasks: %s", self.worker_id, error)
            connections.close_all()  # reconnect on the next look
            return None

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


class TaskNotifications:
    """Wakes this process's workers when another process enqueues (PostgreSQL LISTEN)."""

    def __init__(self, *, alias: str = "default", connect: Callable[[], Any] | None = None) -> None:
        self.alias = alias
        self._connect = connect or self._connect_like_django
        self._stop = threading.Event()
        self.listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-notifications", daemon=True)

    def start(self) -> TaskNotifications:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _connect_like_django(self) -> Any:
        """A psycopg connection of its own, configured like the alias's, in autocommit."""
        wrapper = connections.create_connection(self.alias)
        connection = wrapper.get_new_connection(wrapper.get_connection_params())
        connection.autocommit = True
        return connection

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                connection = self._connect()
            except Exception as error:
                logger.warning("task notifications: cannot connect (%s); retrying", error)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            try:
                connection.execute(f"LISTEN {TASKS_CHANNEL}")
                self.listening.set()
                backoff = 0.5
                # Anything enqueued while nobody listened is found by looking now.
                waker.wake_all()
                while not self._stop.is_set():
                    for _notify in connection.notifies(timeout=1.0):
                        waker.wake()
            except Exception as error:
                if not self._stop.is_set():
                    logger.warning("task notifications: connection lost (%s); reconnecting", error)
                    self._stop.wait(backoff)
            finally:
                self.listening.clear()
                connection.close()


_notifications: TaskNotifications | None = None
_notifications_lock = threading.Lock()


def notifications_start() -> TaskNotifications | None:
    """Listen for other processes' enqueues, once per process; None when not on PostgreSQL."""
    global _notifications
    alias = router.db_for_write(DBTaskResult)
    if connections[alias].vendor != "postgresql":
        return None
    with _notifications_lock:
        if _notifications is None:
            _notifications = TaskNotifications(alias=alias).start()
        return _notifications


def start_worker_threads(
    count: int, *, prefix: str | None = None, listen: bool = True
) -> list[RunWorker]:
    """Run `count` workers on daemon threads of this process, woken by enqueues anywhere."""
    if listen:
        notifications_start()
    prefix = prefix or worker_id_prefix()
    workers = [RunWorker(worker_id=f"{prefix}-{i}") for i in range(count)]
    for worker in workers:
        worker.thread = threading.Thread(target=worker.run, name=worker.worker_id, daemon=True)
        worker.thread.start()
    return workers
