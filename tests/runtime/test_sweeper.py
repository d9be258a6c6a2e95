"""The sweeper: which runs it queues again, which tasks it marks lost, and what it leaves."""

import logging
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from plans.journal.tasks import advance_run_task
from plans.models import Approval, Run
from plans.runtime.advance import advance_run
from plans.runtime.sweeper import sweep_delay, sweep_interval, sweep_once
from plans.services.approvals import approval_decide
from plans.services.runs import run_cancel, run_create

pytestmark = pytest.mark.django_db(transaction=True)

LONG_AGO = timedelta(hours=1)


@pytest.fixture(autouse=True)
def queued_in_the_database(settings, tmp_path, monkeypatch):
    """Tasks wait in the database (nobody runs them here) and tools come from it_tools."""
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    settings.AGENTSITE_LEASE_SECONDS = 15
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(tmp_path))
    (tmp_path / "open").touch()


def echo_run(author, **fields):
    plan = {"steps": [{"id": 1, "tool": "echo", "args": {"text": "hi"}}]}
    run = run_create(author=author, goal_text="sweep test", plan_data=plan)
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
    return run


def leased_run(author, *, expires_in: float):
    """A running echo run whose (unknown) worker's lease ends expires_in seconds from now."""
    return echo_run(
        author,
        status=Run.Status.RUNNING,
        lease_token=uuid.uuid4(),
        lease_expires_at=timezone.now() + timedelta(seconds=expires_in),
    )


def charge_run(author):
    plan = {
        "steps": [
            {"id": 1, "tool": "charge", "args": {"account": "A", "amount": 5, "gate": "open"}}
        ]
    }
    return run_create(author=author, goal_text="charge", plan_data=plan)


def parked(author):
    run = charge_run(author)
    assert advance_run(run.pk) == Run.Status.AWAITING_APPROVAL
    return run


def queued_run_ids():
    return [t.args_kwargs["args"][0] for t in DBTaskResult.objects.filter(status="READY")]


def claimed_task(run, *, started_ago=timedelta(0)):
    result = advance_run_task.enqueue(run.pk)
    task = DBTaskResult.objects.get(pk=result.id)
    task.claim("a-worker-that-died")
    DBTaskResult.objects.filter(pk=task.pk).update(started_at=timezone.now() - started_ago)
    return task


def a_lease_ago():
    """Make everything that happened so far older than the sweeper's grace period."""
    time.sleep(0.25)


def test_the_sweep_interval_is_a_third_of_the_lease(settings):
    settings.AGENTSITE_LEASE_SECONDS = 12

    assert sweep_interval() == 4


def test_a_run_whose_lease_expired_is_queued_again_once(author):
    run = leased_run(author, expires_in=-1)

    assert sweep_once() == [run.pk]
    assert sweep_once() == []
    assert queued_run_ids() == [run.pk]


def test_a_big_requeue_is_logged_as_a_count_and_the_first_ids(author, caplog):
    runs = [leased_run(author, expires_in=-1) for _ in range(23)]

    with caplog.at_level(logging.WARNING, logger="plans.runtime.sweeper"):
        assert sweep_once() == [run.pk for run in runs]

    first = ", ".join(str(run.pk) for run in runs[:20])
    assert f"sweeper re-queued 23 run(s): {first} and 3 more" in caplog.text


def test_a_run_whose_worker_renews_its_lease_is_left_alone(author):
    leased_run(author, expires_in=10)

    assert sweep_once() == []
    assert queued_run_ids() == []


def test_a_task_left_running_by_a_dead_worker_is_marked_failed_and_its_run_queued(author):
    run = leased_run(author, expires_in=-1)
    task = claimed_task(run, started_ago=LONG_AGO)

    assert sweep_once() == [run.pk]

    task.refresh_from_db()
    assert task.status == TaskResultStatus.FAILED
    assert task.exception_class_path == "plans.runtime.sweeper.WorkerLost"
    assert queued_run_ids() == [run.pk]


