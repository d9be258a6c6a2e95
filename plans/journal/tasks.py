"""Django Tasks entry points: a run is advanced by a task, never inside a request."""

from typing import Any

from django.db import connections, router, transaction
from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_enqueued
from django_tasks_db.backend import DatabaseBackend
from django_tasks_db.models import DBTaskResult

from plans.runtime.wakeups import wakeups_send
from plans.runtime.worker import TASKS_CHANNEL, waker


@task
def advance_run_task(run_id: int) -> str:
    # Imported here so that services, which queue runs, do not import the executor, which
    # calls services: the executor loads when a worker first runs a task.
    from plans.runtime.advance import advance_run

    return advance_run(run_id)


def run_enqueue(run_id: int) -> None:
    """Queue the run's continuation once the current transaction has committed."""
    transaction.on_commit(lambda: advance_run_task.enqueue(run_id))


@receiver(task_enqueued, dispatch_uid="plans.runtime.tasks.announce_enqueued")
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
