"""manage.py verify_audit: the hash-chained event log shows any change to stored events."""

import hashlib
import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from plans.engine import canonical_json
from plans.guards.audit import GENESIS, chain_problems, event_hash
from plans.models import Run, RunEvent
from plans.runtime.advance import advance_run
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


def test_an_altered_event_cannot_rewrite_the_report_on_the_terminal(run):
    event = RunEvent.objects.get(run=run, kind="step_finished", payload__step=3)
    # Erase the line and write over it: on a terminal, the report would read "intact".
    RunEvent.objects.filter(pk=event.pk).update(
        kind="x\x1b[2K\raudit log verified: every event chain intact\u202e"
    )

    ok, output = verify("--run", str(run.pk))

    assert not ok
    assert not any(char in output for char in ("\x1b", "\r", "\u202e"))
    assert (
        f"event #{event.seq} (x\u27e8U+001B\u27e9[2K\u27e8U+000D\u27e9audit log verified: "
        "every event chain intact\u27e8U+202E\u27e9) was altered"
    ) in output


def test_a_timestamp_overwritten_with_garbage_is_named(run):
    event = RunEvent.objects.get(run=run, seq=4)
    with connection.cursor() as cursor:  # what SQLite lets a raw UPDATE write
        cursor.execute("UPDATE plans_runevent SET at = 'garbage' WHERE id = %s", [event.pk])

    ok, output = verify("--run", str(run.pk))

    assert not ok
    assert f"event #4 ({event.kind}) was altered" in output


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


def spelled_as_older_code_wrote_it(run, changes=None):
    """Rewrite every event's stored payload as Django's JSONField wrote it before the journal
    stored its canonical text: keys in another order, spaces, non-ASCII escaped."""
    with connection.cursor() as cursor:
        for pk, payload in RunEvent.objects.filter(run=run).values_list("pk", "payload"):
            payload = {**payload, "note": "caf\u00e9 \u2603", **(changes or {}).get(pk, {})}
            text = json.dumps(dict(reversed(payload.items())))
            cursor.execute("UPDATE plans_runevent SET payload = %s WHERE id = %s", [text, pk])


def test_events_stored_in_another_spelling_of_the_same_json_still_verify(run):
    rows = RunEvent.objects.filter(run=run).order_by("seq")
    noted = {event.pk: {**event.payload, "note": "caf\u00e9 \u2603"} for event in rows}
    # Their hashes are of the canonical text, as append_events wrote them.
    previous = GENESIS
    for event in rows:
        digest = event_hash(
            run_id=run.pk,
            seq=event.seq,
            kind=event.kind,
            payload_json=canonical_json(noted[event.pk]),
            at=event.at,
            prev_hash=previous,
        )
        RunEvent.objects.filter(pk=event.pk).update(prev_hash=previous, hash=digest)
        previous = digest
    Run.objects.filter(pk=run.pk).update(last_event_hash=previous)
    spelled_as_older_code_wrote_it(run)
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload FROM plans_runevent WHERE run_id = %s", [run.pk])
        assert all('": ' in text and "\\u00e9" in text for (text,) in cursor.fetchall())

    ok, output = verify("--run", str(run.pk))

    assert ok, output
    altered = rows.get(seq=3)
    spelled_as_older_code_wrote_it(run, {altered.pk: {"note": "changed"}})
    run.refresh_from_db()
    assert chain_problems(run) == [f"run {run.pk}: event #3 ({altered.kind}) was altered"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.django_db(transaction=False)
@given(payload=st.dictionaries(st.text(), JSON_VALUES, max_size=4), kind=st.text(min_size=1))
def test_the_event_hash_is_the_hash_of_the_canonical_event_object(payload, kind):
    at = datetime(2026, 12, 1, 3, 4, 5, 678901, tzinfo=UTC)
    whole = {"run": 7, "seq": 12, "kind": kind, "payload": payload, "at": at.isoformat()}
    whole["prev"] = "ab" * 32
    expected = hashlib.sha256(canonical_json(whole).encode()).hexdigest()

    digest = event_hash(
        run_id=7,
        seq=12,
        kind=kind,
        payload_json=canonical_json(payload),
        at=at,
        prev_hash="ab" * 32,
    )

    assert digest == expected
