"""Django Tasks entry points: a run is advanced by a task, never inside a request.

The task runs the executor the app binds at start-up (executor_bind, from PlansConfig.ready),
so that this floor, which the services queue runs through, does not import the worker side.
"""

from collections.abc import Callable
from typing import Any

from django.db import connections, router, transaction
from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_enqueued
from django_tasks_db.backend import DatabaseBackend
from django_tasks_db.models import DBTaskResult

from plans.journal.wakeups import TASKS_CHANNEL, waker, wakeups_send

Executor = Callable[[int], str]
_executor: Executor | None = None


def executor_bind(executor: Executor) -> None:
    """Name the function that advances a run (plans.runtime.advance.advance_run)."""
    global _executor
    _executor = executor


@task
def advance_run_task(run_id: int) -> str:
    if _executor is None:
        raise RuntimeError("no executor bound: plans.apps.PlansConfig.ready() has not run")
    return _executor(run_id)


def run_enqueue(run_id: int) -> None:
    """Queue the run's continuation once the current transaction has committed."""
    transaction.on_commit(lambda: advance_run_task.enqueue(run_id))


@receiver(task_enqueued, dispatch_uid="plans.journal.tasks.announce_enqueued")
def announce_enqueued(sender: type, task_result: Any, **_: Any) -> None:
    """Wake workers when the enqueue commits: this process's directly, others' by NOTIFY
    (PostgreSQL) or through their wake-up sockets (SQLite, one host)."""
    if not issubclass(sender, DatabaseBackend):
        return
    alias = router.db_for_write(DBTaskResult)
    connection = connections[alias]
    # Waking before the row is visible would find nothing and sleep again.
    transaction.on_commit(waker.wake, using=alias)
    if connection.vendor == "sqlite":
        transaction.on_commit(lambda: wakeups_send(alias), using=alias)
    elif connection.vendor == "postgresql":
        # In the enqueuing transaction: PostgreSQL delivers it when (and only if) that commits.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [TASKS_CHANNEL, str(task_result.id)])
