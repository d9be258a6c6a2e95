"""Django Tasks entry points: a run is advanced by a task, never inside a request."""

from django.db import transaction
from django.tasks import task

from plans import execution


@task
def advance_run_task(run_id: int) -> str:
    return execution.advance_run(run_id)


def run_enqueue(run_id: int) -> None:
    """Queue the run's continuation once the current transaction has committed."""
    transaction.on_commit(lambda: advance_run_task.enqueue(run_id))
