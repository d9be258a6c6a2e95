"""Worker threads: woken by enqueues, one task per run, parked runs hold nothing, and crash
recovery (a worker paused past its lease is replaced; done steps never run again)."""

import threading
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.engine import idempotency_key
from plans.journal.leases import leases_held
from plans.journal.wakeups import Waker
from plans.models import Approval, LedgerEntry, Run, RunEvent, Step, ToolCall
from plans.runtime import worker as worker_module
from plans.runtime.advance import advance_run
from plans.runtime.sweeper import sweep_once
from plans.runtime.worker import RunWorker, start_worker_threads
from plans.services.approvals import approval_decide
from plans.services.runs import run_create, run_start
from tests.integration.it_tools import gate_open
from tests.integration.support import seqs_of, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def queued_in_the_database(settings, tmp_path, monkeypatch):
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(tmp_path))


@pytest.fixture
def workers():
    """Start worker threads on demand; every one is stopped and joined afterwards."""
    started: list[RunWorker] = []

    def start(count=1, **options):
        new = start_worker_threads(count, prefix=f"test-{len(started)}", **options)
        started.extend(new)
        return new

    yield start
    stop(started)


def stop(workers):
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.thread.join(timeout=30)
        assert not worker.thread.is_alive()


def status_of(run):
    return Run.objects.get(pk=run.pk).status


def create(author, steps, goal="worker test"):
    return run_create(author=author, goal_text=goal, plan_data={"steps": steps})


def charge(account, gate="open", step_id=1, depends_on=()):
    args = {"account": account, "amount": 5, "gate": gate}
    return {"id": step_id, "tool": "charge", "args": args, "depends_on": list(depends_on)}


def test_a_wake_that_comes_while_the_worker_is_busy_is_not_lost():
    waker = Waker()
    seen = waker.generation
    waker.wake()  # while the worker was still looking for work

    sleeper = threading.Thread(target=waker.wait, args=(seen, 30))
    sleeper.start()
    sleeper.join(timeout=5)

    assert not sleeper.is_alive()


def test_an_idle_worker_sleeps_until_woken():
    waker = Waker()
    seen = waker.generation
    sleeper = threading.Thread(target=waker.wait, args=(seen, 30))
    sleeper.start()
    sleeper.join(timeout=0.2)
    assert sleeper.is_alive()

    waker.wake()
    sleeper.join(timeout=5)

    assert not sleeper.is_alive()


def test_a_started_run_is_advanced_by_a_worker_and_its_task_recorded(author, workers):
    workers(1)
    run = create(author, [{"id": 1, "tool": "echo", "args": {"text": "hi"}}])

    run_start(run)

    wait_until(lambda: status_of(run) == Run.Status.COMPLETED, what="the run to complete")
    task = wait_until(lambda: DBTaskResult.objects.filter(status="SUCCESSFUL").first())
    assert task.return_value == "completed"


def test_an_enqueue_wakes_an_idle_worker_without_waiting_for_its_poll(author, workers, monkeypatch):
    monkeypatch.setattr(worker_module, "IDLE_POLL_S", 600)
    (idle,) = workers(1)
    assert idle.interval == 600
    run = create(author, [{"id": 1, "tool": "echo", "args": {"text": "hi"}}])

    run_start(run)

    wait_until(lambda: status_of(run) == Run.Status.COMPLETED, timeout=20)


def test_a_parked_run_holds_no_lease_no_thread_and_no_running_task(author, workers):
    (only,) = workers(1)
    run = create(author, [charge("A")])

    run_start(run)

    wait_until(lambda: status_of(run) == Run.Status.AWAITING_APPROVAL)
    wait_until(lambda: only.current is None, what="the worker to be free")
    run.refresh_from_db()
    assert run.lease_token is None and run.lease_expires_at is None
    assert not DBTaskResult.objects.filter(status=TaskResultStatus.RUNNING).exists()
    assert run.pk not in {lease.run_id for lease in leases_held()}  # nothing renews its lease


def test_a_decision_hands_the_parked_run_back_to_a_worker(author, reviewer, workers, tmp_path):
    workers(2)
    gate_open("open")
    run = create(author, [charge("A")])
    run_start(run)
    wait_until(lambda: status_of(run) == Run.Status.AWAITING_APPROVAL)

    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    wait_until(lambda: status_of(run) == Run.Status.COMPLETED)
    assert LedgerEntry.objects.count() == 1


