"""Batches a run's writes so each scheduling decision costs one fenced transaction."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from plans.bulk import insert_rows, update_rows
from plans.events import append_events
from plans.leases import Lease
from plans.models import Approval, ModelCall, Step, ToolCall

STEP_FIELDS = (
    "status",
    "resolved_args",
    "result",
    "error",
    "attempts",
    "started_at",
    "finished_at",
)


# Group commit: writes wait at most this long, so a burst of steps costs one transaction.
FLUSH_DELAY_S = 0.005


class RunRecorder:
    """Collects step updates, audit rows and events; flush() commits them together.

    Every flush is fenced by the lease (a worker that lost it writes nothing) and renews it.
    """

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.cancel_requested = False
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._steps: dict[int, Step] = {}
        self._tool_calls: list[dict[str, Any]] = []
        self._model_calls: list[ModelCall] = []
        self._approvals: list[Approval] = []
        self._run_fields: dict[str, Any] = {}
        self._oldest: float | None = None  # monotonic time of the oldest unflushed write

    def _touch(self) -> None:
        if self._oldest is None:
            self._oldest = time.monotonic()

    def flush_due_in(self) -> float | None:
        """Seconds until the buffered writes must be committed; None when nothing is buffered."""
        if self._oldest is None:
            return None
        return max(0.0, self._oldest + FLUSH_DELAY_S - time.monotonic())

    def event(self, kind: str, **payload: Any) -> None:
        self._touch()
        self._events.append((kind, payload))

    def step_changed(self, step: Step) -> None:
        self._touch()
        self._steps[step.pk] = step

    def tool_call(self, **row: Any) -> None:
        """A ToolCall row, given as column attributes (run_id, step_id, ...)."""
        self._touch()
        self._tool_calls.append(row)

    def model_call(self, call: ModelCall) -> None:
        self._touch()
        self._model_calls.append(call)

    def approval_requested(self, approval: Approval) -> None:
        self._touch()
        self._approvals.append(approval)

    def run_changed(self, **fields: Any) -> None:
        self._touch()
        self._run_fields.update(fields)

    def flush(self, *, run_fields: Mapping[str, Any] | None = None) -> bool:
        """Commit everything collected; returns whether a cancel was requested."""
        fields = {
            **self._run_fields,
            **(run_fields or {}),
            "lease_expires_at": timezone.now() + timedelta(seconds=self.lease.seconds),
        }
        with transaction.atomic():
            # Fence first: the run row stays locked until commit, and a lost lease writes nothing.
            _, self.cancel_requested = append_events(
                self.lease.run_id, self._events, lease_token=self.lease.token, run_fields=fields
            )
            if self._steps:
                update_rows(Step, list(self._steps.values()), STEP_FIELDS)
            insert_rows(ToolCall, self._tool_calls)
            if self._model_calls:
                ModelCall.objects.bulk_create(self._model_calls)
            if self._approvals:
                Approval.objects.bulk_create(self._approvals)
        self._events, self._tool_calls, self._model_calls, self._approvals = [], [], [], []
        self._steps, self._run_fields = {}, {}
        self._oldest = None
        return self.cancel_requested
