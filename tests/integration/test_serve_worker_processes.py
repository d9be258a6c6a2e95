"""`manage.py serve --worker-processes N`: the runs are advanced by N run_worker processes
beside the web process, which advances none, and stopping the server stops them."""

import signal
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django_tasks_db.models import DBTaskResult

from plans.models import Run
from plans.services.runs import run_create, run_start
from tests.integration.conftest import base_env, sqlite_settings, wait_for_http
from tests.integration.support import wait_until
from tests.servers import free_port

pytestmark = pytest.mark.multiprocess


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_runs_are_advanced_by_the_worker_processes_and_stop_with_the_server(
    processes, this_process_on, settings, tmp_path
):
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    env = base_env(AGENTSITE_VAR_DIR=str(tmp_path / "var"))
    port = free_port()
    serve = ["manage.py", "serve", "--port", str(port), "--no-demo-users"]
    server = processes("serve", [*serve, "--worker-processes", "2", "--workers", "1"], env)
    wait_for_http(f"http://127.0.0.1:{port}/accounts/login/")
    server.wait_for_log("2 worker processes x 1 threads")
    for index in (1, 2):
        server.wait_for_log(f"-serve-p{index}: 1 threads, sweeper on")
    workers = children_of(server.pid)
    assert len(workers) == 2

    with this_process_on(sqlite_settings(tmp_path / "var" / "agentsite.sqlite3")):
        author = get_user_model().objects.create_user("it-author")
        runs = [
            run_create(
                author=author,
                goal_text=f"run {index}",
                plan_data={
                    "steps": [{"id": 1, "tool": "calculator", "args": {"expression": "2+2"}}]
                },
            )
            for index in range(4)
        ]
        for run in runs:
            run_start(run)
        wait_until(
            lambda: all(Run.objects.get(pk=r.pk).status == Run.Status.COMPLETED for r in runs),
            timeout=60,
            what="the runs to complete",
        )
        wait_until(
            lambda: DBTaskResult.objects.exclude(worker_ids=[]).count() == len(runs),
            what="the runs' tasks to be taken",
        )
        taken_by = {task.worker_ids[0].rsplit("-", 1)[0] for task in DBTaskResult.objects.all()}
    # Every run was taken by a worker process (ids end -p1-<thread> or -p2-<thread>), none
    # by the web process, whose own ids would end -serve-<thread>.
    assert all(worker.endswith(("-serve-p1", "-serve-p2")) for worker in taken_by), taken_by

    server.signal(signal.SIGTERM)
    server.popen.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
