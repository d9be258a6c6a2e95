"""The idempotent side-effect ledger: one effect per idempotency key, whatever repeats it.

A destructive tool claims its key in the same transaction as a database effect (or before an
outside delivery), so a retried, timed-out or recovered call answers with the first call's
result instead of acting twice. Tool authors with effects of their own follow the same shape.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, transaction

from plans.models import LedgerEntry
from plans.tools.errors import ToolError

logger = logging.getLogger(__name__)

# How long a call waits for an earlier one with its key to finish delivering, checking every
# CLAIM_POLL_S: less than send_email's time limit, so the waiting call can still answer.
CLAIM_WAIT_S = 20.0
CLAIM_POLL_S = 0.1


def reference_for(prefix: str, idempotency_key: str) -> str:
    """The ledger reference for a key; the same key always gives the same reference."""
    if not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= 64:
        raise ValueError(f"idempotency_key must be 1-64 characters, got {idempotency_key!r}")
    return f"{prefix}-{hashlib.sha256(idempotency_key.encode()).hexdigest()[:10].upper()}"


def once(
    kind: str,
    idempotency_key: str,
    args: dict[str, Any],
    result: dict[str, Any],
    *,
    check: Callable[[LedgerEntry], None] | None = None,
    deliver: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Record ``result`` and do the effect unless the key is known; else return its result.

    The entry's details are the arguments (what the admin and the reports show) plus "result",
    added only once the effect is done: an entry without it is a delivery not finished (yet).
    """
    # check (a database effect) commits with the entry: if it raises, nothing is recorded.
    # get_or_create handles a concurrent insert: the loser finds the winner's entry.
    with transaction.atomic():
        entry, created = LedgerEntry.objects.get_or_create(
            idempotency_key=idempotency_key,
            defaults={
                "kind": kind,
                "details": args if deliver else {**args, "result": result},
                "reference": result["reference"],
            },
        )
        if created and check:
            check(entry)
    if not created:
        _require_same_call(entry, kind, args)
        finished = _finished(entry)
        if finished is None:  # that delivery failed and let the key go: this call makes it
            return once(kind, idempotency_key, args, result, check=check, deliver=deliver)
        return finished.details["result"]
    if deliver:
        # Outside any transaction: a hung mail server must not hold the database's write lock,
        # and the claim committed above keeps a repeat call from delivering a second time.
        try:
            deliver()
        except Exception:
            # Most likely nothing went out, so a retry with the same key may deliver. (A mail
            # server failing after it accepted the message would mean a second copy; nothing
            # here can tell.)
            entry.delete()
            raise
        try:
            LedgerEntry.objects.filter(pk=entry.pk).update(details={**args, "result": result})
        except DatabaseError:
            # The effect happened, so failing the call would invite a repeat under a new key;
            # the entry stays unfinished and a repeat with this key is refused.
            logger.exception("%s %s was delivered but not marked done", kind, entry.reference)
    return result


def _require_same_call(entry: LedgerEntry, kind: str, args: dict[str, Any]) -> None:
    if entry.kind != kind:
        raise ToolError(
            f"this idempotency key already belongs to {entry.kind} {entry.reference}, not to "
            f"this {kind}"
        )
    recorded = {name: value for name, value in entry.details.items() if name != "result"}
    if recorded != args:
        raise ToolError(
            f"this idempotency key was already used for a different {kind} ({entry.reference}); "
            "a new action needs a new key"
        )


def _finished(entry: LedgerEntry) -> LedgerEntry | None:
    """The entry once its delivery is done, or None if it failed and let its key go.

    The executor asks again with the same key after a call timed out: the answer is what that
    delivery did, so it is waited for (a while) rather than refused or repeated.
    """
    deadline = time.monotonic() + CLAIM_WAIT_S
    current: LedgerEntry | None = entry
    while current is not None and "result" not in current.details:
        if time.monotonic() >= deadline:
            raise ToolError(
                f"an earlier call with this key ({entry.kind} {entry.reference}) has not "
                f"finished after {CLAIM_WAIT_S:g} s more; it may yet go out, so it is not repeated"
            )
        time.sleep(CLAIM_POLL_S)
        current = LedgerEntry.objects.filter(pk=entry.pk).first()
    return current
