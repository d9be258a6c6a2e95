"""The run recorder: batched, lease-fenced writes on a writer thread reused from run to run."""

import threading
import time

import pytest
from django.db import OperationalError, transaction
from django.utils import timezone

from plans.journal.events import LeaseLost
from plans.journal.leases import lease_acquire, lease_release
from plans.models import Run, RunEvent, Step, ToolCall
from plans.runtime import recorder as recorder_module
from plans.runtime.advance import advance_run
from plans.runtime.recorder import Batch, RunRecorder, _merged
from plans.services.runs import run_create
from tests.integration.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = {"steps": [{"id": 1, "tool": "echo", "args": {"text": "hi"}}]}


@pytest.fixture(autouse=True)
def it_tools(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]


def recorder_threads() -> list[threading.Thread]:
    name = f"recorder-{threading.current_thread().name}"
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_runs_advanced_one_after_another_on_a_thread_share_its_writer(author):
    runs = [run_create(author=author, goal_text=f"run {i}", plan_data=PLAN) for i in range(3)]

    statuses = [advance_run(run.pk) for run in runs]

    assert statuses == ["completed"] * 3
    assert len(recorder_threads()) == 1
    for run in runs:
        seqs = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
        assert seqs == list(range(1, Run.objects.get(pk=run.pk).last_seq + 1))


def test_a_run_whose_lease_was_lost_leaves_the_writer_clean_for_the_next(author):
    lost_run, next_run = (run_create(author=author, goal_text=g) for g in ("lost", "next"))
    stale = lease_acquire(lost_run.pk)
    lease_release(stale)
    lease_acquire(lost_run.pk)  # someone else holds it now
    recorder = RunRecorder(stale)
    recorder.event("run_status", status="running")
    with pytest.raises(LeaseLost):
        recorder.flush(wait=True)
    recorder.close()

    lease = lease_acquire(next_run.pk)
    recorder = RunRecorder(lease)
    recorder.event("run_status", status="running")
    recorder.flush(wait=True)
    recorder.close()

    kinds = list(RunEvent.objects.filter(run=next_run).values_list("kind", flat=True))
    assert kinds == ["run_created", "run_status"]
    assert not RunEvent.objects.filter(run=lost_run, kind="run_status").exists()


def test_a_recorder_opened_while_the_threads_writer_is_busy_gets_its_own(author):
    first, second = (run_create(author=author, goal_text=g) for g in ("first", "second"))
    one = RunRecorder(lease_acquire(first.pk))
    two = RunRecorder(lease_acquire(second.pk))
    one.event("run_status", status="one")
    two.event("run_status", status="two")

    one.flush(wait=True)
    two.flush(wait=True)
    one.close()
    two.close()

    assert one._writer is not two._writer
    assert RunEvent.objects.get(run=first, kind="run_status").payload == {"status": "one"}
    assert RunEvent.objects.get(run=second, kind="run_status").payload == {"status": "two"}


def test_batches_that_queued_up_are_merged_in_order_with_later_values_winning():
    first = Batch(
        events=[("step_started", {"step": 1})],
        steps=[{"id": 7, "status": "running", "attempts": 1}],
        run_fields={"status": "running", "round_count": 1},
    )
    second = Batch(
        events=[("step_finished", {"step": 1})],
        steps=[{"id": 7, "status": "succeeded", "result": 3}, {"id": 8, "status": "running"}],
        run_fields={"round_count": 2},
    )

    merged = _merged([first, second])

    assert merged.events == [("step_started", {"step": 1}), ("step_finished", {"step": 1})]
    assert merged.steps == [
        {"id": 7, "status": "succeeded", "attempts": 1, "result": 3},
        {"id": 8, "status": "running"},
    ]
    assert merged.run_fields == {"status": "running", "round_count": 2}


def test_a_batch_writes_only_the_fields_each_step_changed(author):
    run = run_create(author=author, goal_text="fields", plan_data=PLAN)
    step = Step.objects.get(plan__run=run)
    Step.objects.filter(pk=step.pk).update(error="written elsewhere")
    recorder = RunRecorder(lease_acquire(run.pk))

    step.status, step.attempts, step.error = Step.Status.RUNNING, 1, "stale in memory"
    recorder.step_changed(step, "status", "attempts")
    recorder.flush(wait=True)
    recorder.close()

    stored = Step.objects.get(pk=step.pk)
    assert (stored.status, stored.attempts) == (Step.Status.RUNNING, 1)
    assert stored.error == "written elsewhere"