def test_a_task_left_running_after_its_run_parked_is_marked_failed_without_requeueing(author):
    run = parked(author)
    task = claimed_task(run, started_ago=LONG_AGO)

    assert sweep_once() == []

    task.refresh_from_db()
    assert task.status == TaskResultStatus.FAILED
    assert queued_run_ids() == []


def test_a_task_just_claimed_is_not_taken_for_lost_before_its_worker_takes_the_lease(author):
    run = echo_run(author, created_at=timezone.now() - LONG_AGO)
    task = claimed_task(run)

    assert sweep_once() == []

    task.refresh_from_db()
    assert task.status == TaskResultStatus.RUNNING


def test_a_run_nobody_ever_took_is_queued_a_lease_after_it_was_created(author):
    forgotten = echo_run(author, created_at=timezone.now() - LONG_AGO)
    echo_run(author)  # just created: its own enqueue is on its way

    assert sweep_once() == [forgotten.pk]


def test_a_run_with_a_queued_task_is_not_queued_twice(author):
    run = echo_run(author, created_at=timezone.now() - LONG_AGO)
    advance_run_task.enqueue(run.pk)

    assert sweep_once() == []
    assert queued_run_ids() == [run.pk]


def test_finished_runs_are_never_queued(author):
    echo_run(
        author,
        status=Run.Status.COMPLETED,
        created_at=timezone.now() - LONG_AGO,
        lease_token=uuid.uuid4(),
        lease_expires_at=timezone.now() - LONG_AGO,
    )

    assert sweep_once() == []


def test_a_parked_run_whose_decision_came_but_whose_continuation_was_lost_is_queued(
    author, reviewer, settings
):
    run = parked(author)
    settings.AGENTSITE_LEASE_SECONDS = 0.2
    # resume=False: as if the process died between the decision's commit and its enqueue.
    approval_decide(
        approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True, resume=False
    )
    a_lease_ago()

    assert sweep_once() == [run.pk]

    assert advance_run(run.pk) == Run.Status.COMPLETED


def test_a_decision_just_made_is_left_to_its_own_continuation(author, reviewer):
    run = parked(author)
    approval_decide(
        approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True, resume=False
    )

    assert sweep_once() == []


def test_a_parked_run_still_waiting_for_its_reviewer_holds_nothing_and_is_left_alone(
    author, settings
):
    run = parked(author)
    settings.AGENTSITE_LEASE_SECONDS = 0.2
    a_lease_ago()

    assert sweep_once() == []
    run.refresh_from_db()
    assert run.lease_token is None and run.lease_expires_at is None


def test_a_parked_run_whose_cancel_was_not_followed_up_is_queued_and_ends_cancelled(
    author, settings
):
    run = parked(author)
    run_cancel(run=run, user=author)
    DBTaskResult.objects.filter(status="READY").delete()  # its continuation was lost
    settings.AGENTSITE_LEASE_SECONDS = 0.2
    a_lease_ago()

    assert sweep_once() == [run.pk]

    assert advance_run(run.pk) == Run.Status.CANCELLED


def test_two_sweepers_at_once_queue_a_run_once(author):
    run = leased_run(author, expires_in=-1)
    results = []
    start = threading.Barrier(4)

    def sweep():
        start.wait()
        results.append(sweep_once())

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [[], [], [], [run.pk]]
    assert queued_run_ids() == [run.pk]


def test_the_sweeper_wakes_when_the_next_lease_falls_due(author):
    leased_run(author, expires_in=1)

    assert sweep_delay() < 1.5 < sweep_interval()


def test_with_no_lease_falling_due_the_sweeper_sleeps_its_interval():
    assert sweep_delay() == sweep_interval()


def test_an_approval_pending_past_its_time_limit_expires_and_its_run_is_queued(author, settings):
    run = parked(author)
    settings.AGENTSITE_APPROVAL_TTL_S = 60
    Approval.objects.filter(run=run).update(requested_at=timezone.now() - LONG_AGO)

    sweep_once()

    assert Approval.objects.get(run=run).decision == "expired"
    assert queued_run_ids().count(run.pk) == 1
