"""The worker's claim (one prepared UPDATE ... RETURNING): django-tasks-db's order, its bookkeeping,
and never one task to two workers, on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.journal.tasks import advance_run_task
from plans.runtime.worker import RunWorker
from tests.integration.conftest import postgres_settings


@pytest.fixture
def database_tasks(settings):
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }


def claims_in_order_with_bookkeeping() -> None:
    later = advance_run_task.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1)
    low = advance_run_task.enqueue(2)  # enqueued before the next, so claimed before it
    first_normal = advance_run_task.enqueue(3)
    urgent = advance_run_task.using(priority=10).enqueue(4)
    worker = RunWorker(worker_id="claimer-1")

    claimed = [worker._claim_next() for _ in range(3)]
    # Higher priority first, then by run_after and enqueue time (django-tasks-db's order).
    assert [str(task.pk) if task else None for task in claimed] == [
        str(urgent.id),
        str(low.id),
        str(first_normal.id),
    ]
    assert worker._claim_next() is None  # the one due in an hour waits
    for task in claimed:
        assert task is not None
        row = DBTaskResult.objects.get(pk=task.pk)
        assert row.status == TaskResultStatus.RUNNING
        assert row.worker_ids == ["claimer-1"] and row.started_at is not None
        assert task.worker_ids == ["claimer-1"] and task.task.name == advance_run_task.name
    assert DBTaskResult.objects.get(pk=later.id).status == TaskResultStatus.READY


def each_task_claimed_once(threads: int, tasks: int) -> None:
    enqueued = {str(advance_run_task.enqueue(i).id) for i in range(tasks)}
    claimed: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def claim(index: int) -> None:
        worker = RunWorker(worker_id=f"claimer-{index}")
        start.wait()
        try:
            while True:
                task = worker._claim_next()
                if task is None:
                    if DBTaskResult.objects.ready().exists():
                        continue  # locked out for a moment (SQLite): look again
                    return
                with lock:
                    claimed.append(str(task.pk))
        finally:
            connections.close_all()

    pool = [threading.Thread(target=claim, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=60)
    assert sorted(claimed) == sorted(enqueued)
    runners = DBTaskResult.objects.filter(pk__in=enqueued).values_list("worker_ids", flat=True)
    assert all(len(ids) == 1 for ids in runners)


@pytest.mark.django_db(transaction=True)
def test_sqlite_claims_in_django_tasks_order_and_records_the_worker(database_tasks):
    claims_in_order_with_bookkeeping()


@pytest.mark.django_db(transaction=True)
def test_sqlite_never_gives_one_task_to_two_workers(database_tasks):
    each_task_claimed_once(threads=4, tasks=60)


@pytest.mark.services
def test_postgresql_claims_in_order_and_never_one_task_twice(
    database_tasks, pg_database, this_process_on
):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        claims_in_order_with_bookkeeping()
        each_task_claimed_once(threads=8, tasks=200)
