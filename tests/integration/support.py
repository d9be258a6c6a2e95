"""Helpers shared by the worker, sweeper, cancel and integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from plans.models import RunEvent


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 10.0, every: float = 0.02, what: str = ""
) -> Any:
    """Poll until the predicate is truthy and return its value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:g}s waiting for {what or predicate}")
        time.sleep(every)


def seqs_of(run_id: int, *, using: str = "default") -> list[int]:
    return list(
        RunEvent.objects.using(using)
        .filter(run_id=run_id)
        .order_by("seq")
        .values_list("seq", flat=True)
    )


def events_of(run_id: int, kind: str) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run_id=run_id, kind=kind).order_by("seq"))
