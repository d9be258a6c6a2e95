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
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from plans.engine import (
    EFFECT_DONE,
    EFFECT_UNKNOWN,
    Outcome,
    PastEffect,
    Scheduler,
    UnresolvedPlaceholder,
    args_sha256,
    backoff_delay,
    blocked_result,
    check_args,
    idempotency_key,
    past_effect_for,
    resolve,
    storable,
    unstorable_in,
)
from plans.guards.circuits import CIRCUIT_OPEN_MESSAGE, circuit_admits, circuit_record
from plans.models import Approval, HumanQuestion, Run, Step, ToolCall
from plans.models import Plan as PlanRow
from plans.runtime import telemetry
from plans.runtime.events import LeaseLost
from plans.runtime.gate import (
    Verdict,
    approval_gate,
    approval_is_valid_for_call,
    approval_request,
)
from plans.runtime.recorder import Durable, record_late_tool_call
from plans.runtime.tool_threads import Call, ToolThreads, tool_threads
from plans.runtime.worker import waiting, waiting_group
from plans.services.plans import (
    declined_calls,
    effects_taken,
    plan_to_engine,
)
from plans.services.questions import question_expired_error
from plans.tools import ToolError, ToolSpec
from plans.tools.builtin import ASK_HUMAN

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
    spec: ToolSpec, args: dict[str, Any], *, key: str, approval: Approval | None, step_pk: int
) -> ToolOutcome:
    """Call a tool in a pool thread; a destructive one needs an approval of these exact args
    for this very step (step_pk): another step's or another run's approval never counts."""
    started_at = timezone.now()
    t0 = time.perf_counter()
    allowed = approval_is_valid_for_call(approval, tool=spec.name, args=args, step_pk=step_pk)
    if spec.destructive and not allowed:
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


def invoke_once_recorded(
    durable: Durable | None,
    spec: ToolSpec,
    args: dict[str, Any],
    *,
    key: str,
    approval: Approval | None,
    step_pk: int,
) -> ToolOutcome:
    """invoke_tool once the commit holding the call's start is made (durable None: at once);
    never if it fails, which ends the advance (so this outcome is never recorded)."""
    if durable is not None and not durable.wait():
        return ToolOutcome(None, "not called: its start was not recorded", key, timezone.now(), 0)
    return invoke_tool(spec, args, key=key, approval=approval, step_pk=step_pk)


