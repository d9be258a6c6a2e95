"""A user's own destructive tools with previews, written the usual way: a warehouse that ships
stock, whose preview reads the stock level and its row version; and previews that are slow,
raise or hang. Registered through AGENTSITE_TOOL_MODULES; state is per process, reset by tests.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from plans.tools import Preview, ToolError, tool

stock: dict[str, int] = {}
versions: dict[str, int] = {}  # item -> its row version, bumped by every change
# Every shipment made: (item, the version it was made against, idempotency key).
shipped: list[tuple[str, int, str]] = []
preview_calls: dict[str, int] = {}  # tool -> times its preview hook ran
SLOW_PREVIEW_S = 0.3
hang = threading.Event()  # set to let a hanging preview return (at the end of a test)
_lock = threading.Lock()


def reset(**levels: int) -> None:
    with _lock:
        stock.clear()
        stock.update(levels)
        versions.clear()
        versions.update(dict.fromkeys(levels, 1))
        shipped.clear()
        preview_calls.clear()
    hang.clear()
    global together
    together = None


def restock(item: str, quantity: int) -> None:
    """The target changes outside any run (a delivery arrives)."""
    with _lock:
        stock[item] += quantity
        versions[item] += 1


def _counted(name: str) -> None:
    with _lock:
        preview_calls[name] = preview_calls.get(name, 0) + 1


def _stock_preview(item: str, quantity: int) -> Preview:
    _counted("ship")
    with _lock:
        level, version = stock[item], versions[item]
    warnings = [f"only {level} in stock: the shipment will be refused"] if quantity > level else []
    return Preview(
        summary=f"Ship {quantity} of {item}; {level} in stock",
        facts={"In stock": level, "Left after": level - quantity},
        warnings=warnings,
        target_version=f"{item}@{version}",
    )


def _ship(item: str, quantity: int, key: str) -> dict[str, Any]:
    with _lock:
        if quantity > stock[item]:
            raise ToolError(f"only {stock[item]} {item} in stock")
        shipped.append((item, versions[item], key))
        stock[item] -= quantity
        versions[item] += 1
        return {"item": item, "left": stock[item]}


@tool(destructive=True, preview=_stock_preview)
def ship(item: str, quantity: int, idempotency_key: str) -> dict:
    """Ship items from the warehouse (the preview reads the stock and its row version)."""
    return _ship(item, quantity, idempotency_key)


def _slow_preview(item: str, quantity: int) -> Preview:
    _counted("ship_slowly")
    time.sleep(SLOW_PREVIEW_S)
    return _stock_preview(item, quantity)


@tool(destructive=True, preview=_slow_preview, preview_timeout_s=5)
def ship_slowly(item: str, quantity: int, idempotency_key: str) -> dict:
    """Ship, with a preview that takes a while (under its limit)."""
    return _ship(item, quantity, idempotency_key)


def _broken_preview(item: str, quantity: int) -> Preview:
    _counted("ship_broken")
    raise RuntimeError("warehouse API answered 503")


@tool(destructive=True, preview=_broken_preview)
def ship_broken(item: str, quantity: int, idempotency_key: str) -> dict:
    """Ship, with a preview that raises."""
    return _ship(item, quantity, idempotency_key)


def _hanging_preview(item: str, quantity: int) -> Preview:
    _counted("ship_hanging")
    hang.wait(60)
    return _stock_preview(item, quantity)


@tool(destructive=True, preview=_hanging_preview, preview_timeout_s=0.2)
def ship_hanging(item: str, quantity: int, idempotency_key: str) -> dict:
    """Ship, with a preview that hangs past its limit."""
    return _ship(item, quantity, idempotency_key)


def _acting_preview(item: str, quantity: int) -> Any:
    _counted("ship_badly_previewed")
    return {"summary": "not a Preview"}


@tool(destructive=True, preview=_acting_preview)
def ship_badly_previewed(item: str, quantity: int, idempotency_key: str) -> dict:
    """Ship, with a preview hook that returns something other than a Preview."""
    return _ship(item, quantity, idempotency_key)


# Armed by a test: each preview hook of ship_together waits there until `together.parties`
# hooks are in it at once, so hooks taken one after another break it (an error preview).
together: threading.Barrier | None = None


def arm_together(parties: int) -> None:
    global together
    together = threading.Barrier(parties, timeout=3)


def _together_preview(item: str, quantity: int) -> Preview:
    _counted("ship_together")
    barrier = together
    if barrier is not None:
        barrier.wait()  # BrokenBarrierError if the others are not being taken meanwhile
    return _stock_preview(item, quantity)


@tool(destructive=True, preview=_together_preview, preview_timeout_s=10)
def ship_together(item: str, quantity: int, idempotency_key: str) -> dict:
    """Ship, with a preview that returns only once the round's other previews are running."""
    return _ship(item, quantity, idempotency_key)
