"""Workers that take queued tasks (advance_run) from the database and run them.

An idle worker sleeps until it is woken: at once by an enqueue in its own process, through
PostgreSQL LISTEN/NOTIFY (on SQLite, through a local socket: plans.journal.wakeups) by an enqueue
in any other process, and every IDLE_POLL_S regardless (the fallback for a wake-up missed).

Waiting holds no worker: a process's worker count is a number of compute slots (runs that may
advance at once), not of runs in progress. A run that waits on a model call or on its tool
calls gives its slot back for the wait (``waiting()``), and if no thread of the group is left
to claim the next task, a spare worker thread is started to claim it with that slot. So a
process at its default (2 slots) keeps hundreds of runs in flight: each one waiting costs a
parked thread (no CPU, a small stack) rather than a slot, and at most 2 compute at once, which
under the GIL is what a process can use anyway. The wait returns the slot to the run first:
runs that come back from a wait take free slots before new runs are claimed.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connections, router
from django.db.utils import OperationalError
from django.utils import timezone
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult, get_date_max
from django_tasks_db.utils import is_locked_database_exception

from plans.bulk import column_sql, connection_lost, rows_where
from plans.journal.wakeups import TASKS_CHANNEL, waker, wakeups_listen

logger = logging.getLogger(__name__)

# Without a wake-up, a worker looks for work this often.
IDLE_POLL_S = 1.0
# The LISTEN connection, quiet this long, is checked (a dropped one hears nothing).
LISTEN_CHECK_S = 5.0
# A spare worker thread (one started for a run that went waiting) with nothing to claim for
# this long leaves, as long as another thread of its group is left to claim. Short: after a
# burst of hundreds of runs, every idle spare would otherwise look for work (a write
# transaction on SQLite) each IDLE_POLL_S.
SPARE_IDLE_EXIT_S = 2.0


def gc_tune_for_serving() -> None:
    """Collect garbage the way a long-running process that advances runs wants to.

    What startup imported is frozen out of the collector's scans, and young collections run
    every 50,000 allocations instead of 700: measured, collections were ~8% of a 500-step run.
    Call once, after startup's imports.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def worker_id_prefix() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class ComputeSlots:
    """How many of a group's runs may advance at once; runs back from a wait are served first."""

    def __init__(self, size: int) -> None:
        self._lock = threading.Lock()
        self._returners = threading.Condition(self._lock)
        self._claimers = threading.Condition(self._lock)
        self._free = size
        self._returning = 0  # runs back from a wait, waiting for a slot

    def free(self) -> int:
        with self._lock:
            return self._free

    def acquire_to_claim(self, timeout: float) -> bool:
        """A slot to claim a new task with; False after the timeout (or while runs wait)."""
        with self._claimers:
            ready = self._claimers.wait_for(lambda: self._free > 0 and not self._returning, timeout)
            if ready:
                self._free -= 1
            return ready

    def acquire_to_return(self) -> None:
        """A slot for a run back from a wait: before any new claim."""
        with self._returners:
            self._returning += 1
            try:
                self._returners.wait_for(lambda: self._free > 0)
            finally:
                self._returning -= 1
            self._free -= 1
            if self._free and not self._returning:
                self._claimers.notify()

    def release(self) -> None:
        with self._lock:
            self._free += 1
            if self._returning:
                self._returners.notify()
            else:
                self._claimers.notify()


