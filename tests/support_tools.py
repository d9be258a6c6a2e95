"""Tools the executor tests register through AGENTSITE_TOOL_MODULES."""

import json
import threading
import time

from plans.tools import ToolError, tool

# Three steps that must be running at the same moment to get past this barrier.
parallel_barrier = threading.Barrier(3, timeout=5)
calls: list[tuple[str, float, float]] = []


@tool
def sleepy(seconds: float, label: str = "") -> str:
    """Sleep, then return the label."""
    started = time.monotonic()
    time.sleep(seconds)
    calls.append((label, started, time.monotonic()))
    return label


@tool
def meet(label: str) -> str:
    """Wait until three steps are running at once (BrokenBarrierError if they are not)."""
    parallel_barrier.wait()
    return label


@tool
def explode(message: str) -> str:
    """Always fails with the given message."""
    raise ToolError(message)


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


class Flaky(Exception):
    """A transient failure the flaky tool declares retryable."""


flaky_calls: dict[str, int] = {}
hang_release = threading.Event()


@tool(retryable=(Flaky,))
def flaky(label: str, failures: int) -> str:
    """Fail with Flaky the first `failures` times for this label, then succeed."""
    flaky_calls[label] = flaky_calls.get(label, 0) + 1
    if flaky_calls[label] <= failures:
        raise Flaky(f"transient failure {flaky_calls[label]}")
    return f"{label} ok after {flaky_calls[label]} calls"


@tool(retryable=(Flaky,))
def bad_input(text: str) -> str:
    """Fails with a non-retryable error even though it declares Flaky retryable."""
    raise ToolError(f"cannot handle {text!r}")


@tool(timeout_s=0.2)
def hang(label: str) -> str:
    """Blocks until released by the test (or 5 s), far past its 0.2 s limit."""
    hang_release.wait(5)
    return label


@tool(destructive=True, timeout_s=0.3)
def slow_charge(account: str, amount: int, idempotency_key: str) -> dict:
    """Charges once per key; the first call does its work, then hangs past the limit."""
    from plans.models import LedgerEntry

    entry, created = LedgerEntry.objects.get_or_create(
        idempotency_key=idempotency_key,
        defaults={"kind": "charge", "details": {"account": account, "amount": amount}},
    )
    if created:
        hang_release.wait(1.0)  # the effect is done; the reply is late
    return {"charged": amount, "entry": entry.pk}


@tool
def mangled(text: str) -> dict:
    """Return the text with an unpaired surrogate (as from undecodable bytes) and a NUL."""
    return {"text": text + "\udcff", "raw": "\ud800\x00"}


@tool
def with_nul(text: str) -> dict:
    """Return the text with a NUL inside a dict and a list (and no surrogate)."""
    return {"text": text + "\x00", "list": ["\x00"]}


@tool
def bulky(chars: int) -> dict:
    """Return a result whose JSON text is a little longer than chars."""
    return {"text": "x" * chars}


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str of exception exploded")


_MISBEHAVIOURS = {
    "system_exit": lambda: (_ for _ in ()).throw(SystemExit(3)),
    "keyboard_interrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "unprintable": lambda: (_ for _ in ()).throw(_Unprintable()),
    "huge_error": lambda: (_ for _ in ()).throw(ToolError("x" * 50_000)),
    "nan": lambda: float("nan"),
    "inf_in_list": lambda: [1, float("inf")],
    "bigint": lambda: 10**5000,
}


@tool
def misbehave(kind: str) -> object:
    """Raise or return something a well-made tool would not (see _MISBEHAVIOURS)."""
    return _MISBEHAVIOURS[kind]()


# How many tracked calls are running now, and the most there ever were at once.
tracked = {"now": 0, "most": 0}
_tracked_lock = threading.Lock()


def _run_tracked(seconds: float) -> None:
    with _tracked_lock:
        tracked["now"] += 1
        tracked["most"] = max(tracked["most"], tracked["now"])
    time.sleep(seconds)
    with _tracked_lock:
        tracked["now"] -= 1


@tool
def tracked_wait(seconds: float) -> float:
    """Wait, counted among the tracked calls running at once."""
    _run_tracked(seconds)
    return seconds


@tool(destructive=True)
def tracked_charge(label: str, idempotency_key: str) -> str:
    """A destructive call that takes a moment, counted among the tracked calls running at once."""
    _run_tracked(0.1)
    return label


@tool
def sees_its_start(label: str) -> bool:
    """Whether the step_started of this very call (by its label) is committed already."""
    from django.db import connection

    from plans.models import RunEvent

    try:
        return RunEvent.objects.filter(kind="step_started", payload__args__label=label).exists()
    finally:
        connection.close()


@tool(pure=True)
def sales_report(rows: int, row_chars: int = 410) -> list[dict]:
    """A report of rows objects, each about row_chars of JSON (500 x 410: a 200 KB result)."""
    report = []
    for i in range(rows):
        row = {"row": i, "region": f"R{i % 7}", "sku": f"SKU-{i:05d}", "amount_inr": 1000 + i}
        # Each row's JSON text plus its ", " separator is row_chars long.
        pad = row_chars - len(json.dumps({**row, "note": ""})) - 2
        report.append({**row, "note": f"row {i} " + "." * max(0, pad - len(f"row {i} "))})
    return report
