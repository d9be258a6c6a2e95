"""Tools the executor tests register through AGENTSITE_TOOL_MODULES."""

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