class WorkerGroup:
    """Worker threads sharing compute slots: `size` kept, and spares while runs wait.

    Invariant: whenever a run gives its slot up for a wait, some thread of the group is (or is
    started to be) looking for the next task, up to `max_threads` threads in all.
    """

    def __init__(self, size: int, *, prefix: str, max_threads: int | None = None) -> None:
        self.slots = ComputeSlots(size)
        self.prefix = prefix
        self.max_threads = max(size, max_threads or settings.AGENTSITE_MAX_ACTIVE_RUNS)
        self._lock = threading.Lock()
        self.claiming = 0  # threads not running a task (looking for one, or asleep)
        self.workers: list[RunWorker] = []
        self.stopping = False

    def start(self, *, spare: bool = False) -> RunWorker:
        """A new worker thread of the group (counted as live and claiming by the caller)."""
        with self._lock:
            worker = RunWorker(worker_id=f"{self.prefix}-{len(self.workers)}", group=self)
            worker.spare = spare
            self.workers.append(worker)
            if not spare:
                self.claiming += 1
        worker.thread = threading.Thread(target=worker.run, name=worker.worker_id, daemon=True)
        worker.thread.start()
        return worker

    def live(self) -> list[RunWorker]:
        with self._lock:
            return [w for w in self.workers if w.thread is not None and w.thread.is_alive()]

    def stop(self) -> None:
        self.stopping = True

    def wait_started(self) -> None:
        self.slots.release()
        with self._lock:
            spawn = (
                not self.claiming
                and not self.stopping
                and sum(w.thread is not None and w.thread.is_alive() for w in self.workers)
                < self.max_threads
            )
            if spawn:
                self.claiming += 1
        if spawn:
            self.start(spare=True)

    def wait_ended(self) -> None:
        self.slots.acquire_to_return()

    def task_started(self) -> None:
        with self._lock:
            self.claiming -= 1

    def task_ended(self) -> None:
        with self._lock:
            self.claiming += 1

    def may_leave(self) -> bool:
        """A spare with nothing to do leaves if another thread of the group is left to claim."""
        with self._lock:
            if self.claiming > 1 or self.stopping:
                self.claiming -= 1
                return True
            return False


_local = threading.local()


def waiting_group() -> WorkerGroup | None:
    """The group whose compute slot this thread holds (None: not a worker's thread)."""
    return getattr(_local, "group", None)


@contextmanager
def waiting() -> Iterator[None]:
    """Around a wait (a model call, tool calls): this thread's compute slot serves others.

    Outside a worker of a group (a test or a benchmark calling advance_run) it does nothing.
    """
    group: WorkerGroup | None = getattr(_local, "group", None)
    if group is None:
        yield
        return
    group.wait_started()
    try:
        yield
    finally:
        group.wait_ended()


