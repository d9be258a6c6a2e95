"""Tools for the benchmark: a step that takes a known time and does nothing else."""

import time

from plans.tools import tool


@tool
def bench_sleep(ms: float) -> float:
    """Sleep for ms milliseconds and return ms."""
    if ms > 0:
        time.sleep(ms / 1000)
    return ms
