"""The tamper-evident event log: each event's hash covers its content and its predecessor."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from datetime import datetime

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
    events = (
        RunEvent.objects.filter(run=run)
        .order_by("seq")
        .values_list("seq", "kind", "payload", "at", "prev_hash", "hash")
        .iterator(chunk_size=2000)
    )
    for seq, kind, payload, at, prev_hash, stored_hash in events:
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
        recomputed = at and event_hash(
            run_id=run.pk,
            seq=seq,
            kind=kind,
            payload_json=canonical_json(payload),
            at=at,
            prev_hash=prev_hash,
        )
        if recomputed != stored_hash:
            problems.append(f"run {run.pk}: event #{seq} ({kind}) was altered")
        expected_prev = stored_hash
        expected_seq = seq + 1
    if expected_seq - 1 != run.last_seq or expected_prev != (run.last_event_hash or GENESIS):
        problems.append(
            f"run {run.pk}: the log ends at #{expected_seq - 1} but #{run.last_seq} was written "
            "(events at the end were removed or altered)"
        )
    return problems
