"""Cancelling a run (service and CLI): nothing new starts, what is in flight finishes."""

import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from plans.models import Approval, LedgerEntry, Run, RunEvent, Step, ToolCall
from plans.runtime import inflight
from plans.runtime.advance import RunAdvancer, advance_run
from plans.services.approvals import ApprovalRefused, approval_decide
from plans.services.runs import run_cancel, run_create
from tests.integration.it_tools import gate_open
from tests.integration.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def gated_tools(settings, tmp_path, monkeypatch):
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(tmp_path))
    gate_open("open")


def create(author, steps):
    return run_create(author=author, goal_text="cancel test", plan_data={"steps": steps})


def charge_step(step_id, depends_on=()):
    args = {"account": f"acct-{step_id}", "amount": 5, "gate": "open"}
    return {"id": step_id, "tool": "charge", "args": args, "depends_on": list(depends_on)}


def steps_of(run):
    return {s.step_id: s for s in Step.objects.filter(plan__run=run)}


def advancing(run):
    thread = threading.Thread(target=advance_run, args=(run.pk,))
    thread.start()
    return thread


def cancelled_while_step_1_runs(run, author):
    """Advance the run, cancel it while its step 1 (held at gate "g") runs, then let it end."""
    worker = advancing(run)
    wait_until(lambda: steps_of(run)[1].status == Step.Status.RUNNING)
    run_cancel(run=run, user=author)
    gate_open("g")
    worker.join(timeout=30)
    run.refresh_from_db()


def test_no_step_starts_after_the_cancel_is_recorded_and_the_one_in_flight_finishes(author):
    run = create(
        author,
        [
            {"id": 1, "tool": "hold", "args": {"label": "in flight", "gate": "g"}},
            {"id": 2, "tool": "echo", "args": {"text": "{{1}}"}, "depends_on": [1]},
            {"id": 3, "tool": "echo", "args": {"text": "{{2}}"}, "depends_on": [2]},
        ],
    )
    cancelled_while_step_1_runs(run, author)

    steps = steps_of(run)
    assert run.status == Run.Status.CANCELLED
    assert steps[1].status == Step.Status.SUCCEEDED and steps[1].result == "in flight"
    assert ToolCall.objects.filter(step=steps[1]).count() == 1
    assert [steps[2].status, steps[3].status] == [Step.Status.SKIPPED, Step.Status.SKIPPED]
    cancel = RunEvent.objects.get(run=run, kind="cancel_requested")
    started = RunEvent.objects.filter(run=run, kind="step_started")
    assert [e.payload["step"] for e in started] == [1]
    assert all(e.seq < cancel.seq for e in started)
    # Every round ends on the record, the ones whose steps were all skipped too.
    finished = RunEvent.objects.filter(run=run, kind="round_finished").order_by("seq")
    assert [e.payload["round"] for e in finished] == [1, 2, 3]
    assert RunEvent.objects.filter(run=run).last().payload == {"status": "cancelled"}


def test_a_run_cancelled_while_it_waits_for_a_reviewer_ends_without_the_side_effect(author):
    run = create(author, [charge_step(1)])
    assert advance_run(run.pk) == Run.Status.AWAITING_APPROVAL

    run = run_cancel(run=run, user=author)  # tasks run inline: its continuation ends it

    assert run.status == Run.Status.CANCELLED
    assert steps_of(run)[1].status == Step.Status.SKIPPED
    assert not LedgerEntry.objects.exists()


def test_a_cancel_that_comes_as_the_run_is_about_to_park_ends_it_instead(author, reviewer):
    run = create(
        author,
        [
            {"id": 1, "tool": "hold", "args": {"label": "in flight", "gate": "g"}},
            charge_step(2),
        ],
    )
    worker = advancing(run)
    wait_until(lambda: steps_of(run)[2].status == Step.Status.AWAITING_APPROVAL)
    wait_until(lambda: steps_of(run)[1].status == Step.Status.RUNNING)

    run_cancel(run=run, user=author)  # the run holds its lease: nothing is queued
    with pytest.raises(ApprovalRefused, match="The run is being cancelled; nothing to decide"):
        approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)
    gate_open("g")
    worker.join(timeout=30)

    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert steps_of(run)[1].status == Step.Status.SUCCEEDED
    assert steps_of(run)[2].status == Step.Status.SKIPPED
    assert Approval.objects.get(run=run).decision == Approval.Decision.PENDING
    assert not RunEvent.objects.filter(run=run, kind="run_parked").exists()


def test_a_run_waiting_for_its_plan_to_be_approved_can_be_cancelled(author, settings):
    settings.AGENTSITE_REQUIRE_PLAN_APPROVAL = True
    run = create(author, [{"id": 1, "tool": "echo", "args": {"text": "never"}}])
    assert advance_run(run.pk) == Run.Status.AWAITING_PLAN_APPROVAL

    run = run_cancel(run=run, user=author)

    assert run.status == Run.Status.CANCELLED
    assert steps_of(run)[1].status == Step.Status.SKIPPED
    assert not ToolCall.objects.exists()


