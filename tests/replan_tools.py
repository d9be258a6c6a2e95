"""A destructive tool idempotent by key and nothing else: a new key always acts again."""

from __future__ import annotations

import threading
from typing import Any

from plans.tools import tool

refunds = 0
keys: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def reset() -> None:
    global refunds
    with _lock:
        refunds = 0
        keys.clear()


@tool(destructive=True)
def keyed_refund(order_id: str, amount_inr: int, idempotency_key: str) -> dict[str, Any]:
    """Refund an order, once per key; no check of what was refunded before."""
    global refunds
    with _lock:
        if idempotency_key not in keys:
            refunds += 1
            keys[idempotency_key] = {"refund": refunds, "order_id": order_id}
        return keys[idempotency_key]


# Calls that act and then never answer: their outcome stays unknown to the executor.
never_answer = threading.Event()
charges: dict[str, str] = {}  # key -> what the charge made
# Whether the charge provider's records show the charges yet (reconcile reads them).
records_show_charges = threading.Event()


def reset_charges() -> None:
    with _lock:
        charges.clear()
    records_show_charges.clear()
    never_answer.clear()


def _charge(label: str, key: str) -> str:
    with _lock:
        charges.setdefault(key, f"charged {label} once")
    never_answer.wait(10)  # set when the test ends
    return charges[key]


@tool(destructive=True, timeout_s=0.1)
def unanswered_charge(label: str, idempotency_key: str) -> str:
    """Charges, then never answers in time."""
    return _charge(label, idempotency_key)


def _charge_known(idempotency_key: str) -> str | None:
    if not records_show_charges.is_set():
        return None
    with _lock:
        return charges.get(idempotency_key)


@tool(destructive=True, timeout_s=0.1, reconcile=_charge_known)
def reconciled_charge(label: str, idempotency_key: str) -> str:
    """Charges, then never answers in time; its records tell, once they show the charge."""
    return _charge(label, idempotency_key)
