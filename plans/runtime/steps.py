"""Running a plan's steps: each starts as soon as its dependencies are done, in parallel.

Tool calls run on the shared tool threads; destructive ones pass the approval gate
(plans.runtime.gate) first and park the run when a decision is missing. StepsExecution is
this loop with its parts: launching (plans.runtime.launching) and the calls in flight
(plans.runtime.inflight), over a shared state (plans.runtime.steps_state).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from datetime import datetime
from typing import Any

from plans.engine import (
    Outcome,
    PastEffect,
    Scheduler,
    args_sha256,
)
from plans.journal.events import LeaseLost
from plans.models import Approval, Step, ToolCall
from plans.models import Plan as PlanRow
from plans.runtime.inflight import CallsInFlight
from plans.runtime.launching import Launching
from plans.runtime.planning import declined_calls, effects_taken, plan_to_engine
from plans.runtime.steps_state import CANCEL_POLL_S, DECISION_POLL_S, Advancer
from plans.runtime.tool_threads import Call, tool_threads
from plans.tools import ToolSpec
from plans.tools.results import RunResults


class StepsExecution(Launching, CallsInFlight):
    """Runs a plan's steps as soon as their dependencies finish, up to the run's parallelism."""

    def __init__(self, advancer: Advancer, plan_row: PlanRow, steps: dict[int, Step]) -> None:
        plan = plan_to_engine(steps.values())
        self.advancer = advancer
        self.lease = advancer.lease
        self.recorder = advancer.recorder
        self.run = advancer.run
        self.plan = plan
        self.steps = steps
        # Steps a reviewer sent back for changes: declined, but not as a verdict.
        self.changes_requested = {r.get("step") for r in plan_row.change_requests}
        self.scheduler = Scheduler(
            plan, run_dependants_of_failures=self.run.goal.run_dependants_of_failures
        )
        self.results: dict[int, Any] = {}
        self.held_results = RunResults(self.run.pk, version=plan_row.version, current=steps)
        self.inflight: dict[Call, int] = {}  # call -> step id
        self.completed: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self.deadlines: list[tuple[float, int, Call]] = []  # a heap
        self.retries: list[tuple[float, int]] = []  # a heap of (due, step id)
        self.cancel_read_at = 0.0
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
        # Destructive steps whose first request waits for the round's previews, taken at once.
        self.requesting: list[tuple[Step, ToolSpec, dict[str, Any]]] = []
        self.round_left: dict[int, int] = {}
        self.rounds_started: set[int] = set()
        for step in steps.values():
            self.round_left[step.round] = self.round_left.get(step.round, 0) + 1
        self._restore()

    def _cancel_during_backoff(self) -> bool:
        """Whether a cancel is recorded while retries wait: read when one comes due, and every
        CANCEL_POLL_S before, so a cancel does not wait out a long backoff."""
        if not self.retries:
            return False
        now = time.monotonic()
        if self.retries[0][0] > now and now - self.cancel_read_at < CANCEL_POLL_S:
            return False
        self.cancel_read_at = now
        return self.advancer.cancel_recorded()

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

    def execute(self) -> bool:
        """Run until every step finished (False) or only approvals remain (True: parked)."""
        try:
            return self._execute()
        finally:
            if self.abandoned:
                self._hand_over_late_calls()

    def _execute(self) -> bool:
        pool = self.pool
        last_poll = time.monotonic()
        while True:
            if self.lease.lost.is_set():
                # Its heartbeat found the lease expired or taken: stop starting anything now.
                raise LeaseLost(f"run {self.run.pk}: lease {self.lease.token} was lost")
            cancelled = self.advancer.cancel_known
            if not cancelled:
                if self._cancel_during_backoff():
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
