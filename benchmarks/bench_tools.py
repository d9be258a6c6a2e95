"""Tools for the benchmark: a step that takes a known time and does nothing else."""

import json
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


@tool(pure=True)
def bench_report(rows: int = 500) -> list[dict]:
    """A sales report of rows objects, 410 chars of JSON each (500: a 205,000-char result)."""
    report = []
    for i in range(rows):
        row = {"row": i, "region": f"R{i % 7}", "sku": f"SKU-{i:05d}", "amount_inr": 1000 + i}
        pad = 410 - len(json.dumps({**row, "note": ""})) - 2  # with its ", " separator
        report.append({**row, "note": f"row {i} ".ljust(pad, ".")})
    return report
