"""A PostgreSQL restart between two runs costs the next run nothing: one real worker process
advances both, each tool is called once, and every call's step_started is on record."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.models import Run, RunEvent, ToolCall
from plans.services.runs import run_create, run_start
from tests.integration.conftest import base_env, postgres_settings, service_url
from tests.integration.it_tools import calls_made
from tests.integration.support import wait_until

pytestmark = [pytest.mark.services, pytest.mark.multiprocess]

LEASE_S = 6.0


def pg_restart() -> None:
    """Restart the test server as an operator would (`pg_ctl restart -m fast`): every session
    ends at once, and the server is back when this returns."""
    service_url("AGENTSITE_TEST_DATABASE_URL")
    data = os.environ.get("AGENTSITE_TEST_PG_DATA")
    pg_bin = os.environ.get("AGENTSITE_TEST_PG_BIN")
    if not data or not pg_bin:
        pytest.skip("AGENTSITE_TEST_PG_DATA and _BIN are not set: start it with .ci/services.sh")
    run_as = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
    log = str(Path(data).parent / "pg.log")
    subprocess.run(  # noqa: S603 - the test server's own pg_ctl
        [*run_as, f"{pg_bin}/pg_ctl", "-D", data, "-l", log, "-m", "fast", "-w", "restart"],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=60,
    )


def three_then_one(name: str) -> dict:
    """Three impure calls in one round, then one that needs them."""
    steps = [{"id": k, "tool": "tally", "args": {"label": f"{name}-s{k}"}} for k in (1, 2, 3)]
    steps.append(
        {"id": 4, "tool": "tally", "args": {"label": f"{name}-join"}, "depends_on": [1, 2, 3]}
    )
    return {"steps": steps}


def test_a_database_restart_between_runs_costs_the_next_run_nothing(
    pg_database, processes, this_process_on, settings, tmp_path, monkeypatch
):
    gates = tmp_path / "gates"
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(gates))
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    env = base_env(
        AGENTSITE_DATABASE_URL=pg_database,
        AGENTSITE_VAR_DIR=str(tmp_path / "var"),
        AGENTSITE_LEASE_SECONDS=str(LEASE_S),
        AGENTSITE_TOOL_MODULES="tests.integration.it_tools",
        AGENTSITE_IT_GATES=str(gates),
    )
    migrate = processes("migrate", ["manage.py", "migrate", "--no-input"], env)
    assert migrate.popen.wait(timeout=120) == 0, migrate.log()
    # One compute slot: the thread (and so the recorder) that advanced the first run is the
    # one that claims the second.
    worker = processes(
        "worker", ["manage.py", "run_worker", "--threads", "1", "--worker-id", "it"], env
    )
    worker.wait_for_log("threads, sweeper on")

    with this_process_on(postgres_settings(pg_database)):
        author = get_user_model().objects.create_user("it-author")

        def started(name: str) -> Run:
            run = run_create(author=author, goal_text=name, plan_data=three_then_one(name))
            run_start(run)
            return run

        def completed(run: Run) -> bool:
            return Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED

        first = started("before")
        wait_until(lambda: completed(first), timeout=60, what="the first run")
        if "worker it-1 started" in worker.log():
            # A spare thread that took the first run's slot while it waited: once it left,
            # the second run is the kept thread's (with the recorder of the first run).
            worker.wait_for_log("worker it-1 stopped")

        pg_restart()
        connections.close_all()  # this process's session ended too

        second = started("after")
        wait_until(lambda: completed(second), timeout=60, what="the second run")

        tasks = DBTaskResult.objects.filter(args_kwargs__args=[second.pk])
        # The run's last commit comes a moment before its task's outcome is recorded.
        wait_until(
            lambda: not tasks.filter(status=TaskResultStatus.RUNNING).exists(),
            what="the second run's task to be recorded",
        )
        assert not DBTaskResult.objects.filter(status=TaskResultStatus.FAILED).exists()
        (task,) = tasks
        assert task.status == TaskResultStatus.SUCCESSFUL
        assert task.return_value == Run.Status.COMPLETED
        assert task.worker_ids[0].startswith("it-")
        kinds = set(RunEvent.objects.filter(run=second).values_list("kind", flat=True))
        assert "run_recovered" not in kinds
        called = sorted(label for label in calls_made() if label.startswith("after"))
        assert called == sorted([f"after-s{k}" for k in (1, 2, 3)] + ["after-join"])
        on_record = sorted(
            event.payload["args"]["label"]
            for event in RunEvent.objects.filter(run=second, kind="step_started")
        )
        assert on_record == called
        assert ToolCall.objects.filter(run=second).count() == 4
        # Found by the recorder's check before the run's first write, not by that write.
        log = worker.log()
        assert "the recorder: its database connection was lost while idle" in log
        assert "the recorder lost its connection" not in log
