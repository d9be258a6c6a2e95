"""Tools for the replan property test: pure, impure (may fail, may decide approvals mid-run)
and destructive, each effect counted by its arguments once per new idempotency key."""

from __future__ import annotations

import threading
from collections import Counter

from plans.tools import ToolError, tool

acts: Counter[int] = Counter()  # label -> effects made (a new key acts, a known key answers)
keys: dict[str, int] = {}
_lock = threading.Lock()


def reset() -> None:
    with _lock:
        acts.clear()
        keys.clear()


@tool(pure=True)
def rp_pure(x: int) -> int:
    """Twice x."""
    return 2 * x


@tool
def rp_impure(x: int, fail: bool = False, review_now: bool = False) -> int:
    """x back, or a failure; may first decide the approvals waiting, as a reviewer would."""
    from django.db import connection

    from tests import property_tools

    if review_now:
        try:
            property_tools.decide_waiting()
        finally:
            connection.close()
    if fail:
        raise ToolError(f"rp_impure({x}) failed on purpose")
    return x


@tool(destructive=True)
def rp_effect(label: int, idempotency_key: str) -> int:
    """An effect, once per key and with no other check: a new key always acts."""
    with _lock:
        if idempotency_key not in keys:
            acts[label] += 1
            keys[idempotency_key] = acts[label]
        return keys[idempotency_key]
