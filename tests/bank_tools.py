"""A user's own tools, written the usual way: a bank whose reads are not pure functions.

Registered through AGENTSITE_TOOL_MODULES by the correctness tests; state is per process and
reset by the tests' fixture.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

from plans.tools import tool

accounts: dict[str, int] = {}
# Keys of transfers done: the naive "check the key, act, then record the key" shape.
done_keys: dict[str, dict[str, Any]] = {}
calls: dict[str, int] = {}  # tool name -> times called
transfers: list[tuple[str, str, int]] = []
# The slow bank's reply is held until a test releases it (after the executor gave up waiting).
bank_reply = threading.Event()
reviewer_id: list[int] = []  # who approve_waiting approves as
on_nap: Callable[[], None] | None = None  # what a test has happen as a nap ends
_lock = threading.Lock()


def reset(**balances: int) -> None:
    with _lock:
        accounts.clear()
        accounts.update(balances)
        done_keys.clear()
        calls.clear()
        transfers.clear()
    bank_reply.clear()


def _count(name: str) -> None:
    with _lock:
        calls[name] = calls.get(name, 0) + 1


@tool
def balance(account: str) -> int:
    """The account's balance now (a read that changes when money moves)."""
    _count("balance")
    return accounts[account]


@tool(pure=True)
def posted_balance(account: str) -> int:
    """A balance read wrongly declared pure: a transfer after it must still not be hidden."""
    _count("posted_balance")
    return accounts[account]


@tool(pure=True)
def double(number: int) -> int:
    """Twice the number (a pure function)."""
    _count("double")
    return number * 2


@tool
def nap(seconds: float) -> float:
    """Sleep, then say how long (impure: each call is a nap of its own)."""
    _count("nap")
    time.sleep(seconds)
    if on_nap is not None:
        on_nap()
    return seconds


@tool
def now() -> str:
    """The current time (time-dependent: never reused)."""
    _count("now")
    return datetime.now(UTC).isoformat()


def _move(source: str, target: str, amount: int) -> None:
    with _lock:
        accounts[source] -= amount
        accounts[target] += amount
        transfers.append((source, target, amount))


@tool(destructive=True)
def transfer(source: str, target: str, amount: int, idempotency_key: str) -> dict:
    """Move money between accounts, once per idempotency key."""
    _count("transfer")
    if idempotency_key in done_keys:
        return done_keys[idempotency_key]
    _move(source, target, amount)
    done_keys[idempotency_key] = result = {"moved": amount, "from": source, "to": target}
    return result


@tool(destructive=True, timeout_s=0.2)
def slow_transfer(source: str, target: str, amount: int, idempotency_key: str) -> dict:
    """Checks its key, moves the money, then waits for the bank's slow reply before it records
    the key: a repeat with the same key while it waits would move the money again."""
    _count("slow_transfer")
    if idempotency_key in done_keys:
        return done_keys[idempotency_key]
    _move(source, target, amount)
    bank_reply.wait(10)
    done_keys[idempotency_key] = result = {"moved": amount, "from": source, "to": target}
    return result


def _reconcile_transfer(idempotency_key: str) -> dict | None:
    _count("reconcile")
    with _lock:
        moved = [t for t in transfers if t]  # the bank's own statement
    return {"moved": moved[-1][2], "reconciled": True} if moved else None


@tool(destructive=True, timeout_s=0.2, reconcile=_reconcile_transfer)
def reconciled_transfer(source: str, target: str, amount: int, idempotency_key: str) -> dict:
    """Like slow_transfer, with a reconcile hook that reads the bank's statement."""
    _count("reconciled_transfer")
    _move(source, target, amount)
    bank_reply.wait(10)
    return {"moved": amount, "from": source, "to": target}


@tool
def approve_waiting() -> str:
    """Approve the run's pending approval as the test's reviewer once it is requested (while
    this step still runs, so the decision lands mid-run rather than after the run parked)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from plans.models import Approval
    from plans.services.approvals import approval_decide

    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pending = Approval.objects.filter(decision="pending").first()
            if pending is not None:
                reviewer = get_user_model().objects.get(pk=reviewer_id[0])
                approval_decide(approval=pending, reviewer=reviewer, approve=True, resume=False)
                return "approved"
            time.sleep(0.01)
        return "nothing to approve"
    finally:
        connection.close()


class Room(enum.Enum):
    SINGLE = "single"
    DOUBLE = "double"


class Guest(TypedDict):
    name: str
    born: date


@dataclass
class Stay:
    check_in: date
    nights: int = 1


received: list[dict[str, Any]] = []


@tool
def book_room(
    day: date,
    arrival: datetime,
    deposit: Decimal,
    reference: UUID,
    room: Room,
    guest: Guest,
    stay: Stay,
    extra_days: list[date] | None = None,
) -> dict:
    """Book a room (receives each argument as its Python type)."""
    received.append(
        {
            "day": day,
            "arrival": arrival,
            "deposit": deposit,
            "reference": reference,
            "room": room,
            "guest": guest,
            "stay": stay,
            "extra_days": extra_days,
        }
    )
    return {"booked": day.isoformat(), "room": room.value, "deposit": str(deposit)}