class RunWorker(Worker):
    """django-tasks-db's worker, sleeping on the process's Waker instead of a fixed interval."""

    def __init__(
        self,
        *,
        worker_id: str,
        backend_name: str = "default",
        interval: float | None = None,
        group: WorkerGroup | None = None,
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
        self.group = group or WorkerGroup(1, prefix=worker_id)
        self.spare = False

    def stop(self) -> None:
        """Take no new task (nor do the group's spares); the one running (if any) carries on."""
        self.running = False
        self.group.stop()
        waker.wake_all()

    def run(self) -> None:
        logger.info("worker %s started", self.worker_id)
        group, slots = self.group, self.group.slots
        idle_since = time.monotonic()
        try:
            while self.running and not (self.spare and group.stopping):
                # Read before looking, so an enqueue that commits meanwhile cuts the sleep short.
                seen = waker.generation
                if not slots.acquire_to_claim(self.interval):
                    continue
                task_result = self._claim_or_none()
                if task_result is None:
                    slots.release()
                    if (
                        self.spare
                        and time.monotonic() - idle_since > SPARE_IDLE_EXIT_S
                        and group.may_leave()
                    ):
                        return
                    waker.wait(seen, self.interval)
                    continue
                # Pass the baton: if more tasks are queued, another idle worker takes the next.
                waker.wake()
                self._run_holding_slot(task_result)
                idle_since = time.monotonic()
            if self.spare:
                group.may_leave()
        finally:
            connections.close_all()
            logger.info("worker %s stopped", self.worker_id)

    def _run_holding_slot(self, task_result: DBTaskResult) -> None:
        """Run the task with this thread's compute slot, which it gives up while it waits."""
        group = self.group
        group.task_started()
        self.current = task_result
        _local.group = group
        try:
            self.run_task(task_result)
        except Exception:
            # Recording the outcome failed (the database went away); the sweeper recovers.
            logger.exception("worker %s: task %s", self.worker_id, task_result.id)
            connections.close_all()
        finally:
            _local.group = None
            self.current = None
            group.slots.release()
            group.task_ended()

    def _claim_or_none(self) -> DBTaskResult | None:
        # The thread keeps its connection (whatever CONN_MAX_AGE says, which is about
        # requests): reconnecting for every look would put a connection setup on every hand-off.
        for attempt in (1, 2):
            try:
                return self._claim_next()
            except Exception as error:
                if attempt == 1 and connection_lost():
                    continue  # dropped while idle (a server restart): look again, reconnected
                # One line, not a traceback: every thread says it every second the database
                # is away.
                logger.warning("worker %s could not look for tasks: %s", self.worker_id, error)
                connections.close_all()  # reconnect on the next look
        return None

    def _claim_next(self) -> DBTaskResult | None:
        """The next ready task, claimed (RUNNING, this worker's id appended) in one statement.

        The same choice and ordering as django-tasks-db's claim (priority, run_after, enqueued),
        in prepared SQL: its ORM form cost ~1-2 ms of CPU per run, the most of any one step of a
        run on a busy process.
        """
        alias = router.db_for_write(DBTaskResult)
        connection = connections[alias]
        now = timezone.now()
        ops = connection.ops
        params = [
            ops.adapt_datetimefield_value(now),
            self.worker_id,
            self.backend_name,
            *self.queue_names,
            ops.adapt_datetimefield_value(get_date_max()),
            ops.adapt_datetimefield_value(now),
        ]
        try:
            with connection.cursor() as cursor:
                statement = _claim_statement(alias, connection.vendor, len(self.queue_names))
                cursor.execute(statement, params)
                row = cursor.fetchone()
        except OperationalError as error:
            if is_locked_database_exception(error):
                return None
            raise
        if row is None:
            return None
        (task_result,) = rows_where(DBTaskResult, id=str(row[0]))  # a str on either database
        return task_result


@functools.cache
def _claim_statement(alias: str, vendor: str, queues: int) -> str:
    """UPDATE ... RETURNING id of the next ready task (skipping rows locked on PostgreSQL).

    Cached per vendor too: an alias may be pointed at another database (tests do it).
    """
    connection = connections[alias]
    quote = connection.ops.quote_name
    meta = DBTaskResult._meta
    table = quote(meta.db_table)

    def column(name: str) -> str:
        return column_sql(meta, quote, name)

    if vendor == "postgresql":
        append_worker = f"{column('worker_ids')} || jsonb_build_array(%s::text)"
        lock = " FOR UPDATE SKIP LOCKED"
    else:  # SQLite: the UPDATE takes the write lock, so no two workers claim one row
        append_worker = f"json_insert({column('worker_ids')}, '$[#]', %s)"
        lock = ""
    placeholders = ", ".join(["%s"] * queues)
    return (
        f"UPDATE {table} SET {column('status')} = 'RUNNING', {column('started_at')} = %s, "  # noqa: S608
        f"{column('worker_ids')} = {append_worker} "
        f"WHERE {column('id')} = (SELECT {column('id')} FROM {table} "
        f"WHERE {column('status')} = 'READY' AND {column('backend_name')} = %s "
        f"AND {column('queue_name')} IN ({placeholders}) "
        f"AND ({column('run_after')} = %s OR {column('run_after')} <= %s) "
        f"ORDER BY {column('priority')} DESC, {column('run_after')} ASC, "
        f"{column('enqueued_at')} ASC LIMIT 1{lock}) "
        f"RETURNING {column('id')}"
    )


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
                heard_at = time.monotonic()
                while not self._stop.is_set():
                    for _notify in connection.notifies(timeout=1.0):
                        waker.wake()
                        heard_at = time.monotonic()
                    if time.monotonic() - heard_at >= LISTEN_CHECK_S:
                        # Quiet for a while: still connected? A dropped connection hears
                        # nothing, and every other process's enqueue would wait for a poll.
                        connection.execute("SELECT 1")
                        heard_at = time.monotonic()
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
    count: int, *, prefix: str | None = None, listen: bool = True, max_threads: int | None = None
) -> list[RunWorker]:
    """Run `count` workers (compute slots) on daemon threads of this process, woken by enqueues
    anywhere; spare threads join them while runs wait, up to max_threads in all."""
    if listen:
        notifications_start()
        wakeups_listen(waker.wake)  # SQLite: other processes' enqueues, through a socket
    group = WorkerGroup(count, prefix=prefix or worker_id_prefix(), max_threads=max_threads)
    return [group.start() for _ in range(count)]
