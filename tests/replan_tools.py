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