def test_stopping_every_worker_while_runs_wait_and_starting_again_loses_nothing(
    author, reviewer, workers
):
    gate_open("open")
    first = workers(2)
    runs = [create(author, [charge(f"acct-{i}")]) for i in range(3)]
    for run in runs:
        run_start(run)
    for run in runs:
        wait_until(lambda run=run: status_of(run) == Run.Status.AWAITING_APPROVAL)
    stop(first)

    for approval in Approval.objects.all():  # decided while no worker runs
        approval_decide(approval=approval, reviewer=reviewer, approve=True)
    assert all(status_of(run) == Run.Status.AWAITING_APPROVAL for run in runs)
    workers(2)

    for run in runs:
        wait_until(lambda run=run: status_of(run) == Run.Status.COMPLETED)
    assert sorted(LedgerEntry.objects.values_list("details__account", flat=True)) == [
        "acct-0",
        "acct-1",
        "acct-2",
    ]


class Paused:
    """A worker advancing a run on a thread of its own, then 'paused' past its lease."""

    def __init__(self, run):
        self.run = run
        self.outcome = None
        self.thread = threading.Thread(target=self._advance)
        self.thread.start()

    def _advance(self):
        self.outcome = advance_run(self.run.pk)

    @property
    def token(self):
        return Run.objects.get(pk=self.run.pk).lease_token

    def pause_past_its_lease(self):
        token = self.token
        Run.objects.filter(pk=self.run.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        return token


def step(run, step_id):
    return Step.objects.get(plan__run=run, step_id=step_id)


def test_a_recovered_run_never_reruns_a_done_step_and_reruns_the_one_in_flight(author, workers):
    run = create(
        author,
        [
            {"id": 1, "tool": "echo", "args": {"text": "done before the crash"}},
            {"id": 2, "tool": "hold", "args": {"label": "b", "gate": "g"}, "depends_on": [1]},
            {"id": 3, "tool": "echo", "args": {"text": "{{2}}"}, "depends_on": [2]},
        ],
    )
    stale = Paused(run)
    wait_until(lambda: step(run, 2).status == Step.Status.RUNNING)
    stale_token = stale.pause_past_its_lease()

    assert sweep_once() == [run.pk]
    workers(1)
    wait_until(lambda: step(run, 2).attempts == 2, what="the step to run again")
    gate_open("g")
    stale.thread.join(timeout=30)
    wait_until(lambda: status_of(run) == Run.Status.COMPLETED)

    assert stale.outcome == "lease_lost"
    assert ToolCall.objects.filter(step=step(run, 1)).count() == 1
    started = RunEvent.objects.filter(run=run, kind="step_started")
    assert [(e.payload["step"], e.payload["attempt"]) for e in started] == [
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 1),
    ]
    assert list(ToolCall.objects.filter(step=step(run, 2)).values_list("attempt", flat=True)) == [2]
    recovered = RunEvent.objects.get(run=run, kind="run_recovered")
    assert not RunEvent.objects.filter(
        run=run, lease_token=stale_token, seq__gt=recovered.seq
    ).exists()
    assert seqs_of(run.pk) == list(range(1, len(seqs_of(run.pk)) + 1))


def test_a_destructive_step_in_flight_at_the_crash_is_reinvoked_with_its_key_and_happens_once(
    author, reviewer, workers
):
    run = create(author, [charge("A", gate="g")])
    advance_run(run.pk)
    approval_decide(
        approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True, resume=False
    )
    stale = Paused(run)
    wait_until(lambda: LedgerEntry.objects.exists(), what="the charge to happen")
    stale.pause_past_its_lease()

    sweep_once()
    workers(1)
    wait_until(lambda: step(run, 1).attempts == 2, what="the charge to be invoked again")
    gate_open("g")
    stale.thread.join(timeout=30)
    wait_until(lambda: status_of(run) == Run.Status.COMPLETED)

    entry = LedgerEntry.objects.get()
    args = {"account": "A", "amount": 5, "gate": "g"}
    assert entry.idempotency_key == idempotency_key("charge", args, run_id=run.pk, step="")
    calls = ToolCall.objects.filter(step=step(run, 1))
    assert [(c.attempt, c.idempotency_key) for c in calls] == [(2, entry.idempotency_key)]
    assert step(run, 1).result == {"charged": 5, "entry": entry.pk}


