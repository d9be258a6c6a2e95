"""Tools for the benchmark: a step that takes a known time and does nothing else."""

import time

from plans.tools import Preview, tool


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


@tool(destructive=True)
def bench_effect(ms: float, tag: int = 0) -> float:
    """A destructive step that takes ms milliseconds (./dev bench --previews), no preview."""
    if ms > 0:
        time.sleep(ms / 1000)
    return ms


def _bench_preview(ms: float, tag: int = 0) -> Preview:
    return Preview(summary=f"effect {tag}", facts={"takes": f"{ms:g} ms"}, target_version="v1")


@tool(destructive=True, preview=_bench_preview)
def bench_effect_previewed(ms: float, tag: int = 0) -> float:
    """bench_effect with a preview whose target never changes: its re-check before the call
    is the machinery's cost alone (a tool thread, the breaker, the record)."""
    if ms > 0:
        time.sleep(ms / 1000)
    return ms