def reconcile_call(spec: ToolSpec, key: str) -> ToolOutcome:
    """Ask a destructive tool's reconcile hook what became of the call with this key."""
    started_at = timezone.now()
    t0 = time.perf_counter()
    result: Any = None
    error = ""
    try:
        assert spec.reconcile is not None
        answer = spec.reconcile(key)
        result = None if answer is None else _jsonable(answer)[0]
    except BaseException as exc:
        error = error_text(exc)
    finally:
        if connection.connection is not None:
            connection.close()
    return ToolOutcome(result, error, key, started_at, (time.perf_counter() - t0) * 1000)


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
        self.rng = random.Random()
        # Calls past their time limit whose outcome is still to come: call -> its attempt.
        self.overdue: dict[Call, int] = {}
        # Calls given up on whose late outcome is still recorded if it comes: call -> step id.
        self.abandoned: dict[Call, int] = {}
        self.reconciles: dict[Call, int] = {}  # a tool's reconcile hook at work -> step id
        # Set once the loop has ended: replies then go on record directly (under late_lock).
        self.closed = False
        self.late_lock = threading.Lock()
        # Bumped whenever a destructive call starts or ends: a pure call's result may be reused
        # only if no effect could have happened since that call started.
        self.effects = 0
        self.pure_started: dict[int, int] = {}  # pure step id -> self.effects at its launch
        self.reusable = _reusable_results(plan_row, steps, advancer.registry)
        # Both only matter to destructive steps; a plan without any skips the queries.
        has_destructive = any(step.destructive for step in steps.values())
        # Destructive calls this run made or is making: call hash -> the step that holds it.
        self.destructive_keys = _destructive_keys(self.run.pk) if has_destructive else {}
        self.declined = declined_calls(self.run) if has_destructive else {}
        # Earlier plan versions' destructive calls, continued under their keys, not repeated.
        self.past_effects: list[PastEffect] = (
            effects_taken(self.run.pk, before_version=plan_row.version)
            if has_destructive and plan_row.version > 1
            else []
        )
        self.held_keys = (
            {s.idempotency_key for s in steps.values() if s.idempotency_key}
            if self.past_effects
            else set()
        )
        self.carried: set[int] = set()  # steps holding an earlier version's key, not yet called
        self.pool = tool_threads()
        self.awaiting: dict[int, dict[str, Any]] = {}  # step id -> resolved args
        # Steps launched but not yet called: (step, spec, args, key, approval).
        self.starting: list[tuple[Step, ToolSpec, dict[str, Any], str, Approval | None]] = []
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
        try:
            return self._execute()
        finally:
            if self.abandoned:
                self._hand_over_late_calls()

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
        late outcome of a call given up on goes onto its ToolCall row, as a fact of record."""
        step_id = self.abandoned.get(call)
        attempt = self.overdue.get(call)
        if step_id is None or attempt is None:
            return
        outcome = call.result()
        try:
            record_late_tool_call(
                step_id=self.steps[step_id].pk,
                attempt=attempt,
                late_result=outcome.result,
                late_error=outcome.error,
                late_arrived_at=timezone.now(),
            )
        except Exception:
            logger.exception("the late outcome of %s could not be recorded", self.steps[step_id])
        finally:
            connection.close()

    def _execute(self) -> bool:
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
                    self._start_launched(pool)  # retries due, already on record as started
                    continue
                for step_id in ready:
                    self._launch(step_id, pool)
                self._start_launched(pool)
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
                elif call in self.reconciles:
                    self._reconciled(call)
                elif call in self.abandoned:
                    self._collect_late(call)
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
        if step.tool == ASK_HUMAN:
            self._ask_human(step, args)
            return
        if call_hash in self.reusable:
            # A pure tool, the same arguments, and no effect since that call began: not rerun.
            result, origin = self.reusable[call_hash]
            self._finish_step(step, Outcome.SUCCEEDED, result=result, reused_from=origin)
            return
        if self.past_effects and spec.destructive and self._continue_past_effect(step, spec, args):
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
                if step_id in self.carried:
                    # Another call than the earlier version's: it gets a key of its own.
                    self.carried.discard(step_id)
                    self.held_keys.discard(step.idempotency_key)
                    step.idempotency_key = ""
        if not circuit_admits(step.tool):
            self._finish_step(step, Outcome.FAILED, error=CIRCUIT_OPEN_MESSAGE)
            return
        self._submit(step, spec, args, approval, pool)

    def _continue_past_effect(self, step: Step, spec: ToolSpec, args: dict[str, Any]) -> bool:
        """An earlier version made this very call: its key is kept, and if the effect happened
        (or may have) it is not made again. True if the step ended here."""
        past = next((e for e in self.past_effects if e.key == step.idempotency_key), None)
        if past is None and not step.idempotency_key:
            past = past_effect_for(
                self.call_hashes[step.step_id],
                past=self.past_effects,
                held=self.held_keys,
                repeat=step.repeat,
            )
        if past is None:
            return False
        if step.idempotency_key != past.key:
            step.idempotency_key = past.key  # before any approval or call, as _submit would
            self.held_keys.add(past.key)
            self.recorder.step_changed(step, "idempotency_key")
        if step.attempts == 0:
            self.carried.add(step.step_id)
        if past.state == EFFECT_DONE:
            # Done in an earlier version: its result stands, no approval is asked again.
            self._finish_step(step, Outcome.SUCCEEDED, result=past.result, reused_from=past.origin)
            return True
        if past.state != EFFECT_UNKNOWN:
            return False  # it did not act: made again under the same key, on its own approval
        outcome = self._reconcile_now(spec, past.key) if spec.reconcile is not None else None
        if outcome is not None and not outcome.error and outcome.result is not None:
            self.recorder.event("step_reconciled", step=step.step_id, tool=step.tool)
            self._finish_step(
                step, Outcome.SUCCEEDED, result=outcome.result, reused_from=past.origin
            )
            return True
        error = (
            f"outcome unknown: the identical call of {past.origin} may have acted, so it was not "
            "made again (same idempotency key)"
        )
        self._finish_step(step, Outcome.FAILED, error=error)
        return True

    def _reconcile_now(self, spec: ToolSpec, key: str) -> ToolOutcome | None:
        """Ask the reconcile hook about an earlier version's call, waiting up to the tool's limit.

        Rare (a replan after an unknown outcome), so the loop waits here rather than tracking it.
        """
        answered: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self.pool.submit(reconcile_call, spec, key, reply=answered.put)
        try:
            outcome: ToolOutcome = answered.get(
                timeout=spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
            ).result()
        except queue.Empty:
            return None
        return outcome

    def _submit(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        approval: Approval | None,
        pool: ToolThreads,
    ) -> None:
        if self.lease.past_deadline():
            # Paused past the lease (or its keeper found it lost): another worker may hold
            # the run now, so nothing more may start here.
            raise LeaseLost(f"run {self.run.pk}: lease {self.lease.token} is past its deadline")
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
        if spec.destructive:
            self._effect_may_happen()
        elif spec.pure:
            self.pure_started[step.step_id] = self.effects
        self.recorder.event(
            "step_started",
            step=step.step_id,
            tool=step.tool,
            round=step.round,
            attempt=step.attempts,
            args=args,
        )
        self.starting.append((step, spec, args, key, approval))

    def _start_launched(self, pool: ToolThreads) -> None:
        """Call the tools of the steps just launched, each once its attempt is on record.

        One commit for everything launched together, handed to the recorder at once: the
        calls' threads wait for it, this one does not. So the audit never misses a call that
        happened (a destructive call's attempt and key, an impure read's step_started), and a
        lost lease or database stops every call of the round before it starts. Pure calls do
        not wait: calling one again is harmless, and the wait is most of a short one's cost.
        """
        starting, self.starting = self.starting, []
        if not starting:
            return
        durable = None
        if not all(spec.pure and not spec.destructive for _, spec, *_ in starting):
            durable = self.recorder.flush_durable()
        for step, spec, args, key, approval in starting:
            timeout = spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
            call = pool.submit(
                invoke_once_recorded,
                None if spec.pure and not spec.destructive else durable,
                spec,
                args,
                key=key,
                approval=approval,
                step_pk=step.pk,
                reply=self._reply,
            )
            self.inflight[call] = step.step_id
            self.calls[step.step_id] = (spec, args, approval)
            heapq.heappush(self.deadlines, (time.monotonic() + timeout, step.step_id, call))

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

    def _effect_may_happen(self) -> None:
        """A destructive call starts or ends: earlier reads may no longer hold."""
        self.effects += 1
        self.reusable.clear()

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

    def _ask_human(self, step: Step, args: dict[str, Any]) -> None:
        """A question for a person: its answer is the result; the run parks until it comes.

        Never called as a tool and never reused: each ask_human step has its own question.
        """
        question = HumanQuestion.objects.filter(step=step).first()
        if question is not None and question.state == HumanQuestion.State.ANSWERED:
            step.started_at = step.started_at or question.asked_at
            self.recorder.step_changed(step, "started_at")
            self._finish_step(step, Outcome.SUCCEEDED, result=answer_value(question.answer))
            return
        if question is not None and question.state == HumanQuestion.State.EXPIRED:
            self._finish_step(step, Outcome.FAILED, error=question_expired_error())
            return
        self.awaiting[step.step_id] = args
        step.status = Step.Status.AWAITING_APPROVAL
        self.recorder.step_changed(step, "status")
        if question is not None:
            return  # asked before this worker took the run: still waiting
        choices = [str(choice) for choice in args.get("choices") or []]
        audience = str(args.get("audience") or "author")
        self.recorder.question_asked(
            HumanQuestion(
                run_id=self.run.pk,
                step=step,
                question=str(args["question"]),
                choices=choices,
                audience=audience,
            )
        )
        self.recorder.event(
            "question_asked",
            step=step.step_id,
            question=str(args["question"]),
            choices=choices,
            audience=audience,
        )

    def _decided(self) -> list[int]:
        """Steps awaiting a person whose approval was decided or whose question was answered."""
        asked = [step_id for step_id in self.awaiting if self.steps[step_id].tool == ASK_HUMAN]
        answered = set(
            HumanQuestion.objects.filter(step__in=[self.steps[step_id].pk for step_id in asked])
            .exclude(state=HumanQuestion.State.PENDING)
            .values_list("step__step_id", flat=True)
            if asked
            else ()
        )
        return [
            step_id
            for step_id, args in sorted(self.awaiting.items())
            if step_id in answered
            or (
                step_id not in asked
                and approval_gate(step=self.steps[step_id], resolved_args=args).verdict
                in (Verdict.APPROVED, Verdict.REJECTED)
            )
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
        self._start_launched(pool)
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
        if step.destructive:
            self._effect_may_happen()
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
        payload: dict[str, Any] = {"step": step.step_id, "tool": step.tool, "attempt": attempt}
        payload["arrived_at"] = arrived_at.isoformat()
        if outcome.error:
            payload["error"] = outcome.error
        else:
            payload["result"] = outcome.result
        self.recorder.event("tool_call_late", **payload)

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


def answer_value(answer: str) -> Any:
    """A person's answer as a step result: a number when it reads as one, else the text."""
    text = answer.strip().replace(",", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return answer
    return number if math.isfinite(number) else answer


def _destructive_keys(run_id: int) -> dict[str, int]:
    """The run's destructive calls (by call hash), each with the step (pk) that first made it."""
    taken = Step.objects.filter(plan__run_id=run_id, destructive=True).exclude(idempotency_key="")
    keys = {
        args_sha256(tool, args or {}): pk
        for tool, args, pk in taken.order_by("-pk").values_list("tool", "resolved_args", "pk")
    }
    # Calls made before steps kept their keys: the first step to call wins.
    made = ToolCall.objects.filter(run_id=run_id, step__destructive=True).order_by("-pk")
    keys.update(
        (args_sha256(tool, args), step_pk)
        for tool, args, step_pk in made.values_list("tool", "args", "step_id")
    )
    return keys


def _reusable_results(
    plan_row: PlanRow, steps: dict[int, Step], registry: dict[str, ToolSpec]
) -> dict[str, tuple[Any, str]]:
    """Finished pure calls of this run that no effect may have changed: hash -> (result, origin).

    A result counts only if its call began after every destructive call of the run had ended.
    """
    pure = {name for name, spec in registry.items() if spec.pure}
    candidates = [(step, f"step {step.step_id}") for step in steps.values()]
    destructive = [step for step in steps.values() if step.destructive]
    if plan_row.version > 1:  # earlier versions are read only after a replan
        earlier = Step.objects.filter(
            plan__run_id=plan_row.run_id, plan__version__lt=plan_row.version
        )
        succeeded = earlier.filter(status=Step.Status.SUCCEEDED, tool__in=pure)
        candidates += [
            (step, f"plan v{step.plan.version} step {step.step_id}")
            for step in succeeded.select_related("plan")
        ]
        destructive += list(earlier.filter(destructive=True, attempts__gt=0))
    candidates = [
        (step, origin)
        for step, origin in candidates
        if step.tool in pure
        and step.status == Step.Status.SUCCEEDED
        and not step.reused_from
        and step.started_at is not None
    ]
    if not candidates:
        return {}
    last_effect: datetime | None = None
    for step in destructive:
        if step.attempts == 0:
            continue
        if step.finished_at is None:
            return {}  # an effect that may still be happening: no earlier read is known to hold
        if last_effect is None or step.finished_at > last_effect:
            last_effect = step.finished_at
    return {
        args_sha256(step.tool, step.resolved_args or step.args): (step.result, origin)
        for step, origin in candidates
        if last_effect is None or (step.started_at is not None and step.started_at > last_effect)
    }