def test_a_worker_that_finds_its_lease_gone_stops_without_waiting_for_its_calls(author, settings):
    settings.AGENTSITE_LEASE_SECONDS = 0.6
    run = create(author, [{"id": 1, "tool": "hold", "args": {"label": "slow", "gate": "g"}}])
    stale = Paused(run)
    wait_until(lambda: step(run, 1).status == Step.Status.RUNNING)

    stale.pause_past_its_lease()
    stale.thread.join(timeout=10)

    assert not stale.thread.is_alive()  # its call still waits on the gate
    assert stale.outcome == "lease_lost"
    gate_open("g")


def test_serving_processes_freeze_startup_objects_and_collect_young_ones_less_often():
    import gc

    threshold = gc.get_threshold()
    try:
        worker_module.gc_tune_for_serving()

        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == 50_000
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--threads", "0"], "--threads must be at least 1, got 0"),
        (["--grace", "-1"], "--grace must be 0 or more seconds, got -1"),
        (["--grace", "nan"], "--grace must be 0 or more seconds, got nan"),
    ],
)
def test_the_worker_command_refuses_bad_options_naming_them(args, refusal):
    with pytest.raises(CommandError, match=refusal):
        call_command("run_worker", *args)


def test_a_run_waiting_on_its_tools_gives_its_worker_slot_to_another_run(author, workers):
    (only,) = workers(1)  # one compute slot
    waiting = create(author, [{"id": 1, "tool": "hold", "args": {"label": "a", "gate": "slow"}}])
    quick = create(author, [{"id": 1, "tool": "echo", "args": {"text": "hi"}}])

    run_start(waiting)
    wait_until(lambda: Step.objects.filter(plan__run=waiting, status="running").exists())
    run_start(quick)

    wait_until(lambda: status_of(quick) == Run.Status.COMPLETED, what="the second run")
    assert status_of(waiting) == Run.Status.RUNNING
    assert len(only.group.live()) >= 2  # a spare thread claimed the second run
    gate_open("slow")
    wait_until(lambda: status_of(waiting) == Run.Status.COMPLETED, what="the first run")


def test_a_run_waiting_on_its_model_call_gives_its_worker_slot_to_another_run(
    author, workers, settings
):
    from plans.llm import offline

    settings.AGENTSITE_OFFLINE_LATENCY_MS = 0
    entered, release = threading.Event(), threading.Event()
    reply = offline.OfflineModel._reply

    def slow_for_the_first(self, request):
        if request.metadata.get("goal") == "slow answer":
            entered.set()
            assert release.wait(30)
        return reply(self, request)

    settings_patch = pytest.MonkeyPatch()
    settings_patch.setattr(offline.OfflineModel, "_reply", slow_for_the_first)
    try:
        workers(1)
        slow = create(author, [{"id": 1, "tool": "echo", "args": {"text": "a"}}], "slow answer")
        quick = create(author, [{"id": 1, "tool": "echo", "args": {"text": "b"}}])
        run_start(slow)
        assert entered.wait(30)
        run_start(quick)

        wait_until(lambda: status_of(quick) == Run.Status.COMPLETED, what="the second run")
        assert status_of(slow) == Run.Status.RUNNING
        release.set()
        wait_until(lambda: status_of(slow) == Run.Status.COMPLETED, what="the first run")
    finally:
        release.set()
        settings_patch.undo()


def test_spare_threads_leave_once_idle_and_the_kept_worker_stays(author, workers, monkeypatch):
    monkeypatch.setattr(worker_module, "SPARE_IDLE_EXIT_S", 0.05)
    monkeypatch.setattr(worker_module, "IDLE_POLL_S", 0.05)
    (only,) = workers(1)
    held = create(author, [{"id": 1, "tool": "hold", "args": {"label": "a", "gate": "idle"}}])
    quick = create(author, [{"id": 1, "tool": "echo", "args": {"text": "hi"}}])
    run_start(held)
    wait_until(lambda: Step.objects.filter(plan__run=held, status="running").exists())
    run_start(quick)
    wait_until(lambda: status_of(quick) == Run.Status.COMPLETED, what="the second run")
    gate_open("idle")
    wait_until(lambda: status_of(held) == Run.Status.COMPLETED, what="the first run")

    wait_until(lambda: len(only.group.live()) == 1, what="the spares to leave")
    assert only.thread.is_alive()
