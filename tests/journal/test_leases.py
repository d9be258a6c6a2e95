"""Run leases: one worker at a time, renewed by heartbeat, and fencing every write."""

import logging
import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from plans.journal import leases
from plans.journal.events import LeaseLost, append_events
from plans.journal.leases import (
    Heartbeat,
    lease_acquire,
    lease_release,
    lease_renew,
    leases_hand_over,
)
from plans.models import Run, RunEvent, Step
from plans.runtime.recorder import RunRecorder
from plans.services.runs import run_create
from tests.integration.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# Long enough that a loaded machine's pauses do not let a kept lease lapse between a renewal
# and the check after it; the tests wait for renewals, never for a set time.
LEASE_S = 1.2


@pytest.fixture(autouse=True)
def it_tools(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]


@pytest.fixture
def run(author):
    plan = {"steps": [{"id": 1, "tool": "echo", "args": {"text": "hi"}}]}
    return run_create(author=author, goal_text="lease test", plan_data=plan)


def expire(run):
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def expiry_of(run):
    return Run.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)


def renewed_past(run, first_expiry):
    """Whether the lease outlived its first length and still holds: it was renewed meanwhile."""
    now, expiry = timezone.now(), expiry_of(run)
    return now > first_expiry and expiry is not None and expiry > now


def test_a_run_is_leased_to_one_worker_at_a_time(run):
    first = lease_acquire(run.pk)

    assert first is not None
    assert lease_acquire(run.pk) is None
    assert Run.objects.get(pk=run.pk).lease_token == first.token


def test_an_expired_lease_is_taken_by_the_next_worker(run):
    first = lease_acquire(run.pk)
    expire(run)

    second = lease_acquire(run.pk)

    assert second is not None and second.token != first.token


def test_a_released_lease_is_free_again(run):
    lease_release(lease_acquire(run.pk))

    assert lease_acquire(run.pk) is not None


def test_a_finished_run_is_never_leased(run):
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)

    assert lease_acquire(run.pk) is None


def test_renewing_extends_an_unexpired_lease(run):
    lease = lease_acquire(run.pk, seconds=5)
    before = Run.objects.get(pk=run.pk).lease_expires_at
    wait_until(lambda: timezone.now() > before - timedelta(seconds=5), what="the clock to move")

    assert lease_renew(lease)
    assert Run.objects.get(pk=run.pk).lease_expires_at > before
    assert not lease.lost.is_set()


def test_a_lease_that_expired_is_lost_even_if_nobody_took_it(run):
    lease = lease_acquire(run.pk)
    expire(run)

    assert not lease_renew(lease)
    assert lease.lost.is_set()


def test_a_lease_taken_over_cannot_be_renewed(run):
    lease = lease_acquire(run.pk)
    expire(run)
    lease_acquire(run.pk)

    assert not lease_renew(lease)


def test_a_worker_that_lost_its_lease_cannot_write_and_nothing_is_stored(run):
    lease = lease_acquire(run.pk)
    recorder = RunRecorder(lease)
    step = Step.objects.get(plan__run=run, step_id=1)
    expire(run)
    lease_acquire(run.pk)  # another worker carries on
    events_before = RunEvent.objects.filter(run=run).count()
    last_seq = Run.objects.get(pk=run.pk).last_seq

    step.status = Step.Status.SUCCEEDED
    step.result = "from the stale worker"
    recorder.step_changed(step, "status", "result")
    recorder.event("step_finished", step=1, tool="echo", status="succeeded")
    with pytest.raises(LeaseLost):
        recorder.flush(wait=True)
    recorder.close()

    assert RunEvent.objects.filter(run=run).count() == events_before
    assert Run.objects.get(pk=run.pk).last_seq == last_seq
    assert Step.objects.get(pk=step.pk).status == Step.Status.PENDING


def test_a_worker_paused_past_its_lease_cannot_write_even_if_nobody_took_it(run):
    lease = lease_acquire(run.pk)
    expire(run)

    with pytest.raises(LeaseLost):
        append_events(run.pk, [("run_status", {"status": "running"})], lease_token=lease.token)

    assert not RunEvent.objects.filter(run=run, kind="run_status").exists()


def test_events_carry_the_lease_they_were_written_under(run):
    lease = lease_acquire(run.pk)

    append_events(run.pk, [("run_status", {"status": "running"})], lease_token=lease.token)

    assert RunEvent.objects.get(run=run, kind="run_status").lease_token == lease.token
    assert RunEvent.objects.get(run=run, kind="run_created").lease_token is None


def test_taking_a_lease_names_its_holder_in_the_log(run, caplog):
    with caplog.at_level(logging.DEBUG, logger="plans.journal.leases"):
        lease = lease_acquire(run.pk)

    assert f"run {run.pk}: lease {lease.token} taken by " in caplog.text


def test_a_heartbeat_keeps_the_lease_past_its_length(run):
    lease = lease_acquire(run.pk, seconds=LEASE_S)
    first_expiry = expiry_of(run)

    with Heartbeat(lease):
        wait_until(lambda: renewed_past(run, first_expiry), timeout=30, what="a renewal")
        taken_by_another = lease_acquire(run.pk)

    assert taken_by_another is None
    assert not lease.lost.is_set()


def test_handing_over_lets_another_worker_take_the_run_at_once(run):
    lease = lease_acquire(run.pk, seconds=60)

    with Heartbeat(lease):
        assert leases_hand_over() == [run.pk]
        second = lease_acquire(run.pk)

    assert second is not None
    assert lease.lost.is_set()
    with pytest.raises(LeaseLost):
        append_events(run.pk, [("run_status", {"status": "x"})], lease_token=lease.token)


