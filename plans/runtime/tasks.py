"""Django Tasks entry points: a run is advanced by a task, never inside a request."""

from typing import Any

from django.db import connections, router, transaction
from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_enqueued
from django_tasks_db.backend import DatabaseBackend
from django_tasks_db.models import DBTaskResult

from plans.runtime.advance import advance_run
from plans.runtime.worker import TASKS_CHANNEL, waker


@task
def advance_run_task(run_id: int) -> str:
    return advance_run(run_id)


def run_advance_here(run_id: int) -> str:
    """Advance the run in this thread, now (for commands that run goals in-process)."""
    return advance_run(run_id)


def run_enqueue(run_id: int) -> None:
    """Queue the run's continuation once the current transaction has committed."""
    transaction.on_commit(lambda: advance_run_task.enqueue(run_id))


@receiver(task_enqueued, dispatch_uid="plans.runtime.tasks.announce_enqueued")
def announce_enqueued(sender: type, task_result: Any, **_: Any) -> None:
    """Wake workers when the enqueue commits: this process's directly, others' by NOTIFY."""
    if not issubclass(sender, DatabaseBackend):
        return
    alias = router.db_for_write(DBTaskResult)
    connection = connections[alias]
    # Waking before the row is visible would find nothing and sleep again.
    transaction.on_commit(waker.wake, using=alias)
    if connection.vendor == "postgresql":
        # In the enqueuing transaction: PostgreSQL delivers it when (and only if) that commits.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [TASKS_CHANNEL, str(task_result.id)])
