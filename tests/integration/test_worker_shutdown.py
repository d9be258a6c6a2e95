"""A worker process stopped with SIGTERM hands its runs over instead of leaving them to expire."""

import signal

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.models import Run, Step
from plans.services.runs import run_create, run_start
from tests.integration.conftest import base_env, sqlite_settings
from tests.integration.it_tools import gate_open
from tests.integration.support import wait_until

pytestmark = pytest.mark.multiprocess

LEASE_S = 60  # long: only a hand-over can free the run in time


def test_a_worker_stopped_with_sigterm_hands_its_run_over_to_the_next(
    processes, this_process_on, settings, tmp_path, monkeypatch
):
    gates, database = tmp_path / "gates", tmp_path / "agentsite.sqlite3"
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(gates))
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    env = base_env(
        AGENTSITE_SQLITE_PATH=str(database),
        AGENTSITE_VAR_DIR=str(tmp_path / "var"),
        AGENTSITE_LEASE_SECONDS=str(LEASE_S),
        AGENTSITE_TOOL_MODULES="tests.integration.it_tools",
        AGENTSITE_IT_GATES=str(gates),
    )
    migrate = processes("migrate", ["manage.py", "migrate", "--no-input"], env)
    assert migrate.popen.wait(timeout=120) == 0, migrate.log()
    worker_args = ["manage.py", "run_worker", "--threads", "2", "--grace", "0.5"]
    first = processes("first", worker_args, env)
    first.wait_for_log("threads, sweeper on")

    with this_process_on(sqlite_settings(database)):
        author = get_user_model().objects.create_user("it-author")
        run = run_create(
            author=author,
            goal_text="outlive a deploy",
            plan_data={"steps": [{"id": 1, "tool": "hold", "args": {"label": "x", "gate": "g"}}]},
        )
        run_start(run)
        step = Step.objects.filter(plan__run=run, step_id=1)
        wait_until(lambda: step.get().status == Step.Status.RUNNING, timeout=30)

        first.signal(signal.SIGTERM)
        assert first.popen.wait(timeout=30) == 0
        stopped_at = timezone.now()

        assert f"handed runs [{run.pk}] over" in first.log()
        assert Run.objects.get(pk=run.pk).lease_expires_at <= stopped_at
        tasks = DBTaskResult.objects.order_by("enqueued_at")
        assert [t.status for t in tasks] == [TaskResultStatus.FAILED, TaskResultStatus.READY]
        assert tasks[0].exception_class_path == "plans.runtime.sweeper.WorkerLost"

        processes("second", worker_args, env)
        wait_until(lambda: step.get().attempts == 2, timeout=30, what="the next worker")
        gate_open("g")
        wait_until(lambda: Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED, timeout=30)