def test_one_keeper_thread_renews_every_lease_the_process_holds(author):
    plan = {"steps": [{"id": 1, "tool": "echo", "args": {"text": "hi"}}]}
    runs = [run_create(author=author, goal_text=f"keeper {i}", plan_data=plan) for i in range(3)]
    leases = [lease_acquire(run.pk, seconds=LEASE_S) for run in runs]
    first_expiries = [expiry_of(run) for run in runs]
    threads_before = {thread.name for thread in threading.enumerate()}

    with Heartbeat(leases[0]), Heartbeat(leases[1]), Heartbeat(leases[2]):
        wait_until(
            lambda: all(map(renewed_past, runs, first_expiries)), timeout=30, what="renewals"
        )
        taken = [lease_acquire(run.pk) for run in runs]
        keepers = [t for t in threading.enumerate() if t.name == "lease-keeper"]

    assert taken == [None, None, None]
    assert len(keepers) == 1
    assert not any(lease.lost.is_set() for lease in leases)
    assert {t.name for t in threading.enumerate()} - threads_before <= {"lease-keeper"}


def test_a_lease_let_go_is_no_longer_renewed(run):
    lease = lease_acquire(run.pk, seconds=0.3)
    first_expiry = expiry_of(run)

    with Heartbeat(lease):
        pass
    wait_until(lambda: timezone.now() > first_expiry, what="the lease's end")

    assert expiry_of(run) == first_expiry  # nobody renewed it
    assert lease_acquire(run.pk) is not None


def test_a_renewal_that_finds_the_lease_let_go_by_its_own_run_says_nothing(run, caplog):
    lease = lease_acquire(run.pk)
    # The run's final commit cleared the lease; its advancer has not marked it released yet.
    Run.objects.filter(pk=run.pk).update(lease_token=None, lease_expires_at=None)

    with caplog.at_level(logging.WARNING, logger="plans.journal.leases"):
        assert lease_renew(lease) is False

    assert lease.lost.is_set()
    assert caplog.text == ""


def test_a_renewal_that_finds_the_lease_taken_over_warns(run, caplog):
    lease = lease_acquire(run.pk)
    expire(run)
    lease_acquire(run.pk)

    with caplog.at_level(logging.WARNING, logger="plans.journal.leases"):
        assert lease_renew(lease) is False

    assert f"run {run.pk}: lease {lease.token} expired or was taken over" in caplog.text


def test_the_keeper_survives_a_renewal_that_fails_and_renews_at_the_next_turn(
    run, monkeypatch, caplog
):
    lease = lease_acquire(run.pk, seconds=LEASE_S)
    first_expiry = expiry_of(run)
    failed = []

    def locked_once(lease):
        if not failed:
            failed.append(lease)
            raise OperationalError("database is locked")
        return lease_renew(lease)

    monkeypatch.setattr(leases, "lease_renew", locked_once)
    with caplog.at_level(logging.WARNING, logger="plans.journal.leases"), Heartbeat(lease):
        wait_until(lambda: failed and renewed_past(run, first_expiry), timeout=30, what="a renewal")
        taken_by_another = lease_acquire(run.pk)

    assert failed == [lease]
    assert taken_by_another is None
    assert not lease.lost.is_set()
    assert f"run {run.pk}: lease {lease.token} not renewed, trying again in 0.4s: " in caplog.text
    assert "database is locked" in caplog.text


def test_a_lease_knows_its_own_deadline_from_its_take_and_each_renewal(run):
    lease = lease_acquire(run.pk, seconds=30)
    assert not lease.past_deadline()

    lease.valid_until = time.monotonic() - 1  # as if the worker had been paused past it
    assert lease.past_deadline()
    assert lease_renew(lease)
    assert not lease.past_deadline()


def test_a_worker_paused_past_its_lease_starts_no_call_before_its_keeper_notices(
    author, monkeypatch
):
    from plans.runtime import advance as advance_module
    from tests import bank_tools

    monkeypatch.setattr(leases, "lease_renew", lambda lease: True)  # the keeper has not run yet
    taken = []

    def keep(run_id, **kwargs):
        lease = lease_acquire(run_id, **kwargs)
        taken.append(lease)
        return lease

    monkeypatch.setattr(advance_module, "lease_acquire", keep)

    moved_on = {"seconds": 0.0}

    class WokenClock:
        """The clock a paused worker wakes to: moved on past its lease, for every thread.

        (Setting lease.valid_until instead races with a commit begun before the "pause",
        which extends it from its own start when it ends.)
        """

        @staticmethod
        def monotonic() -> float:
            return time.monotonic() + moved_on["seconds"]

    monkeypatch.setattr(leases, "time", WokenClock)

    def pause_past_the_lease():
        # Step 1's call returns after the worker "slept" past its lease: the monotonic clock
        # moved on, and the lease in the database expired meanwhile.
        moved_on["seconds"] = taken[0].seconds + 60
        expire(Run.objects.get(pk=taken[0].run_id))

    monkeypatch.setattr(bank_tools, "on_nap", pause_past_the_lease, raising=False)
    bank_tools.reset()
    from django.conf import settings

    settings.AGENTSITE_TOOL_MODULES = ["tests.bank_tools"]
    plan = {
        "steps": [
            {"id": 1, "tool": "nap", "args": {"seconds": 0}},
            {"id": 2, "tool": "double", "args": {"number": 2}, "depends_on": [1]},
        ]
    }
    run = run_create(author=author, goal_text="paused", plan_data=plan)

    assert advance_module.advance_run(run.pk) == "lease_lost"
    assert "double" not in bank_tools.calls  # step 2 never started