def test_a_cancel_that_comes_as_the_run_parks_for_plan_approval_ends_it_instead(
    author, settings, monkeypatch
):
    settings.AGENTSITE_REQUIRE_PLAN_APPROVAL = True
    run = create(author, [{"id": 1, "tool": "echo", "args": {"text": "never"}}])
    park = RunAdvancer._park_for_plan_approval

    def cancelled_just_before_parking(advancer, plan_row):
        # Committed after the run was loaded, so only the parking transaction can see it.
        Run.objects.filter(pk=run.pk).update(cancel_requested=True)
        return park(advancer, plan_row)

    monkeypatch.setattr(RunAdvancer, "_park_for_plan_approval", cancelled_just_before_parking)

    assert advance_run(run.pk) == Run.Status.CANCELLED
    assert steps_of(run)[1].status == Step.Status.SKIPPED


def test_the_command_cancels_a_run_and_says_so(author):
    run = create(author, [charge_step(1)])
    advance_run(run.pk)
    out = StringIO()

    call_command("cancel_run", str(run.pk), "--wait", "10", stdout=out)

    assert f"run {run.pk}: cancel requested" in out.getvalue()
    assert f"run {run.pk} ended: cancelled" in out.getvalue()
    cancel = RunEvent.objects.get(run=run, kind="cancel_requested")
    assert cancel.payload == {"by": "cli"}


def test_the_command_records_who_cancelled(author):
    run = create(author, [charge_step(1)])
    advance_run(run.pk)

    call_command("cancel_run", str(run.pk), "--by", author.username, stdout=StringIO())

    cancel = RunEvent.objects.get(run=run, kind="cancel_requested")
    assert cancel.payload == {"by": author.username}


def test_the_command_leaves_a_finished_run_as_it_ended(author):
    run = create(author, [{"id": 1, "tool": "echo", "args": {"text": "done"}}])
    advance_run(run.pk)
    out = StringIO()

    call_command("cancel_run", str(run.pk), stdout=out)

    assert out.getvalue().strip() == f"run {run.pk} already ended: completed"
    assert not RunEvent.objects.filter(run=run, kind="cancel_requested").exists()


def test_the_command_names_a_run_that_does_not_exist():
    with pytest.raises(CommandError, match="There is no run 424242"):
        call_command("cancel_run", "424242")


def test_the_command_names_a_user_that_does_not_exist(author):
    run = create(author, [charge_step(1)])

    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        call_command("cancel_run", str(run.pk), "--by", "nobody")


def test_a_cancel_while_the_last_step_runs_ends_the_run_cancelled_without_an_answer(author):
    run = create(author, [{"id": 1, "tool": "hold", "args": {"label": "last", "gate": "g"}}])
    cancelled_while_step_1_runs(run, author)

    assert run.status == Run.Status.CANCELLED
    assert steps_of(run)[1].status == Step.Status.SUCCEEDED
    assert run.model_call_count == 0 and run.answer == ""


def test_a_retry_waiting_when_the_cancel_is_recorded_never_starts(author, settings, monkeypatch):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    # Jitter could make the retry due at once; a fixed wait leaves room to record the cancel,
    # and one far longer than the test waits shows the cancel does not wait it out.
    monkeypatch.setattr(inflight, "backoff_delay", lambda attempt, **_: 600.0)
    flaky_args = {"label": f"retry-after-cancel-{author.pk}", "failures": 1}
    run = create(author, [{"id": 1, "tool": "flaky", "args": flaky_args}])
    worker = advancing(run)
    wait_until(lambda: RunEvent.objects.filter(run=run, kind="step_retrying").exists())

    run_cancel(run=run, user=author)
    worker.join(timeout=30)

    assert not worker.is_alive(), "the cancel waited for the retry's backoff"
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    step = steps_of(run)[1]
    assert step.status == Step.Status.FAILED and step.attempts == 1
    assert "cancelled before the retry" in step.error
    cancel = RunEvent.objects.get(run=run, kind="cancel_requested")
    assert not RunEvent.objects.filter(run=run, kind="step_started", seq__gt=cancel.seq).exists()


def test_a_cancel_gives_up_a_waiting_retry_while_a_slow_call_runs_on_and_is_recorded(
    author, settings, monkeypatch
):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    monkeypatch.setattr(inflight, "backoff_delay", lambda attempt, **_: 600.0)
    flaky_args = {"label": f"retry-beside-slow-{author.pk}", "failures": 1}
    run = create(
        author,
        [
            {"id": 1, "tool": "flaky", "args": flaky_args},
            {"id": 2, "tool": "sleepy", "args": {"seconds": 8, "label": "slow"}},
        ],
    )
    worker = advancing(run)
    wait_until(lambda: RunEvent.objects.filter(run=run, kind="step_retrying").exists())

    run_cancel(run=run, user=author)
    # The retry is given up while the slow call still runs, not when its backoff ends.
    wait_until(lambda: "cancelled before the retry" in steps_of(run)[1].error, timeout=30)
    assert steps_of(run)[2].status == Step.Status.RUNNING
    worker.join(timeout=30)

    assert not worker.is_alive()
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert steps_of(run)[2].status == Step.Status.SUCCEEDED
    assert steps_of(run)[1].attempts == 1
