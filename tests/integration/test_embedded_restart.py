"""The embedded default survives a crash: kill `manage.py serve` mid-run, start it again."""

import signal

import pytest
from django.contrib.auth import get_user_model

from plans.models import Approval, LedgerEntry, Run, RunEvent, Step, ToolCall
from plans.services.approvals import approval_decide
from plans.services.runs import run_create, run_start
from tests.integration.conftest import base_env, sqlite_settings, wait_for_http
from tests.integration.it_tools import gate_open
from tests.integration.support import seqs_of, wait_until
from tests.servers import free_port

pytestmark = pytest.mark.multiprocess

LEASE_S = 2


@pytest.fixture
def embedded(tmp_path, settings, monkeypatch):
    """What the server and this process share: a SQLite file, the tools, the gates."""
    gates = tmp_path / "gates"
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(gates))
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    return base_env(
        AGENTSITE_VAR_DIR=str(tmp_path / "var"),
        AGENTSITE_LEASE_SECONDS=str(LEASE_S),
        AGENTSITE_TOOL_MODULES="tests.integration.it_tools",
        AGENTSITE_IT_GATES=str(gates),
    )


def serve(processes, env, name):
    port = free_port()
    server = processes(
        name, ["manage.py", "serve", "--port", str(port), "--no-demo-users"], env=env
    )
    wait_for_http(f"http://127.0.0.1:{port}/accounts/login/")
    return server


def test_a_run_survives_the_server_being_killed_mid_run(
    embedded, processes, this_process_on, tmp_path
):
    first = serve(processes, embedded, "serve-1")
    with this_process_on(sqlite_settings(tmp_path / "var" / "agentsite.sqlite3")):
        author = get_user_model().objects.create_user("it-author")
        running = run_create(
            author=author,
            goal_text="survive a crash",
            plan_data={
                "steps": [
                    {"id": 1, "tool": "pause", "args": {"seconds": 0.05, "label": "before"}},
                    {
                        "id": 2,
                        "tool": "hold",
                        "args": {"label": "x", "gate": "g"},
                        "depends_on": [1],
                    },
                    {"id": 3, "tool": "echo", "args": {"text": "{{2}}"}, "depends_on": [2]},
                ]
            },
        )
        waiting = run_create(
            author=author,
            goal_text="wait for a reviewer across a crash",
            plan_data={
                "steps": [
                    {
                        "id": 1,
                        "tool": "charge",
                        "args": {"account": "A", "amount": 5, "gate": "open"},
                    }
                ]
            },
        )
        run_start(running)
        run_start(waiting)
        step_2 = Step.objects.filter(plan__run=running, step_id=2)
        wait_until(lambda: step_2.get().status == Step.Status.RUNNING, timeout=30)
        wait_until(
            lambda: Run.objects.get(pk=waiting.pk).status == Run.Status.AWAITING_APPROVAL,
            timeout=30,
        )

        first.signal(signal.SIGKILL)
        first.popen.wait()
        serve(processes, embedded, "serve-2")
        reviewer = get_user_model().objects.create_user("it-reviewer")
        approval_decide(
            approval=Approval.objects.get(run=waiting), reviewer=reviewer, approve=True, via="cli"
        )
        gate_open("open")
        gate_open("g")

        for run in (running, waiting):
            wait_until(
                lambda run=run: Run.objects.get(pk=run.pk).is_terminal,
                timeout=60,
                what=f"run {run.pk} to end",
            )
        steps = {s.step_id: s for s in Step.objects.filter(plan__run=running)}
        assert Run.objects.get(pk=running.pk).status == Run.Status.COMPLETED
        assert Run.objects.get(pk=waiting.pk).status == Run.Status.COMPLETED
        assert ToolCall.objects.filter(step=steps[1]).count() == 1  # done before: not run again
        assert steps[2].attempts == 2  # running at the crash: run again, its attempt counted
        assert RunEvent.objects.filter(run=running, kind="run_recovered").count() == 1
        assert LedgerEntry.objects.count() == 1
        for run in (running, waiting):
            assert seqs_of(run.pk) == list(range(1, len(seqs_of(run.pk)) + 1))