def test_tool_call_values_are_stored_as_json_with_none_kept_as_null(author):
    run = run_create(author=author, goal_text="json", plan_data=PLAN)
    step = Step.objects.get(plan__run=run)
    recorder = RunRecorder(lease_acquire(run.pk))
    common = {"run_id": run.pk, "step_id": step.pk, "tool": "echo", "idempotency_key": "k"}
    common.update(started_at=timezone.now(), duration_ms=1.0)
    recorder.tool_call(**common, attempt=1, args={"text": "é <b>"}, result=[1, 2.5], error="")
    recorder.tool_call(**common, attempt=2, args={}, result=None, error="timed out")
    recorder.flush(wait=True)
    recorder.close()

    first, second = ToolCall.objects.filter(step=step).order_by("attempt")
    assert (first.args, first.result) == ({"text": "é <b>"}, [1, 2.5])
    assert (second.args, second.result, second.error) == ({}, None, "timed out")
    assert ToolCall.objects.filter(step=step, result__isnull=True).get() == second


def test_a_young_batch_waits_for_the_next_one_and_they_commit_together(author, monkeypatch):
    commits = []
    real_append = recorder_module.append_events
    monkeypatch.setattr(
        recorder_module,
        "append_events",
        lambda run_id, entries, **kw: (
            commits.append(list(entries)) or real_append(run_id, entries, **kw)
        ),
    )
    monkeypatch.setattr(recorder_module, "FLUSH_DELAY_S", 0.5)
    run = run_create(author=author, goal_text="group commit")
    recorder = RunRecorder(lease_acquire(run.pk))

    recorder.event("run_status", status="steps done")
    recorder.flush()  # young: the writer holds it for the next batch
    time.sleep(0.1)  # long enough to commit it, were it not held
    recorder.event("run_finished", status="completed")
    recorder.flush(wait=True)
    recorder.close()

    assert [[kind for kind, _ in entries] for entries in commits] == [
        ["run_status", "run_finished"]
    ]


def test_a_batch_nobody_waits_for_is_committed_once_it_is_old_enough(author, monkeypatch):
    monkeypatch.setattr(recorder_module, "FLUSH_DELAY_S", 0.05)
    run = run_create(author=author, goal_text="group commit")
    recorder = RunRecorder(lease_acquire(run.pk))

    recorder.event("run_status", status="alone")
    recorder.flush()

    wait_until(lambda: RunEvent.objects.filter(run=run, kind="run_status").exists(), timeout=5)
    recorder.close()


def test_a_call_waiting_for_its_start_is_told_at_commit_before_the_events_are_announced(
    author, monkeypatch
):
    from plans.journal import events

    run = run_create(author=author, goal_text="durable first", plan_data=PLAN)
    recorder = RunRecorder(lease_acquire(run.pk))
    durables: list[recorder_module.Durable] = []
    known_when_announced: list[bool] = []
    # The listeners (the notifier) are told after the websocket groups: the last to hear.
    monkeypatch.setattr(
        events,
        "_listeners",
        [lambda run_id, published: known_when_announced.append(durables[0]._known.is_set())],
    )
    recorder.event("run_status", status="running")
    durables.append(recorder.flush_durable())

    assert durables[0].wait() is True
    recorder.close()
    assert known_when_announced == [True]


def commits_by_thread(monkeypatch) -> list[tuple[str, list[str]]]:
    """Every commit attempt the recorder makes, as (thread name, event kinds), in order."""
    commits: list[tuple[str, list[str]]] = []
    real_append = recorder_module.append_events

    def append_events(run_id, entries, **kw):
        commits.append((threading.current_thread().name, [kind for kind, _ in entries]))
        return real_append(run_id, entries, **kw)

    monkeypatch.setattr(recorder_module, "append_events", append_events)
    return commits


