"""Tools for the benchmark: a step that takes a known time and does nothing else."""

import time

from plans.tools import tool


@tool
def bench_sleep(ms: float, tag: int = 0) -> float:
    """Sleep for ms milliseconds and return ms (tag tells otherwise identical steps apart)."""
    if ms > 0:
        time.sleep(ms / 1000)
    return ms


@tool(pure=True)
def bench_sleep_pure(ms: float, tag: int = 0) -> float:
    """bench_sleep declared pure (./dev bench --pure): its calls do not wait for their
    step_started to be committed."""
    if ms > 0:
        time.sleep(ms / 1000)
    return ms
