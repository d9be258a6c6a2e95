"""Connections lost in the middle of a run (sessions ended as a restart ends them), in this
process against the test PostgreSQL: the recorder retries its flush once, and an advance the
database fails hands its run over rather than failing it."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from pathlib import Path

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans import bulk
from plans.models import Run, RunEvent, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.runtime.recorder import _Writer
from plans.services.runs import run_create
from tests.integration.conftest import postgres_settings, service_url
from tests.integration.it_tools import calls_made, gates_dir

pytestmark = pytest.mark.services


class CommitAnswerLost:
    """A TCP relay to PostgreSQL that, once its gate file exists, lets the next COMMIT of a
    transaction that appends run events (the recorder's) reach the server but loses the
    server's answer: it cuts the client off after the server committed, as a network cut at
    that moment would."""

    def __init__(self, host: str, port: int, gate: Path) -> None:
        self.upstream = (host, port)
        self.gate = gate
        self.cuts = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            cut = threading.Event()
            threading.Thread(
                target=self._to_server, args=(client, server, cut), daemon=True
            ).start()
            threading.Thread(
                target=self._to_client, args=(server, client, cut), daemon=True
            ).start()

    def _to_server(
        self, client: socket.socket, server: socket.socket, cut: threading.Event
    ) -> None:
        appends = False  # this connection's transaction inserts run events: the recorder's
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                appends = appends or b"plans_runevent" in data
                if b"COMMIT" in data:
                    if appends and self.gate.exists():
                        self.gate.unlink()
                        cut.set()
                    appends = False
                server.sendall(data)
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)

    def _to_client(
        self, server: socket.socket, client: socket.socket, cut: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if cut.is_set() and b"COMMIT\x00" in data:
                    # The server said it committed: the client never hears it.
                    self.cuts += 1
                    for end in (client, server):
                        end.shutdown(socket.SHUT_RDWR)  # wakes the other direction's recv
                        end.close()
                    return
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)


@pytest.fixture
def on_postgres(pg_database, this_process_on, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(tmp_path / "gates"))
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        yield get_user_model().objects.create_user("pg-author")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def what_ended(run: Run) -> str:
    """The run's error and its steps' errors, for a failing assertion's message."""
    steps = Step.objects.filter(plan__run=run).values_list("step_id", "status", "error")
    return f"run error: {Run.objects.get(pk=run.pk).error!r}; steps: {list(steps)}"


def chain_around_sever(spare: int) -> dict:
    """A call, one that ends the other sessions, and one after it."""
    return {
        "steps": [
            {"id": 1, "tool": "tally", "args": {"label": "first"}},
            {
                "id": 2,
                "tool": "sever",
                "args": {"spare": spare, "label": "sever"},
                "depends_on": [1],
            },
            {"id": 3, "tool": "tally", "args": {"label": "after"}, "depends_on": [2]},
        ]
    }


def test_a_flush_on_a_lost_connection_is_retried_once_and_the_run_goes_on(
    on_postgres, caplog, monkeypatch
):
    # Every batch goes to the writer thread (not committed on the advancing thread before a
    # round's calls), so the writer is connected when step 2 runs.
    monkeypatch.setattr(_Writer, "idle_here", lambda self: False)
    # Spared: the advancing thread's session. The recorder's, used a moment ago (too recently
    # for its idle check), is ended under it.
    run = run_create(author=on_postgres, goal_text="g", plan_data=chain_around_sever(backend_pid()))
    caplog.set_level(logging.WARNING, logger="plans.runtime.recorder")

    assert advance_run(run.pk) == Run.Status.COMPLETED, what_ended(run)

    assert "the recorder's retry committed" in caplog.text
    assert calls_made() == ["first", "sever", "after"]
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert ToolCall.objects.filter(run=run).count() == 3
    assert not RunEvent.objects.filter(run=run, kind="run_recovered").exists()


def test_an_advance_the_database_fails_hands_the_run_over_instead_of_failing_it(
    on_postgres, settings
):
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    # Nobody spared: the advancing thread's own session ends too, and its next read fails.
    run = run_create(author=on_postgres, goal_text="g", plan_data=chain_around_sever(0))
    DBTaskResult.objects.all().delete()  # run_create's enqueue: the test advances by hand

    assert advance_run(run.pk) == "handed_over", what_ended(run)

    handed = Run.objects.get(pk=run.pk)
    assert handed.status == Run.Status.RUNNING
    assert handed.error == ""
    assert handed.lease_expires_at <= timezone.now()  # free for any worker now
    (task,) = DBTaskResult.objects.all()
    assert task.status == TaskResultStatus.READY
    assert task.args_kwargs["args"] == [run.pk]
    assert not Step.objects.filter(plan__run=run, status=Step.Status.FAILED).exists()

    assert advance_run(run.pk) == Run.Status.COMPLETED
    calls = calls_made()
    assert calls.count("first") == 1  # its outcome was on record before the failure
    assert calls.count("after") == 1


def test_a_kept_connection_dropped_while_idle_is_replaced_before_its_next_use(
    on_postgres, monkeypatch, caplog
):
    monkeypatch.setattr(bulk, "IDLE_CHECK_S", 0.0)
    kept = bulk.KeptConnection("the test")
    kept.check()
    dropped = backend_pid()
    with psycopg.connect(service_url("AGENTSITE_TEST_DATABASE_URL"), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [dropped])
    caplog.set_level(logging.INFO, logger="plans.bulk")

    kept.check()

    assert "the test: its database connection was lost while idle" in caplog.text
    assert backend_pid() != dropped  # a new session, and the query did not fail


def test_a_commit_whose_answer_was_lost_is_found_done_and_not_written_again(
    pg_database, this_process_on, settings, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(tmp_path / "gates"))
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    database = postgres_settings(pg_database)
    relay = CommitAnswerLost(database["HOST"], int(database["PORT"]), gates_dir() / "cut")
    try:
        # Statements as text, never prepared by name: the relay reads which table they touch.
        through_relay = {"HOST": "127.0.0.1", "PORT": str(relay.port)}
        options = {"OPTIONS": {"prepare_threshold": None}}
        with this_process_on({**database, **through_relay, **options}):
            call_command("migrate", verbosity=0)
            author = get_user_model().objects.create_user("pg-author")
            # Step 2 opens the gate: the next COMMIT is the recorder's, of step 2's end and
            # step 3's start, which the server takes and whose answer is lost.
            plan = {
                "steps": [
                    {"id": 1, "tool": "tally", "args": {"label": "first"}},
                    {"id": 2, "tool": "open_gate", "args": {"name": "cut"}, "depends_on": [1]},
                    {"id": 3, "tool": "tally", "args": {"label": "after"}, "depends_on": [2]},
                ]
            }
            run = run_create(author=author, goal_text="g", plan_data=plan)
            caplog.set_level(logging.WARNING, logger="plans.runtime.recorder")

            # On a thread of its own: its recorder is new, and connects through the relay.
            outcome: list[str] = []
            advancing = threading.Thread(target=lambda: outcome.append(advance_run(run.pk)))
            advancing.start()
            advancing.join(60)

            assert outcome == [Run.Status.COMPLETED]
            assert relay.cuts == 1
            assert "the commit in doubt had happened" in caplog.text
            assert calls_made() == ["first", "after"]
            events = RunEvent.objects.filter(run=run).order_by("seq")
            seqs = [event.seq for event in events]
            assert seqs == list(range(1, len(seqs) + 1))
            started = [e.payload["step"] for e in events if e.kind == "step_started"]
            finished = [e.payload["step"] for e in events if e.kind == "step_finished"]
            assert started == finished == [1, 2, 3]  # nothing written twice
    finally:
        relay.close()