def test_before_calls_an_idle_writers_batch_is_committed_at_once_on_the_calling_thread(
    author, monkeypatch
):
    commits = commits_by_thread(monkeypatch)
    run = run_create(author=author, goal_text="inline", plan_data=PLAN)
    recorder = RunRecorder(lease_acquire(run.pk))
    recorder.event("run_status", status="running")

    assert recorder.flush_before_calls() is None  # committed: nothing for a call to wait on

    assert RunEvent.objects.filter(run=run, kind="run_status").exists()
    assert commits == [(threading.current_thread().name, ["run_status"])]
    recorder.close()


def test_before_calls_a_batch_goes_behind_one_still_queued_so_the_order_is_kept(
    author, monkeypatch
):
    commits = commits_by_thread(monkeypatch)
    monkeypatch.setattr(recorder_module, "FLUSH_DELAY_S", 0.5)
    run = run_create(author=author, goal_text="queued", plan_data=PLAN)
    recorder = RunRecorder(lease_acquire(run.pk))
    recorder.event("run_status", status="first")
    recorder.flush()  # young: the writer holds it for the next batch
    recorder.event("run_status", status="second")

    durable = recorder.flush_before_calls()

    assert durable is not None and durable.wait() is True
    recorder.close()
    statuses = RunEvent.objects.filter(run=run, kind="run_status").order_by("seq")
    assert [event.payload["status"] for event in statuses] == ["first", "second"]
    assert [thread for thread, _ in commits] == [recorder_threads()[0].name]


def test_before_calls_inside_the_callers_own_transaction_the_batch_goes_to_the_writer(author):
    run = run_create(author=author, goal_text="atomic", plan_data=PLAN)
    recorder = RunRecorder(lease_acquire(run.pk))
    recorder.event("run_status", status="running")

    with transaction.atomic():
        # A commit here would only be a savepoint, undone if the caller's block failed.
        durable = recorder.flush_before_calls()
    assert durable is not None and durable.wait() is True
    recorder.close()

    assert RunEvent.objects.filter(run=run, kind="run_status").exists()


def test_a_lease_lost_at_a_commit_before_calls_is_raised_and_nothing_after_it_is_written(
    author,
):
    run = run_create(author=author, goal_text="lost")
    stale = lease_acquire(run.pk)
    lease_release(stale)
    lease_acquire(run.pk)  # someone else holds it now
    recorder = RunRecorder(stale)
    recorder.event("run_status", status="before the calls")

    with pytest.raises(LeaseLost):
        recorder.flush_before_calls()
    recorder.event("run_status", status="after")
    with pytest.raises(LeaseLost):
        recorder.flush_before_calls()
    with pytest.raises(LeaseLost):
        recorder.flush(wait=True)
    recorder.close()

    assert not RunEvent.objects.filter(run=run, kind="run_status").exists()


def test_a_database_error_at_a_commit_before_calls_stops_every_later_batch(author, monkeypatch):
    run = run_create(author=author, goal_text="refused")
    recorder = RunRecorder(lease_acquire(run.pk))
    real_append = recorder_module.append_events

    def refused_once(run_id, entries, **kw):
        monkeypatch.setattr(recorder_module, "append_events", real_append)
        raise OperationalError("database is locked")  # the server answered: not retried

    monkeypatch.setattr(recorder_module, "append_events", refused_once)
    recorder.event("run_status", status="before the calls")

    with pytest.raises(OperationalError):
        recorder.flush_before_calls()
    recorder.event("run_status", status="after")
    with pytest.raises(OperationalError):
        recorder.flush(wait=True)
    recorder.close()

    # The run's log stays a prefix: nothing is written after the batch that failed.
    assert not RunEvent.objects.filter(run=run, kind="run_status").exists()


def test_a_flush_that_waits_is_committed_on_the_calling_thread_when_the_writer_is_idle(
    author, monkeypatch
):
    commits = commits_by_thread(monkeypatch)
    run = run_create(author=author, goal_text="waits", plan_data=PLAN)
    recorder = RunRecorder(lease_acquire(run.pk))
    recorder.event("run_status", status="running")

    recorder.flush(wait=True)

    assert commits == [(threading.current_thread().name, ["run_status"])]
    assert RunEvent.objects.filter(run=run, kind="run_status").exists()
    recorder.close()
