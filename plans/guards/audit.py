"""The tamper-evident event log: each event's hash covers its content and its predecessor."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast

from plans.engine import canonical_json
from plans.models import Run, RunEvent

GENESIS = "0" * 64


def event_hash(
    *, run_id: int, seq: int, kind: str, payload_json: str, at: datetime, prev_hash: str
) -> str:
    """SHA-256 of canonical_json({"run", "seq", "kind", "payload", "at", "prev"}).

    payload_json is canonical_json(payload). The object is spelled out in canonical key order
    so that the payload text, encoded once for storage too, is not encoded a second time.
    """
    content = (
        f'{{"at":{_json_string(at.isoformat())},"kind":{_json_string(kind)},'
        f'"payload":{payload_json},"prev":{_json_string(prev_hash)},'
        f'"run":{int(run_id)},"seq":{int(seq)}}}'
    )
    return hashlib.sha256(content.encode()).hexdigest()


def _json_string(text: str) -> str:
    """canonical_json(text), without the encoder for the texts a hash covers besides the
    payload (a time, a kind, a hash), which JSON writes as they are between quotes."""
    if _PLAIN.fullmatch(text):
        return f'"{text}"'
    return canonical_json(text)


# Characters JSON never escapes, and all that an ISO time, an event kind or a hex hash use.
_PLAIN = re.compile(r"[0-9A-Za-z_:.+ -]*")


def event_chain(
    *, run_id: int, first_seq: int, prev_hash: str, entries: Iterable[tuple[str, str, datetime]]
) -> Iterator[tuple[int, str, str]]:
    """(seq, prev_hash, hash) for each (kind, payload_json, at) appended after prev_hash."""
    for seq, (kind, payload_json, at) in enumerate(entries, start=first_seq):
        digest = event_hash(
            run_id=run_id,
            seq=seq,
            kind=kind,
            payload_json=payload_json,
            at=at,
            prev_hash=prev_hash,
        )
        yield seq, prev_hash, digest
        prev_hash = digest


def chain_problems(run: Run) -> list[str]:
    """Every way the run's stored events differ from the chain they were written as."""
    problems: list[str] = []
    expected_prev = GENESIS
    expected_seq = 1
    # Tuples, not model instances: the audit page checks a 500-step run's thousands each time.
    # The payload as the database spells it: stored as its canonical text, it is hashed as it
    # is, not decoded and encoded again (see _payload_hash_matches).
    events = (
        RunEvent.objects.filter(run=run)
        .order_by("seq")
        .annotate(payload_text=Cast("payload", TextField()))
        .values_list("seq", "kind", "payload_text", "at", "prev_hash", "hash")
        .iterator(chunk_size=2000)
    )
    for seq, kind, payload_text, at, prev_hash, stored_hash in events:
        if seq != expected_seq:
            problems.append(
                f"run {run.pk}: events #{expected_seq}..#{seq - 1} are missing"
                if seq > expected_seq
                else f"run {run.pk}: event #{seq} appears twice"
            )
        if prev_hash != expected_prev:
            problems.append(
                f"run {run.pk}: event #{seq} ({kind}) does not follow the event "
                "before it (an event was removed, reordered or altered before it)"
            )
        # A timestamp the database can no longer read back (None) was altered too.
        intact = at is not None and _payload_hash_matches(
            stored_hash,
            payload_text,
            run_id=run.pk,
            seq=seq,
            kind=kind,
            at=at,
            prev_hash=prev_hash,
        )
        if not intact:
            problems.append(f"run {run.pk}: event #{seq} ({kind}) was altered")
        expected_prev = stored_hash
        expected_seq = seq + 1
    if expected_seq - 1 != run.last_seq or expected_prev != (run.last_event_hash or GENESIS):
        problems.append(
            f"run {run.pk}: the log ends at #{expected_seq - 1} but #{run.last_seq} was written "
            "(events at the end were removed or altered)"
        )
    return problems


def _payload_hash_matches(stored_hash: str, payload_text: str, **content: Any) -> bool:
    """Whether the event's hash covers its content, the payload read as the database spells it.

    append_events stores canonical_json(payload), the very text the hash covers: where the
    database gives that text back (SQLite), it is hashed as it is. Where it spells JSON its own
    way (PostgreSQL's jsonb), or the text was rewritten, the value is decoded and hashed in its
    canonical spelling, as it was written.
    """
    if event_hash(payload_json=payload_text, **content) == stored_hash:
        return True
    try:
        payload = json.loads(payload_text)
    except ValueError:
        return False
    return event_hash(payload_json=canonical_json(payload), **content) == stored_hash
