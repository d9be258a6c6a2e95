"""What a run's steps execution knows while it runs, and the bookkeeping every part shares.

plans.runtime.steps runs the loop; plans.runtime.launching starts steps (resolve, check,
reuse, gate, ask a person); plans.runtime.inflight follows the calls out (deadlines, overdue
and late outcomes, retries, the hand-over when the loop ends). Each is a part of
StepsExecution and shares this state.
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from django.utils import timezone

from plans.engine import (
    Outcome,
    PastEffect,
    Plan,
    Scheduler,
    idempotency_key,
)
from plans.journal.leases import Lease
from plans.models import Approval, Run, Step
from plans.runtime import telemetry
from plans.runtime.recorder import RunRecorder
from plans.runtime.tool_calls import PreviewTaken
from plans.runtime.tool_threads import Call, ToolThreads
from plans.tools import ToolSpec
from plans.tools.results import RunResults

# How often a run with steps awaiting approval looks for decisions while other steps run.
DECISION_POLL_S = 0.25
# How often a run waiting out a retry's backoff looks for a cancel (nothing else commits then,
# so no commit brings the cancel with it).
CANCEL_POLL_S = 0.5


class Advancer(Protocol):
    """What the steps use of their run's advancer (plans.runtime.advance.RunAdvancer)."""

    lease: Lease
    recorder: RunRecorder
    run: Run
    registry: dict[str, ToolSpec]

    @property
    def cancel_known(self) -> bool: ...

    def cancel_recorded(self) -> bool: ...

    def park(
        self,
        status: str,
        *,
        awaiting: Any,
        decided: Callable[[], bool],
        questions: list[dict[str, Any]] | None = None,
    ) -> bool: ...


