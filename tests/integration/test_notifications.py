"""PostgreSQL LISTEN/NOTIFY: an enqueue anywhere wakes idle workers, once it has committed."""

import time
from types import SimpleNamespace

import psycopg
import pytest
from django.db import transaction
from django_tasks_db.backend import DatabaseBackend

from plans.journal.tasks import announce_enqueued
from plans.journal.wakeups import TASKS_CHANNEL, waker
from plans.runtime.worker import TaskNotifications
from tests.integration.conftest import postgres_settings
from tests.integration.support import wait_until

pytestmark = pytest.mark.services


@pytest.fixture
def listening(pg_database):
    """A raw connection listening on the workers' channel."""
    with psycopg.connect(pg_database, autocommit=True) as connection:
        connection.execute(f"LISTEN {TASKS_CHANNEL}")
        yield connection


def notified(connection, wait=0.3) -> list[str]:
    return [n.payload for n in connection.notifies(timeout=wait)]


def test_an_enqueue_notifies_the_workers_when_its_transaction_commits(
    pg_database, listening, this_process_on
):
    with this_process_on(postgres_settings(pg_database)):
        with transaction.atomic():
            announce_enqueued(DatabaseBackend, task_result=SimpleNamespace(id="task-1"))
            assert notified(listening) == []  # not before the task row is visible

        assert notified(listening, wait=5) == ["task-1"]


def test_an_enqueue_rolled_back_notifies_nobody(pg_database, listening, this_process_on):
    with this_process_on(postgres_settings(pg_database)):
        with pytest.raises(RuntimeError), transaction.atomic():
            announce_enqueued(DatabaseBackend, task_result=SimpleNamespace(id="task-2"))
            raise RuntimeError("the enqueuing request failed")

        assert notified(listening) == []


def test_a_notification_wakes_this_processs_idle_workers(pg_database):
    notifications = TaskNotifications(
        connect=lambda: psycopg.connect(pg_database, autocommit=True)
    ).start()
    try:
        wait_until(notifications.listening.is_set, what="the listener to connect")
        time.sleep(0.1)  # its catch-up wake-up is behind us
        seen = waker.generation

        with psycopg.connect(pg_database, autocommit=True) as other_process:
            other_process.execute("SELECT pg_notify(%s, 'task-3')", [TASKS_CHANNEL])

        wait_until(lambda: waker.generation != seen, timeout=5, what="a wake-up")
    finally:
        notifications.stop()
