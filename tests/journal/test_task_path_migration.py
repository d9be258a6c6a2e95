"""Tasks queued before the tasks module moved to plans.journal still run after the upgrade."""

import importlib

import pytest
from django.apps import apps
from django.utils import timezone
from django.utils.module_loading import import_string
from django_tasks_db.models import DBTaskResult

from plans.journal import tasks
from plans.journal.tasks import advance_run_task
from plans.runtime.advance import advance_run

migration = importlib.import_module("plans.migrations.0025_task_path_moved_to_journal")


def queued(path: str) -> DBTaskResult:
    return DBTaskResult.objects.create(
        task_path=path,
        args_kwargs={"args": [1], "kwargs": {}},
        priority=0,
        queue_name="default",
        backend_name="default",
        run_after=timezone.now(),
    )


@pytest.mark.django_db
def test_a_task_queued_under_the_old_path_points_at_the_journals_task():
    old = queued("plans.runtime.tasks.advance_run_task")
    other = queued("somewhere.else.a_task")

    migration.forwards(apps, None)

    old.refresh_from_db()
    other.refresh_from_db()
    assert old.task_path == "plans.journal.tasks.advance_run_task"
    assert import_string(old.task_path) is advance_run_task
    assert other.task_path == "somewhere.else.a_task"


@pytest.mark.django_db
def test_the_rename_goes_back_on_a_downgrade():
    new = queued("plans.journal.tasks.advance_run_task")

    migration.backwards(apps, None)

    new.refresh_from_db()
    assert new.task_path == "plans.runtime.tasks.advance_run_task"


def test_the_task_runs_the_executor_the_app_bound_at_start_up():
    assert tasks._executor is advance_run