class StepsState:
    """The state of one StepsExecution (set by its __init__) and the bookkeeping on it."""

    advancer: Advancer
    lease: Lease
    recorder: RunRecorder
    run: Run
    plan: Plan
    steps: dict[int, Step]
    scheduler: Scheduler
    results: dict[int, Any]
    held_results: RunResults  # what result_slice may read: this run's results only
    inflight: dict[Call, int]  # call -> step id
    completed: queue.SimpleQueue[Call]
    deadlines: list[tuple[float, int, Call]]  # a heap
    retries: list[tuple[float, int]]  # a heap of (due, step id)
    cancel_read_at: float  # when a backoff last looked for a cancel (monotonic)
    calls: dict[int, tuple[ToolSpec, dict[str, Any], Approval | None]]
    call_hashes: dict[int, str]  # step id -> args_sha256 of its call
    rng: random.Random
    overdue: dict[Call, int]  # calls past their time limit, outcome still to come -> attempt
    abandoned: dict[Call, int]  # calls given up on, a late outcome still recorded -> step id
    reconciles: dict[Call, int]  # a tool's reconcile hook at work -> step id
    closed: bool  # the loop has ended: replies go on record directly (under late_lock)
    late_lock: threading.Lock
    effects: int  # bumped whenever a destructive call starts or ends
    pure_started: dict[int, int]  # pure step id -> effects at its launch
    reusable: dict[str, tuple[Any, str]]
    destructive_keys: dict[str, int]
    declined: dict[str, str]
    changes_requested: set[int | None]  # step ids a reviewer sent back for changes
    past_effects: list[PastEffect]
    held_keys: set[str]
    carried: set[int]
    pool: ToolThreads
    awaiting: dict[int, dict[str, Any]]  # step id -> resolved args
    starting: list[tuple[Step, ToolSpec, dict[str, Any], str, Approval | None]]  # not yet called
    requesting: list[tuple[Step, ToolSpec, dict[str, Any]]]  # requests put off for previews
    round_left: dict[int, int]
    rounds_started: set[int]

    # Made by the other parts (launching, inflight): named here so each part may call them.
    def _launch(self, step_id: int, pool: ToolThreads) -> None:
        raise NotImplementedError

    def _submit(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        approval: Approval | None,
        pool: ToolThreads,
    ) -> None:
        raise NotImplementedError

    def _reply(self, call: Call) -> None:
        raise NotImplementedError

    def _start_launched(self, pool: ToolThreads) -> None:
        raise NotImplementedError

    def _record_preview(self, step: Step, taken: PreviewTaken, *, purpose: str) -> None:
        self.recorder.tool_preview(taken.row(run_id=self.run.pk, step=step, purpose=purpose))

    def _remember(self, step: Step) -> None:
        if step.status == Step.Status.SUCCEEDED:
            self.results[step.step_id] = step.result
        elif step.status in (Step.Status.FAILED, Step.Status.BLOCKED):
            self.results[step.step_id] = step.result if step.result is not None else step.error

    def _effect_may_happen(self) -> None:
        """A destructive call starts or ends: earlier reads may no longer hold."""
        self.effects += 1
        self.reusable.clear()

    def _call_key(self, step: Step, spec: ToolSpec, args: dict[str, Any]) -> str:
        """The idempotency key: one per run and call, and a fresh one for an approved repeat.

        A destructive call identical to one another step of this run already made was approved
        again for this step, so it gets a key of its own. A destructive step keeps the key it was
        first given (stored before the call), whatever order steps launch in after a crash, and
        another run's identical call has another key: it was approved on its own. A step that
        continues an earlier plan version's identical call holds that call's key already.
        """
        call_hash = self.call_hashes[step.step_id]
        if not spec.destructive:
            return call_hash  # nothing to happen once: the key is the call's identity
        if step.idempotency_key:
            return step.idempotency_key
        first = self.destructive_keys.setdefault(call_hash, step.pk)
        identity = "" if first == step.pk else f"repeat for step {step.pk}"
        return idempotency_key(spec.name, args, run_id=self.run.pk, step=identity)

    def _finish_step(
        self,
        step: Step,
        outcome: Outcome,
        *,
        result: Any = None,
        error: str = "",
        reused_from: str = "",
        changes_requested: bool = False,
    ) -> None:
        step.status = outcome.value
        step.result = result
        step.error = error
        step.finished_at = timezone.now()
        if reused_from:
            step.reused_from = reused_from
            self.recorder.step_changed(step, "reused_from")
        self.recorder.step_changed(step, "status", "result", "error", "finished_at")
        self._remember(step)
        payload: dict[str, Any] = {"step": step.step_id, "tool": step.tool, "status": step.status}
        if step.duration_s is not None:
            payload["duration_ms"] = round(step.duration_s * 1000, 3)
        if reused_from:
            payload["reused_from"] = reused_from
        if changes_requested:  # declined by a request for changes, not a verdict
            payload["changes_requested"] = True
        if outcome is Outcome.SUCCEEDED:
            payload["result"] = result
            if self.pure_started.get(step.step_id, -1) == self.effects:
                # A pure call, and nothing acted since it began: an identical later call in
                # this run gets this result instead of calling again.
                self.reusable.setdefault(
                    self.call_hashes[step.step_id], (result, f"step {step.step_id}")
                )
        else:
            payload["error"] = error
            if result is not None:
                payload["result"] = result
        self.recorder.event("step_finished", **payload)
        if telemetry.observer is not None:
            telemetry.observer.step_finished(self.run, step)
        self._round_progress(step.round)
        for skipped_id, reason in self.scheduler.finish(step.step_id, outcome):
            if changes_requested:
                reason = f"skipped: depends on step {step.step_id}, sent back for changes"
            self._skip(self.steps[skipped_id], reason, step.finished_at)

    def _skip(self, step: Step, reason: str, finished_at: datetime) -> None:
        """Record that the step will not run, and why; its round counts it as finished."""
        self._round_starts(step.round)
        step.status = Step.Status.SKIPPED
        step.error = reason
        step.finished_at = finished_at
        self.recorder.step_changed(step, "status", "error", "finished_at")
        self.recorder.event(
            "step_finished", step=step.step_id, tool=step.tool, status="skipped", error=reason
        )
        if telemetry.observer is not None:
            telemetry.observer.step_finished(self.run, step)
        self._round_progress(step.round)

    def _skip_unstarted(self, reason: str) -> None:
        now = timezone.now()
        for step in sorted(self.steps.values(), key=lambda s: (s.round, s.step_id)):
            if step.status in (Step.Status.PENDING, Step.Status.AWAITING_APPROVAL):
                self._skip(step, reason, now)

    def _round_starts(self, round_no: int) -> None:
        if round_no not in self.rounds_started:
            self.rounds_started.add(round_no)
            self.recorder.event("round_started", round=round_no)
            if round_no > self.run.round_count:
                self.run.round_count = round_no
                self.recorder.run_changed(round_count=round_no)

    def _round_progress(self, round_no: int) -> None:
        self.round_left[round_no] -= 1
        if self.round_left[round_no] == 0:
            self.recorder.event("round_finished", round=round_no)
