"""Running a plan's steps: each starts as soon as its dependencies are done, in parallel.

Tool calls run on the shared tool threads; destructive ones pass the approval gate
(plans.runtime.gate) first and park the run when a decision is missing.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import queue
import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from plans.engine import (
    Outcome,
    Scheduler,
    UnresolvedPlaceholder,
    args_sha256,
    backoff_delay,
    blocked_result,
    check_args,
    idempotency_key,
    resolve,
    storable,
    unstorable_in,
)
from plans.guards.circuits import CIRCUIT_OPEN_MESSAGE, circuit_admits, circuit_record
from plans.models import Approval, Run, Step, ToolCall
from plans.models import Plan as PlanRow
from plans.runtime import telemetry
from plans.runtime.events import LeaseLost
from plans.runtime.gate import (
    Verdict,
    approval_gate,
    approval_is_valid_for_call,
    approval_request,
)
from plans.runtime.tool_threads import Call, ToolThreads, tool_threads
from plans.services.plans import (
    declined_calls,
    plan_to_engine,
)
from plans.tools import ToolError, ToolSpec

if TYPE_CHECKING:
    from plans.runtime.advance import RunAdvancer

logger = logging.getLogger(__name__)

# How often a run with steps awaiting approval looks for decisions while other steps run.
DECISION_POLL_S = 0.25


@dataclass
class ToolOutcome:
    result: Any
    error: str
    idempotency_key: str
    started_at: datetime
    duration_ms: float
    retryable: bool = False
    tool_fault: bool = False  # the tool misbehaved (not a refusal of its input): breaker counts it


def invoke_tool(
    spec: ToolSpec, args: dict[str, Any], *, key: str, approval: Approval | None
) -> ToolOutcome:
    """Call a tool in a pool thread; a destructive one needs an approval of these exact args."""
    started_at = timezone.now()
    t0 = time.perf_counter()
    if spec.destructive and not approval_is_valid_for_call(approval, tool=spec.name, args=args):
        refusal = f"{spec.name} is destructive and has no approval for these arguments"
        return ToolOutcome(None, refusal, key, started_at, 0.0)
    result: Any = None
    error = ""
    retryable = fault = False
    try:
        result, size = _jsonable(spec.call(args, idempotency_key=key))
        if size > settings.AGENTSITE_TOOL_RESULT_MAX_CHARS:
            result = None
            raise ToolError(
                f"the result is too large: {size:,} characters of JSON, at most "
                f"{settings.AGENTSITE_TOOL_RESULT_MAX_CHARS:,} (AGENTSITE_TOOL_RESULT_MAX_CHARS)"
            )
    except BaseException as exc:  # even SystemExit from a tool ends only its step
        error = error_text(exc)
        retryable = bool(spec.retryable) and isinstance(exc, spec.retryable)
        fault = retryable or not isinstance(exc, ToolError)
    finally:
        if connection.connection is not None:
            connection.close()
    duration_ms = (time.perf_counter() - t0) * 1000
    return ToolOutcome(result, error, key, started_at, duration_ms, retryable, fault)


def error_text(exc: BaseException) -> str:
    """What an exception (a tool's, a model backend's) says, storable and kept short."""
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    if not isinstance(exc, ToolError):
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = storable(message)
    if len(text) > TOOL_ERROR_MAX_CHARS:
        cut = len(text) - TOOL_ERROR_MAX_CHARS
        text = f"{text[:TOOL_ERROR_MAX_CHARS]}... ({cut:,} more characters not kept)"
    return text


def _jsonable(value: Any) -> tuple[Any, int]:
    """The result as storable JSON data (see plans.engine.text), and its length as JSON text.

    ValueError if it has no JSON form: NaN, infinities, integers too long to write out.
    """
    kind = type(value)
    if kind in _JSON_SCALARS:
        if kind is float and not math.isfinite(value):
            raise ValueError(f"the result {value} is not a JSON number")
        if kind is int and not -_JSON_INT_BOUND < value < _JSON_INT_BOUND:
            raise ValueError("the result is an integer too long to write out")
        return storable(value), len(value) if kind is str else 0
    text = json.dumps(value, default=str, ensure_ascii=False, allow_nan=False)
    data = json.loads(text)
    # The text keeps an unpaired surrogate as it is but writes a NUL as the escape \u0000.
    clean = unstorable_in(text) is None and "\\u0000" not in text
    return (data if clean else storable(data)), len(text)


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
# Python refuses to write out an int of more than 4,300 digits (sys.get_int_max_str_digits).
_JSON_INT_BOUND = 10**4000
# An error is an observation for the answer prompt: a traceback-sized text at most.
TOOL_ERROR_MAX_CHARS = 10_000


class StepsExecution:
    """Runs a plan's steps as soon as their dependencies finish, up to the run's parallelism."""

    def __init__(self, advancer: RunAdvancer, plan_row: PlanRow, steps: dict[int, Step]) -> None:
        plan = plan_to_engine(steps.values())
        self.advancer = advancer
        self.lease = advancer.lease
        self.recorder = advancer.recorder
        self.run = advancer.run
        self.plan = plan
        self.steps = steps
        self.scheduler = Scheduler(
            plan, run_dependants_of_failures=self.run.goal.run_dependants_of_failures
        )
        self.results: dict[int, Any] = {}
        self.inflight: dict[Call, int] = {}  # call -> step id
        self.completed: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self.deadlines: list[tuple[float, int, Call]] = []  # a heap
        self.retries: list[tuple[float, int]] = []  # a heap of (due, step id)
        self.calls: dict[int, tuple[ToolSpec, dict[str, Any], Approval | None]] = {}
        self.call_hashes: dict[int, str] = {}  # step id -> args_sha256 of its call
        self.reconciling: set[int] = set()  # destructive steps re-invoked after a timeout
        self.rng = random.Random()
        self.reusable = _results_of_earlier_versions(plan_row)
        # Both only matter to destructive steps; a plan without any skips the queries.
        has_destructive = any(step.destructive for step in steps.values())
        # Keys of destructive calls this run made or is making: key -> the step that holds it.
        self.destructive_keys = _destructive_keys(self.run.pk) if has_destructive else {}
        self.declined = declined_calls(self.run) if has_destructive else {}
        self.pool = tool_threads()
        self.awaiting: dict[int, dict[str, Any]] = {}  # step id -> resolved args
        self.round_left: dict[int, int] = {}
        self.rounds_started: set[int] = set()
        for step in steps.values():
            self.round_left[step.round] = self.round_left.get(step.round, 0) + 1
        self._restore()

    def _restore(self) -> None:
        for step in sorted(self.steps.values(), key=lambda s: s.step_id):
            if step.status in Step.FINISHED:
                self.scheduler.restore(step.step_id, Outcome(step.status))
                self._remember(step)
                self.round_left[step.round] -= 1
                self.rounds_started.add(step.round)
            elif step.status in (Step.Status.RUNNING, Step.Status.AWAITING_APPROVAL):
                # Interrupted or parked: it will be taken again; its attempts stay counted.
                step.status = Step.Status.PENDING
                self.recorder.step_changed(step, "status")
                self.rounds_started.add(step.round)

    def _remember(self, step: Step) -> None:
        if step.status == Step.Status.SUCCEEDED:
            self.results[step.step_id] = step.result
        elif step.status in (Step.Status.FAILED, Step.Status.BLOCKED):
            self.results[step.step_id] = step.result if step.result is not None else step.error

    def execute(self) -> bool:
        """Run until every step finished (False) or only approvals remain (True: parked)."""
        pool = self.pool
        last_poll = time.monotonic()
        while True:
            if self.lease.lost.is_set():
                # Its heartbeat found the lease expired or taken: stop starting anything now.
                raise LeaseLost(f"run {self.run.pk}: lease {self.lease.token} was lost")
            cancelled = self.advancer.cancel_known
            if not cancelled:
                retry_due = bool(self.retries) and self.retries[0][0] <= time.monotonic()
                if retry_due and self.advancer.cancel_recorded():
                    continue  # the loop gives the retries up
                self._retry_due(pool)
                room = self.run.max_parallel_steps - len(self.inflight)
                ready = self.scheduler.take_ready(limit=max(room, 0))
                if ready and self.advancer.cancel_recorded():
                    for step_id in ready:
                        self.scheduler.release(step_id)
                    continue
                for step_id in ready:
                    self._launch(step_id, pool)
            elif self.retries:
                self._give_up_retries("the run was cancelled before the retry")
            if not self.inflight and not self.retries:
                if self.scheduler.has_ready and not cancelled and self.run.max_parallel_steps > 0:
                    continue  # steps that ended at launch (reused, blocked) freed dependants
                if self.awaiting and not cancelled:
                    if self._apply_decisions(pool):
                        continue
                    if self._park():
                        return True
                    continue
                break
            # Handed over after the launches above: starting dependants comes first.
            if self.recorder.flush_due_in() == 0:
                self.recorder.flush()
            for call in self._next_completed():
                if call in self.inflight:  # not already given up on as timed out
                    self._complete(call)
            self._time_out_overdue()
            if self.awaiting and time.monotonic() - last_poll > DECISION_POLL_S:
                last_poll = time.monotonic()
                self._apply_decisions(pool)
        if self.advancer.cancel_recorded():
            self._skip_unstarted("skipped: the run was cancelled")
        self.recorder.flush()
        return False

    # --- launching -----------------------------------------------------------------------

    def _launch(self, step_id: int, pool: ToolThreads) -> None:
        step = self.steps[step_id]
        self._round_starts(step.round)
        spec = self.advancer.registry.get(step.tool)
        if spec is None:
            self._finish_step(step, Outcome.FAILED, error=f"tool {step.tool!r} is not registered")
            return
        try:
            args = resolve(step.args, self.results)
        except UnresolvedPlaceholder as exc:
            self._finish_step(step, Outcome.FAILED, error=f"cannot resolve arguments: {exc}")
            return
        step.resolved_args = args
        self.recorder.step_changed(step, "resolved_args")
        problems = check_args(spec.schema, args)
        if problems:
            self._finish_step(
                step,
                Outcome.FAILED,
                error="arguments after substitution are invalid: " + "; ".join(problems),
            )
            return
        call_hash = self.call_hashes[step_id] = args_sha256(step.tool, args)
        if call_hash in self.reusable:
            # Same tool, same resolved arguments as a step of an earlier plan version: not rerun.
            result, origin = self.reusable[call_hash]
            self._finish_step(step, Outcome.SUCCEEDED, result=result, reused_from=origin)
            return
        approval = None
        if spec.destructive:
            gate = approval_gate(step=step, resolved_args=args)
            if gate.verdict is Verdict.MISSING and call_hash in self.declined:
                # A reviewer declined this very call for another step: not asked again. A
                # request already made for this step itself is still the reviewer's to decide.
                reason = self.declined[call_hash]
                result = blocked_result(step.tool, reason)
                self._finish_step(step, Outcome.BLOCKED, result=result, error=reason)
                return
            decided = gate.verdict in (Verdict.APPROVED, Verdict.REJECTED)
            if decided and gate.approval is not None and telemetry.observer is not None:
                telemetry.observer.approval_waited(self.run, step, gate.approval)
            if gate.verdict is Verdict.REJECTED:
                assert gate.approval is not None
                reason = gate.approval.reason
                if gate.approval.decision == Approval.Decision.EXPIRED:
                    result = (
                        f"BLOCKED: {step.tool} was not approved in time. {reason}. Do not retry."
                    )
                else:
                    result = blocked_result(step.tool, reason)
                self._finish_step(step, Outcome.BLOCKED, result=result, error=reason)
                return
            if gate.verdict is not Verdict.APPROVED:
                self._await_approval(step, args, requested=gate.verdict is Verdict.PENDING)
                return
            approval = gate.approval
            if gate.call_args != args:  # the reviewer edited them
                args = gate.call_args
                self.call_hashes[step_id] = args_sha256(step.tool, args)
        if not circuit_admits(step.tool):
            self._finish_step(step, Outcome.FAILED, error=CIRCUIT_OPEN_MESSAGE)
            return
        self._submit(step, spec, args, approval, pool)

    def _submit(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        approval: Approval | None,
        pool: ToolThreads,
    ) -> None:
        step.status = Step.Status.RUNNING
        step.attempts += 1
        step.started_at = timezone.now()
        step.resolved_args = args
        key = self._call_key(step, spec, args)
        changed = ["status", "attempts", "started_at", "resolved_args"]
        if spec.destructive and key != step.idempotency_key:
            step.idempotency_key = key  # on record with the attempt, before the side effect
            changed.append("idempotency_key")
        self.recorder.step_changed(step, *changed)
        self.recorder.event(
            "step_started",
            step=step.step_id,
            tool=step.tool,
            round=step.round,
            attempt=step.attempts,
            args=args,
        )
        if spec.destructive:
            # The attempt is on record before the side effect can happen.
            self.recorder.flush(wait=True)
        timeout = spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
        call = pool.submit(
            invoke_tool,
            spec,
            args,
            key=key,
            approval=approval,
            reply=self.completed.put,
        )
        self.inflight[call] = step.step_id
        self.calls[step.step_id] = (spec, args, approval)
        heapq.heappush(self.deadlines, (time.monotonic() + timeout, step.step_id, call))

    def _call_key(self, step: Step, spec: ToolSpec, args: dict[str, Any]) -> str:
        """The idempotency key: one per call, and a fresh one for an approved deliberate repeat.

        A destructive call identical to one another step of this run already made was approved
        again for this step, so it gets a key of its own. A destructive step keeps the key it was
        first given (stored before the call), whatever order steps launch in after a crash.
        """
        key = self.call_hashes[step.step_id]  # the key is the call's identity
        if not spec.destructive:
            return key
        if step.idempotency_key:
            return step.idempotency_key
        first = self.destructive_keys.setdefault(key, step.pk)
        if first == step.pk:
            return key
        return idempotency_key(spec.name, {"args": args, "repeat_for_step": step.pk})

    def _await_approval(self, step: Step, args: dict[str, Any], *, requested: bool) -> None:
        self.awaiting[step.step_id] = args
        step.status = Step.Status.AWAITING_APPROVAL
        self.recorder.step_changed(step, "status")
        if requested:
            return
        self.recorder.approval_requested(
            approval_request(run_id=self.run.pk, step=step, resolved_args=args)
        )
        self.recorder.event(
            "approval_requested", step=step.step_id, tool=step.tool, round=step.round, args=args
        )

    def _decided(self) -> list[int]:
        """Steps awaiting approval whose latest approval has been decided."""
        return [
            step_id
            for step_id, args in sorted(self.awaiting.items())
            if approval_gate(step=self.steps[step_id], resolved_args=args).verdict
            in (Verdict.APPROVED, Verdict.REJECTED)
        ]

    def _apply_decisions(self, pool: ToolThreads) -> bool:
        """Launch or block the steps whose approvals were decided; True if there were any."""
        decided = self._decided()
        if decided and self.advancer.cancel_recorded():
            return True  # the loop sees the cancel and launches nothing
        # The rest wait for room, decided, and are launched on a later look.
        room = self.run.max_parallel_steps - len(self.inflight)
        for step_id in decided[: max(room, 0)]:
            del self.awaiting[step_id]
            self._launch(step_id, pool)
        return bool(decided)

    def _park(self) -> bool:
        """Release the run while it waits for reviewers; False if a decision raced in."""
        return self.advancer.park(
            Run.Status.AWAITING_APPROVAL,
            awaiting=sorted(self.awaiting),
            decided=lambda: bool(self._decided()),
        )

    # --- completing ----------------------------------------------------------------------

    def _complete(self, call: Call) -> None:
        step_id = self.inflight.pop(call)
        outcome = call.result()
        step = self.steps[step_id]
        self._record_attempt(step, outcome)
        self.reconciling.discard(step_id)
        circuit_record(step.tool, failed=outcome.tool_fault, error=outcome.error)
        if not outcome.error:
            self._finish_step(step, Outcome.SUCCEEDED, result=outcome.result)
        elif outcome.retryable and step.attempts < settings.AGENTSITE_TOOL_MAX_ATTEMPTS:
            self._schedule_retry(step, outcome.error)
        else:
            self._finish_step(step, Outcome.FAILED, error=outcome.error)

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
            if call in self.inflight:
                del self.inflight[call]
                self._timed_out(self.steps[step_id])

    def _timed_out(self, step: Step) -> None:
        """A call ran past its limit; its thread is abandoned and its outcome is unknown."""
        spec, args, approval = self.calls[step.step_id]
        seconds = spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
        error = f"timed out after {seconds:g}s"
        circuit_record(step.tool, failed=True, error=error)
        key = self._call_key(step, spec, args)
        self._record_attempt(
            step, ToolOutcome(None, error, key, step.started_at or timezone.now(), seconds * 1000)
        )
        if spec.destructive:
            if step.step_id in self.reconciling:
                self.reconciling.discard(step.step_id)
                self._finish_step(
                    step,
                    Outcome.FAILED,
                    error=f"{error}; outcome unknown: the reconciling call timed out too",
                )
                return
            # The effect may or may not have happened: ask again with the same idempotency key,
            # which returns the recorded effect or performs it once. Never a blind retry.
            self.reconciling.add(step.step_id)
            self.recorder.event(
                "step_outcome_unknown", step=step.step_id, tool=step.tool, error=error
            )
            self._submit(step, spec, args, approval, self.pool)
            return
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
        if self.awaiting:
            candidates.append(DECISION_POLL_S)
        flush_in = self.recorder.flush_due_in()
        if flush_in is not None:
            candidates.append(flush_in)
        return max(0.0, min(candidates))

    def _finish_step(
        self,
        step: Step,
        outcome: Outcome,
        *,
        result: Any = None,
        error: str = "",
        reused_from: str = "",
    ) -> None:
        step.status = outcome.value
        step.result = result
        step.error = error
        step.finished_at = timezone.now()
        self.recorder.step_changed(step, "status", "result", "error", "finished_at")
        self._remember(step)
        payload: dict[str, Any] = {"step": step.step_id, "tool": step.tool, "status": step.status}
        if step.duration_s is not None:
            payload["duration_ms"] = round(step.duration_s * 1000, 3)
        if reused_from:
            payload["reused_from"] = reused_from
        if outcome is Outcome.SUCCEEDED:
            payload["result"] = result
            if not step.destructive and not reused_from and step.resolved_args is not None:
                # A later identical call in this run reuses this result instead of calling again.
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


def _destructive_keys(run_id: int) -> dict[str, int]:
    """Keys of the run's destructive calls, each with the step (pk) that first took it."""
    taken = Step.objects.filter(plan__run_id=run_id, destructive=True).exclude(idempotency_key="")
    keys = dict(taken.order_by("-pk").values_list("idempotency_key", "pk"))
    # Calls made before steps kept their keys: the first step to call wins.
    made = ToolCall.objects.filter(run_id=run_id, step__destructive=True).order_by("-pk")
    keys.update(made.values_list("idempotency_key", "step_id"))
    return keys


def _results_of_earlier_versions(plan_row: PlanRow) -> dict[str, tuple[Any, str]]:
    """Succeeded calls of the run's earlier plan versions: args hash -> (result, origin)."""
    if plan_row.version == 1:
        return {}  # no earlier version: no query
    earlier = Step.objects.filter(
        plan__run_id=plan_row.run_id,
        plan__version__lt=plan_row.version,
        status=Step.Status.SUCCEEDED,
    ).select_related("plan")
    return {
        args_sha256(step.tool, step.resolved_args or step.args): (
            step.result,
            f"plan v{step.plan.version} step {step.step_id}",
        )
        for step in earlier
    }
