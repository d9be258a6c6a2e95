"""Calls in flight: their outcomes, time limits and overdue calls, retries, reconcile hooks,
and the hand-over of late outcomes once the loop has ended."""

from __future__ import annotations

import heapq
import logging
import queue
import time
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from plans.engine import (
    Outcome,
    backoff_delay,
    preview_version,
)
from plans.guards.circuits import circuit_record
from plans.journal.events import append_events
from plans.models import Step, ToolPreview
from plans.runtime import telemetry
from plans.runtime.gate import approval_request_again
from plans.runtime.recorder import record_late_tool_call
from plans.runtime.steps_state import CANCEL_POLL_S, DECISION_POLL_S, StepsState
from plans.runtime.tool_calls import ToolOutcome, reconcile_call
from plans.runtime.tool_threads import Call, ToolThreads
from plans.runtime.worker import waiting, waiting_group
from plans.tools import ToolSpec

# The executor's one logger, whichever part writes.
logger = logging.getLogger("plans.runtime.steps")


class CallsInFlight(StepsState):
    """StepsExecution's part that follows the calls out until their outcomes are on record."""

    def _reply(self, call: Call) -> None:
        """A tool thread's call is done: to the loop, or on record directly once it has ended."""
        if not self.closed:
            self.completed.put(call)
            return
        with self.late_lock:
            if not self.closed:
                self.completed.put(call)
                return
        self._record_late_directly(call)

    def _hand_over_late_calls(self) -> None:
        """The loop ends with calls still out: their late outcomes are recorded as they come."""
        with self.late_lock:
            self.closed = True
        while True:
            try:
                call = self.completed.get_nowait()
            except queue.Empty:
                return
            self._record_late_directly(call)

    def _record_late_directly(self, call: Call) -> None:
        """On the calling thread, outside the run's recorder (its lease may be gone): the
        late outcome of a call given up on goes onto its ToolCall row, as a fact of record,
        with its event, so the run's page and audit show it too."""
        step_id = self.abandoned.get(call)
        attempt = self.overdue.get(call)
        if step_id is None or attempt is None:
            return
        outcome = call.result()
        step = self.steps[step_id]
        try:
            arrived_at = timezone.now()
            with transaction.atomic():
                record_late_tool_call(
                    step_id=step.pk,
                    attempt=attempt,
                    late_result=outcome.result,
                    late_error=outcome.error,
                    late_arrived_at=arrived_at,
                )
                # Unfenced, as a person's decision is: the run's loop (and maybe its lease)
                # has ended, and this is a fact about a call it made.
                append_events(self.run.pk, [_late_event(step, attempt, outcome, arrived_at)])
        except Exception:
            logger.exception("the late outcome of %s could not be recorded", self.steps[step_id])
        finally:
            connection.close()

    def _complete(self, call: Call) -> None:
        step_id = self.inflight.pop(call)
        outcome = call.result()
        step = self.steps[step_id]
        if step.destructive:
            self._effect_may_happen()
        if outcome.recheck is not None:
            self._record_preview(step, outcome.recheck, purpose=ToolPreview.Purpose.LAUNCH)
        if outcome.stale is not None and call not in self.overdue:
            self._went_stale(step, outcome)
            return
        late_attempt = self.overdue.pop(call, None)
        if late_attempt is None:
            self._record_attempt(step, outcome)
        else:
            # The timed-out call answered after all: its outcome is the step's, on its record.
            self._record_late(step, late_attempt, outcome)
        circuit_record(step.tool, failed=outcome.tool_fault, error=outcome.error)
        if not outcome.error:
            self._finish_step(step, Outcome.SUCCEEDED, result=outcome.result)
        elif outcome.retryable and step.attempts < settings.AGENTSITE_TOOL_MAX_ATTEMPTS:
            self._schedule_retry(step, outcome.error)
        else:
            self._finish_step(step, Outcome.FAILED, error=outcome.error)

    def _went_stale(self, step: Step, outcome: ToolOutcome) -> None:
        """The target changed since the approval: the call was not made, the approval is stale
        and the same call is asked for again, with both previews and what changed."""
        _, _, approval = self.calls[step.step_id]
        assert approval is not None and outcome.recheck is not None and outcome.stale is not None
        fresh = approval_request_again(
            stale=approval, preview=outcome.recheck.preview, changes=outcome.stale
        )
        step.attempts -= 1  # never called: the attempt did not happen
        step.status = Step.Status.AWAITING_APPROVAL
        self.recorder.step_changed(step, "attempts", "status")
        self.recorder.approval_stale(approval, fresh=fresh)
        self.recorder.event(
            "approval_stale",
            step=step.step_id,
            tool=step.tool,
            round=step.round,
            approval=approval.pk,
            approved_version=approval.target_version,
            current_version=preview_version(outcome.recheck.preview),
            changes=outcome.stale,
            approved_preview=approval.preview,
            preview=outcome.recheck.preview,
        )
        self.awaiting[step.step_id] = approval.requested_args
        # Committed before the loop looks for decisions again: else it finds the stale one.
        self.recorder.flush(wait=True)

    def _record_attempt(self, step: Step, outcome: ToolOutcome) -> None:
        row = {
            "run_id": self.run.pk,
            "step_id": step.pk,
            "tool": step.tool,
            "attempt": step.attempts,
            "args": step.resolved_args,
            "result": outcome.result,
            "error": outcome.error,
            "idempotency_key": outcome.idempotency_key,
            "started_at": outcome.started_at,
            "duration_ms": outcome.duration_ms,
        }
        self.recorder.tool_call(**row)
        if telemetry.observer is not None:
            telemetry.observer.tool_call(self.run, step, row)

    def _record_late(self, step: Step, attempt: int, outcome: ToolOutcome) -> None:
        arrived_at = timezone.now()
        self.recorder.tool_call_late(
            step_id=step.pk,
            attempt=attempt,
            late_result=outcome.result,
            late_error=outcome.error,
            late_arrived_at=arrived_at,
        )
        kind, payload = _late_event(step, attempt, outcome, arrived_at)
        self.recorder.event(kind, **payload)

    def _collect_late(self, call: Call) -> None:
        """A call the step no longer waits for came back: its outcome goes on its record."""
        step_id = self.abandoned.pop(call)
        attempt = self.overdue.pop(call, None)
        if attempt is not None:
            if self.steps[step_id].destructive:
                self._effect_may_happen()
            self._record_late(self.steps[step_id], attempt, call.result())

    def _reconciled(self, call: Call) -> None:
        """The tool's reconcile hook answered for a timed-out call still being waited for."""
        step_id = self.reconciles.pop(call)
        step = self.steps[step_id]
        waiting = next((c for c, s in self.inflight.items() if s == step_id), None)
        outcome = call.result()
        if outcome.error:
            logger.warning("reconcile of %s failed: %s", step.tool, outcome.error)
            return  # the call's own outcome is awaited still
        if waiting is None or waiting not in self.overdue or outcome.result is None:
            return  # the call answered first, or its effect is not known yet
        del self.inflight[waiting]
        self.abandoned[waiting] = step_id
        self.recorder.event("step_reconciled", step=step_id, tool=step.tool)
        self._finish_step(step, Outcome.SUCCEEDED, result=outcome.result)

    def _schedule_retry(self, step: Step, error: str) -> None:
        """Try again after exponential backoff with full jitter."""
        delay = backoff_delay(
            step.attempts,
            base=settings.AGENTSITE_TOOL_RETRY_BASE_S,
            cap=settings.AGENTSITE_TOOL_RETRY_CAP_S,
            rng=self.rng,
        )
        heapq.heappush(self.retries, (time.monotonic() + delay, step.step_id))
        self.recorder.event(
            "step_retrying",
            step=step.step_id,
            tool=step.tool,
            attempt=step.attempts,
            error=error,
            delay_s=round(delay, 3),
        )

    def _retry_due(self, pool: ToolThreads) -> None:
        now = time.monotonic()
        while self.retries and self.retries[0][0] <= now:
            _, step_id = heapq.heappop(self.retries)
            spec, args, approval = self.calls[step_id]
            self._submit(self.steps[step_id], spec, args, approval, pool)

    def _give_up_retries(self, reason: str) -> None:
        while self.retries:
            _, step_id = heapq.heappop(self.retries)
            step = self.steps[step_id]
            self._finish_step(step, Outcome.FAILED, error=f"{step.error or 'failed'}; {reason}")

    def _next_completed(self) -> list[Call]:
        """Wait for at least one finished call (or the next timer), then take all finished."""
        try:
            if waiting_group() is None:  # not on a worker (a test, a benchmark): just wait
                done = [self.completed.get(timeout=self._wait_timeout())]
            else:
                try:
                    done = [self.completed.get_nowait()]
                except queue.Empty:
                    with waiting():  # tool calls out: this run's worker slot serves others
                        done = [self.completed.get(timeout=self._wait_timeout())]
        except queue.Empty:
            return []
        while True:
            try:
                done.append(self.completed.get_nowait())
            except queue.Empty:
                return done

    def _time_out_overdue(self) -> None:
        now = time.monotonic()
        while self.deadlines and (
            self.deadlines[0][2] not in self.inflight or self.deadlines[0][0] <= now
        ):
            _, step_id, call = heapq.heappop(self.deadlines)
            if call not in self.inflight:
                continue
            step = self.steps[step_id]
            if call in self.overdue:
                self._gave_up_waiting(step, call)
            elif step.destructive:
                self._wait_for_outcome(step, call)
            else:
                del self.inflight[call]
                self.abandoned[call] = step_id
                self.overdue[call] = step.attempts
                self._timed_out(step)

    def _timeout_error(self, spec: ToolSpec) -> str:
        return f"timed out after {spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S:g}s"

    def _record_timeout(self, step: Step, spec: ToolSpec, args: dict[str, Any], error: str) -> None:
        seconds = spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
        circuit_record(step.tool, failed=True, error=error)
        key = self._call_key(step, spec, args)
        self._record_attempt(
            step, ToolOutcome(None, error, key, step.started_at or timezone.now(), seconds * 1000)
        )

    def _wait_for_outcome(self, step: Step, call: Call) -> None:
        """A destructive call ran past its limit and may still act, so it is never issued again
        while it may run: the step waits for its outcome, or for the tool's reconcile hook."""
        spec, args, _ = self.calls[step.step_id]
        error = self._timeout_error(spec)
        self._record_timeout(step, spec, args, f"{error}; outcome unknown, awaited")
        self.overdue[call] = step.attempts
        wait_s = settings.AGENTSITE_TOOL_OUTCOME_WAIT_S
        heapq.heappush(self.deadlines, (time.monotonic() + wait_s, step.step_id, call))
        self.recorder.event(
            "step_outcome_unknown",
            step=step.step_id,
            tool=step.tool,
            error=error,
            waiting_s=wait_s,
            reconcile=spec.reconcile is not None,
        )
        if spec.reconcile is not None:
            key = self._call_key(step, spec, args)
            hook = self.pool.submit(reconcile_call, spec, key, reply=self.completed.put)
            self.reconciles[hook] = step.step_id

    def _gave_up_waiting(self, step: Step, call: Call) -> None:
        """Still no outcome: the step fails as unknown; the call is not repeated."""
        del self.inflight[call]
        self.abandoned[call] = step.step_id
        wait_s = settings.AGENTSITE_TOOL_OUTCOME_WAIT_S
        error = (
            f"{self._timeout_error(self.calls[step.step_id][0])}; outcome unknown: no answer "
            f"{wait_s:g}s later either, so it was not repeated (it may yet have acted)"
        )
        self._finish_step(step, Outcome.FAILED, error=error)

    def _timed_out(self, step: Step) -> None:
        """A call ran past its limit; its thread is abandoned and its outcome is unknown."""
        spec, args, _ = self.calls[step.step_id]
        error = self._timeout_error(spec)
        self._record_timeout(step, spec, args, error)
        if TimeoutError in spec.retryable and step.attempts < settings.AGENTSITE_TOOL_MAX_ATTEMPTS:
            self._schedule_retry(step, error)
            return
        self._finish_step(step, Outcome.FAILED, error=error)

    def _wait_timeout(self) -> float | None:
        """Until the next deadline, decision poll, group commit or lease check, the first."""
        now = time.monotonic()
        candidates = [self.lease.seconds / 3]
        if self.deadlines:
            candidates.append(self.deadlines[0][0] - now)
        if self.retries:
            candidates.append(self.retries[0][0] - now)
            candidates.append(self.cancel_read_at + CANCEL_POLL_S - now)
        if self.awaiting:
            candidates.append(DECISION_POLL_S)
        flush_in = self.recorder.flush_due_in()
        if flush_in is not None:
            candidates.append(flush_in)
        return max(0.0, min(candidates))


def _late_event(
    step: Step, attempt: int, outcome: ToolOutcome, arrived_at: datetime
) -> tuple[str, dict[str, Any]]:
    """The event of a timed-out call's outcome that arrived after all."""
    payload: dict[str, Any] = {"step": step.step_id, "tool": step.tool, "attempt": attempt}
    payload["arrived_at"] = arrived_at.isoformat()
    if outcome.error:
        payload["error"] = outcome.error
    else:
        payload["result"] = outcome.result
    return ("tool_call_late", payload)
