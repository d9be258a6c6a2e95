"""On SQLite, an enqueue in one process wakes the idle workers of another at once."""

import pytest
from django.contrib.auth import get_user_model
from django_tasks_db.models import DBTaskResult

from plans.services.runs import run_create, run_start
from tests.integration.conftest import base_env, sqlite_settings
from tests.integration.support import wait_until

pytestmark = pytest.mark.multiprocess

# The worker process looks for work by itself this seldom: only a wake-up can be in time.
IDLE_POLL_S = 600
WORKER = (
    "import os, django;"
    "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'agentsite.settings');"
    "django.setup();"
    "from plans.runtime import worker;"
    f"worker.IDLE_POLL_S = {IDLE_POLL_S};"
    "from django.core.management import call_command;"
    "call_command('run_worker', '--threads', '1', '--no-sweeper', '--worker-id', 'woken')"
)


def test_a_worker_process_on_sqlite_takes_another_processs_enqueue_without_polling(
    processes, this_process_on, settings, tmp_path
):
    database = tmp_path / "agentsite.sqlite3"
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    env = base_env(AGENTSITE_SQLITE_PATH=str(database), AGENTSITE_VAR_DIR=str(tmp_path / "var"))
    migrate = processes("migrate", ["manage.py", "migrate", "--no-input"], env)
    assert migrate.popen.wait(timeout=120) == 0, migrate.log()
    worker = processes("worker", ["-c", WORKER], env)
    worker.wait_for_log("threads, sweeper off")

    with this_process_on(sqlite_settings(database)):
        author = get_user_model().objects.create_user("it-author")
        run = run_create(
            author=author,
            goal_text="start now",
            plan_data={"steps": [{"id": 1, "tool": "calculator", "args": {"expression": "1+1"}}]},
        )
        run_start(run)
        claimed = wait_until(
            lambda: DBTaskResult.objects.filter(started_at__isnull=False).first(),
            timeout=IDLE_POLL_S / 20,
            what="the worker process to claim the task",
        )
        assert claimed.worker_ids[0].startswith("woken-")
