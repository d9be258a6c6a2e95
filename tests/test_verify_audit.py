"""manage.py verify_audit: the hash-chained event log shows any change to stored events."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from plans.audit import chain_problems
from plans.execution import advance_run
from plans.models import Run, RunEvent
from plans.services.runs import run_create
from tests.engine.engine_catalog import SEED_PLAN

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(author):
    run = run_create(author=author, goal_text="Total price", plan_data=SEED_PLAN)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def verify(*args):
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_audit", *args, stdout=out, stderr=err)
    except CommandError as error:
        return False, out.getvalue() + err.getvalue() + str(error)
    return True, out.getvalue()


def test_an_untouched_log_verifies(run):
    ok, output = verify()

    assert ok, output
    assert "1 run(s)" in output
    assert chain_problems(run) == []


def test_an_altered_event_is_named(run):
    event = RunEvent.objects.get(run=run, kind="step_finished", payload__step=3)
    event.payload = {**event.payload, "result": 1}
    event.save()

    ok, output = verify("--run", str(run.pk))

    assert not ok
    assert f"event #{event.seq} (step_finished) was altered" in output


def test_a_removed_event_is_named(run):
    event = RunEvent.objects.get(run=run, kind="plan_created")
    event.delete()

    ok, output = verify()

    assert not ok
    assert f"events #{event.seq}..#{event.seq} are missing" in output


def test_reordered_events_are_named(run):
    first, second = RunEvent.objects.filter(run=run).order_by("seq")[2:4]
    RunEvent.objects.filter(pk=first.pk).update(seq=10**9)  # swap the two through a free seq
    RunEvent.objects.filter(pk=second.pk).update(seq=first.seq)
    RunEvent.objects.filter(pk=first.pk).update(seq=second.seq)

    ok, output = verify()

    assert not ok
    assert "does not follow the event before it" in output


def test_events_removed_from_the_end_are_named(run):
    RunEvent.objects.filter(run=run, seq=run.last_seq).delete()

    ok, output = verify()

    assert not ok
    assert "events at the end were removed" in output
