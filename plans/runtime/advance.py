"""Advancing a run: plan it, run its steps (plans.runtime.steps), park, write the answer.

One worker advances a run at a time (it holds the lease). The advancing thread schedules and
decides; tool calls run on the shared tool threads (plans.runtime.tool_threads), and the run's
writes are committed in batches by its recorder (plans.runtime.recorder).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, transaction
from django.utils import timezone

from plans.bulk import connection_wait, field_value, reload, rows_where
from plans.engine import (
    Budget,
    budget_problem,
    storable,
)
from plans.engine.citations import answer_check
from plans.guards.budgets import author_daily_problem, rate_limit_wait
from plans.guards.redaction import redact
from plans.journal.events import LeaseLost, append_events, publish_text
from plans.journal.leases import Heartbeat, Lease, lease_acquire, lease_hand_over, lease_release
from plans.journal.tasks import advance_run_task
from plans.llm import Completion, ModelError, ModelRequest, Usage, get_model, model_for
from plans.llm.pricing import cost_usd, estimate_cost_usd, prices_for
from plans.llm.prompts import answer_request
from plans.models import Goal, ModelCall, Run, Step
from plans.models import Plan as PlanRow
from plans.runtime import telemetry
from plans.runtime.planning import (
    DirectAnswer,
    effects_done,
    final_status,
    held_limits,
    plan_from_planner,
    plan_from_replanner,
    plan_steps,
    step_outcomes,
)
from plans.runtime.react import ReactLoop
from plans.runtime.recorder import RunRecorder
from plans.runtime.steps import StepsExecution
from plans.runtime.tool_calls import error_text
from plans.runtime.worker import waiting
from plans.selectors.plans import plan_current
from plans.tools import get_registry

logger = logging.getLogger(__name__)

# A run handed over after a database failure is queued again this much later.
HAND_OVER_DELAY_S = 1.0


def advance_run(run_id: int) -> str:
    """Advance the run as far as it can go; returns its status afterwards (or 'busy')."""
    try:
        lease = lease_acquire(run_id)
    except (OperationalError, InterfaceError) as error:
        logger.warning(
            "run %s: the database failed its lease (%s); left to the sweeper", run_id, error
        )
        connections.close_all()
        return "handed_over"
    if lease is None:
        return "busy"
    try:
        with Heartbeat(lease):
            advancer = RunAdvancer(run_id, lease)
            try:
                return advancer.advance()
            finally:
                advancer.recorder.close()
    except LeaseLost:
        logger.warning("run %s: lease lost; another worker carries on", run_id)
        return "lease_lost"
    except (OperationalError, InterfaceError) as error:
        # The database, not the run: nothing here says the run is wrong, so it is handed over
        # (its task is not a failure) and taken up again once the database answers.
        logger.warning("run %s: the database failed its advance (%s); handed over", run_id, error)
        _hand_over(lease)
        return "handed_over"
    except Exception as error:
        # Anything else would happen again on every take-up (a value the database refuses, a
        # bug): the run ends here, saying why, rather than being retried for ever.
        logger.exception("run %s: advancing it failed; it ends failed", run_id)
        return _end_after_crash(lease, error)
    finally:
        if not lease.released:
            try:
                lease_release(lease)
            except (OperationalError, InterfaceError) as error:
                # Its run is safe: the lease runs out by itself and the sweeper takes it up.
                logger.warning("run %s: lease not released (%s)", run_id, error)
                connections.close_all()


def _hand_over(lease: Lease) -> None:
    """Expire the lease and queue the run again, once the database answers; if it is still away
    at the lease's deadline, the lease runs out and the sweeper queues the run."""
    connections.close_all()
    lease.released = True  # handed over, not released: its token stays, expired
    task = advance_run_task
    # A blip: the server is back within the lease, and the task's outcome can be recorded.
    connection_wait(lease.valid_until)
    try:
        with transaction.atomic():
            if lease_hand_over(lease) and task.get_backend().supports_defer:
                # Shortly, not at once: the database may still be coming back.
                run_after = timezone.now() + timedelta(seconds=HAND_OVER_DELAY_S)
                task.using(run_after=run_after).enqueue(lease.run_id)
    except (OperationalError, InterfaceError) as error:
        logger.warning("run %s: left to the sweeper (%s)", lease.run_id, error)
        connections.close_all()


def _end_after_crash(lease: Lease, error: Exception) -> str:
    """Fail the run (fenced by its lease): unfinished steps are failed or skipped, on record."""
    message = f"the run stopped on an internal error: {error_text(error)}"
    now = timezone.now()
    with transaction.atomic():
        append_events(
            lease.run_id,
            [("run_finished", {"status": Run.Status.FAILED, "error": message})],
            lease_token=lease.token,
            run_fields={
                "status": Run.Status.FAILED,
                "error": message,
                "finished_at": now,
                "lease_token": None,
                "lease_expires_at": None,
            },
        )
        steps = Step.objects.filter(plan__run_id=lease.run_id)
        steps.filter(status=Step.Status.RUNNING).update(
            status=Step.Status.FAILED, error=message, finished_at=now
        )
        steps.filter(status__in=(Step.Status.PENDING, Step.Status.AWAITING_APPROVAL)).update(
            status=Step.Status.SKIPPED, error=message, finished_at=now
        )
    lease.released = True
    return Run.Status.FAILED


class RunAdvancer:
    def __init__(self, run_id: int, lease: Lease) -> None:
        # Prepared SQL: the ORM's query building costs ~1 ms of a run's ~4 ms fixed cost here.
        (self.run,) = rows_where(Run, id=run_id)
        (self.run.goal,) = rows_where(Goal, id=self.run.goal_id)
        self.lease = lease
        self.recorder = RunRecorder(lease)
        self.registry = get_registry()

    # --- the whole run -------------------------------------------------------------------

    def advance(self) -> str:
        self._count_interrupted_model_calls()
        if self.run.goal.agent == Goal.Agent.REACT:
            return ReactLoop(self).advance()
        run = self.run
        plan_row = plan_current(run)
        if plan_row is None:
            if not self._plan():
                return run.status
            plan_row = plan_current(run)
            assert plan_row is not None
        self.mark_running()
        while True:
            cancelled = self.cancel_known
            # A cancelled run skips its steps below rather than waiting for its plan's approval.
            if not cancelled and self._needs_plan_approval(plan_row):
                if plan_row.decision == "rejected":
                    replanned = self._replan_on_request(plan_row)
                    if replanned is not None:
                        plan_row = replanned
                        continue
                    if self.run.is_terminal:
                        return self.run.status  # a model call ended the run (budget, error)
                    self.run.error = f"a reviewer rejected plan v{plan_row.version}: " + (
                        plan_row.decision_reason
                    )
                    self.recorder.run_changed(error=self.run.error)
                    return self.finish(Run.Status.BLOCKED)
                if self._park_for_plan_approval(plan_row):
                    return Run.Status.AWAITING_PLAN_APPROVAL
                reload(plan_row)
                continue
            steps = plan_steps(plan_row)
            parked = StepsExecution(self, plan_row, steps).execute()
            if parked:
                return Run.Status.AWAITING_APPROVAL
            if self.cancel_known:  # read afresh as the steps ended
                return self.finish(Run.Status.CANCELLED)  # no replan, no answer
            if not self._may_replan(plan_row, steps):
                break
            replanned = self._replan(plan_row, steps)
            if replanned is None:
                return run.status  # a model call ended the run (budget, error)
            if not replanned.is_valid:
                break  # the answer is written from what is known
            plan_row = replanned
        if not self._answer(plan_row, steps):
            return run.status
        return self.finish(final_status(steps.values()))

    def _replan_on_request(self, plan_row: PlanRow) -> PlanRow | None:
        """A plan a reviewer sent back with instructions: its valid replan, else None."""
        steps = plan_steps(plan_row)
        if not self._may_replan(plan_row, steps):
            return None
        replanned = self._replan(plan_row, steps)
        if replanned is None or not replanned.is_valid:
            return None
        return replanned

    def mark_running(self) -> None:
        """The run starts, is taken up after a lost worker, or resumes: on record, and running."""
        run = self.run
        if run.started_at is None:
            run.started_at = timezone.now()
            self.recorder.run_changed(started_at=run.started_at)
            self.recorder.event("run_started")
        elif run.status == Run.Status.RUNNING:
            self.recorder.event("run_recovered", reason="the previous worker's lease expired")
        else:
            self.recorder.event("run_resumed")
        if run.status != Run.Status.RUNNING:
            self.set_status(Run.Status.RUNNING)

    def _needs_plan_approval(self, plan_row: PlanRow) -> bool:
        required = settings.AGENTSITE_REQUIRE_PLAN_APPROVAL or self.run.goal.require_plan_approval
        if not required and plan_row.source == PlanRow.Source.REPLAN and plan_row.parent_id:
            # Replanned on a reviewer's instructions: its diff is reviewed before anything runs.
            parent = PlanRow.objects.filter(pk=plan_row.parent_id)
            required = parent.exclude(change_requests=[]).exists()
        return required and plan_row.decision != "approved"

    def _park_for_plan_approval(self, plan_row: PlanRow) -> bool:
        """Wait, holding nothing, for a reviewer's decision on the plan; False if it came."""
        if self.run.status != Run.Status.AWAITING_PLAN_APPROVAL:
            self.recorder.event("plan_approval_requested", version=plan_row.version)

        return self.park(
            Run.Status.AWAITING_PLAN_APPROVAL,
            awaiting=f"plan v{plan_row.version}",
            decided=lambda: PlanRow.objects.filter(pk=plan_row.pk).exclude(decision="").exists(),
        )

    def park(
        self,
        status: str,
        *,
        awaiting: Any,
        decided: Callable[[], bool],
        questions: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Release the run (in this status) to wait for a decision; False if one raced in.

        questions names the awaited steps that wait for a person's answer, not a decision.

        decided() runs after the fenced update, which locks the run row: a decision either
        committed before it (and decided() sees it) or waits and then finds the run parked. A
        cancel committed before it ends the run instead of parking it.
        """
        self.recorder.flush(wait=True)
        try:
            with transaction.atomic():
                _, cancel_requested = append_events(
                    self.run.pk,
                    [
                        (
                            "run_parked",
                            {
                                "awaiting": awaiting,
                                **({"questions": questions} if questions else {}),
                            },
                        )
                    ],
                    lease_token=self.lease.token,
                    run_fields={"status": status, "lease_token": None, "lease_expires_at": None},
                )
                if cancel_requested:
                    self.run.cancel_requested = True
                    raise _DecisionRaced
                if decided():
                    raise _DecisionRaced
        except _DecisionRaced:
            return False
        self.run.status = status
        self.lease.released = True
        return True

    def _may_replan(self, plan_row: PlanRow, steps: dict[int, Step]) -> bool:
        """Replan a planner's plan after a failure or a reviewer's request for changes, at most
        AGENTSITE_MAX_REPLANS times per run."""
        # Requested while the run was parked: read afresh (prepared: every run's end reads it).
        plan_row.change_requests = field_value(PlanRow, plan_row.pk, "change_requests") or []
        failed = any(step.status == Step.Status.FAILED for step in steps.values())
        if not failed and not plan_row.change_requests:
            return False
        if self.run.plans.filter(source="file").exists():
            return False  # a plan given by a person is run as given
        return self.run.plans.filter(source="replan").count() < settings.AGENTSITE_MAX_REPLANS

    def _replan(self, plan_row: PlanRow, steps: dict[int, Step]) -> PlanRow | None:
        failed = sorted(s.step_id for s in steps.values() if s.status == Step.Status.FAILED)
        self.recorder.event(
            "replan_started",
            version=plan_row.version,
            failed_steps=failed,
            changes_requested=len(plan_row.change_requests),
        )
        self.recorder.flush(wait=True)
        return plan_from_replanner(
            run=self.run,
            current=plan_row,
            outcomes=step_outcomes(steps, version=plan_row.version),
            change_requests=plan_row.change_requests,
            call_model=self._call_model_and_flush,
            lease=self.lease,
        )

    def _plan(self) -> bool:
        """Ask the planner for a plan; False when the run ended here (invalid, budget, error)."""
        result = plan_from_planner(
            run=self.run,
            call_model=self._call_model_and_flush,
            lease=self.lease,
        )
        reload(self.run)
        if isinstance(result, DirectAnswer):
            self._answer_directly(result)
            return False
        return result is not None and result.is_valid and not self.run.is_terminal

    def _answer_directly(self, direct: DirectAnswer) -> None:
        """A goal the router found needs no tool: its one call's answer ends the run."""
        self.mark_running()
        self.run.answer = redact(storable(direct.text))
        self.recorder.run_changed(answer=self.run.answer)
        self.recorder.event("answer_finished", text=self.run.answer, direct=True)
        # No step ran, so any figure it states is flagged as held by no result.
        self.check_answer({})
        self.finish(Run.Status.COMPLETED)

    def _call_model_and_flush(self, request: ModelRequest) -> Completion | None:
        # The planner's call is on record before the plan it produced.
        completion = self.call_model(request)
        if completion is not None:
            self.recorder.flush(wait=True)
        return completion

    def _answer(self, plan_row: PlanRow, steps: dict[int, Step]) -> bool:
        request = answer_request(
            goal=self.run.goal.text,
            plan={"steps": [_step_json(s) for s in steps.values()]},
            outcomes=step_outcomes(steps, version=plan_row.version),
            model=model_for("answer"),
            effects_done=self._effects_not_carried(plan_row, steps),
            held=held_limits(),
        )
        run_id = self.run.pk
        completion = self.call_model(
            request,
            on_text=lambda text: publish_text(run_id, "answer_delta", text),
        )
        if completion is None:
            return False
        self.run.answer = redact(storable(completion.text))
        self.recorder.run_changed(answer=self.run.answer)
        incomplete = completion.incomplete
        if incomplete:
            # Not an answer to bank on: the partial text stays on record, the run is not done.
            self.recorder.event(
                "answer_incomplete",
                text=self.run.answer,
                reason=incomplete,
                stop_reason=completion.stop_reason,
            )
            self._fail(f"the answer is incomplete: {incomplete}")
            return False
        self.recorder.event("answer_finished", text=self.run.answer)
        self.check_answer(steps)
        return True

    def _effects_not_carried(
        self, plan_row: PlanRow, steps: dict[int, Step]
    ) -> list[dict[str, Any]]:
        """Effects of earlier versions no step of this one took over: the answer reports them."""
        if plan_row.version == 1:
            return []
        carried = {s.reused_from for s in steps.values() if s.destructive and s.reused_from}
        return [
            effect
            for effect in effects_done(self.run.pk, before_version=plan_row.version)
            if effect["origin"] not in carried
        ]

    def check_answer(self, steps: dict[int, Step]) -> None:
        """Mark the answer's citations valid or not and flag figures no step result holds."""
        checked = answer_check(self.run.answer, step_outcomes(steps))
        check = checked.as_json()
        self.run.answer_check = check
        self.recorder.run_changed(answer_check=check)
        # The run holds every span; the event only what the timeline says about them.
        self.recorder.event("answer_checked", **checked.summary())

    def finish(self, status: str) -> str:
        self.run.status = status
        self.run.finished_at = timezone.now()
        self.recorder.event("run_finished", status=status)
        self.recorder.flush(
            run_fields={
                "status": status,
                "finished_at": self.run.finished_at,
                "lease_token": None,
                "lease_expires_at": None,
            },
            wait=True,
        )
        self.lease.released = True
        if telemetry.observer is not None:
            telemetry.observer.run_finished(self.run)
        return status

    @property
    def cancel_known(self) -> bool:
        """Whether the last commit or the last read saw a cancel (no query)."""
        return self.recorder.cancel_requested or self.run.cancel_requested

    def cancel_recorded(self) -> bool:
        """Read now, not at the last commit: nothing new may start once a cancel is recorded."""
        if not self.cancel_known:
            self.run.cancel_requested = bool(field_value(Run, self.run.pk, "cancel_requested"))
        return self.cancel_known

    def set_status(self, status: str) -> None:
        self.run.status = status
        self.recorder.run_changed(status=status)
        self.recorder.event("run_status", status=status)

    # --- model calls ---------------------------------------------------------------------

    def call_model(self, request: ModelRequest, *, on_text: Any = None) -> Completion | None:
        """One model call, checked against the budget first and recorded with its cost."""
        run = self.run
        try:
            prices = prices_for(request.model)
        except ValueError as exc:  # a model missing from the price table is never called
            self._fail(f"model call for {request.purpose} not made: {exc}")
            return None
        estimate = estimate_cost_usd(request, prices)
        problem = budget_problem(
            budget=Budget(usd=run.budget_usd, tokens=run.budget_tokens),
            spent_usd=run.cost_usd,
            spent_tokens=run.total_tokens,
            next_call_usd=estimate,
            next_call_tokens=request.estimated_input_tokens() + request.max_tokens,
        ) or author_daily_problem(run, next_call_usd=estimate)
        if problem:
            self.run.error = problem
            self.recorder.run_changed(error=problem)
            self.recorder.event("budget_exhausted", purpose=request.purpose, message=problem)
            self.finish(Run.Status.BUDGET_EXHAUSTED)
            return None
        with waiting():  # a wait for the shared model-call rate holds no worker slot either
            limited = rate_limit_wait()
        if limited:
            self.recorder.event("rate_limited", purpose=request.purpose, message=limited)
            self._fail(f"model call for {request.purpose} not made: {limited}")
            return None
        if self.lease.past_deadline():
            raise LeaseLost(f"run {run.pk}: lease {self.lease.token} is past its deadline")
        call = self._model_call_started(request, prices, estimate)
        started = time.perf_counter()
        billed = None
        try:
            with waiting():  # the call's latency holds no worker slot
                completion = get_model().complete(request, on_text=on_text)
        except ModelError as exc:
            message = storable(str(exc))  # may quote the provider's reply
            billed = exc.usage
        except Exception as exc:
            # A model backend's own bug ends the run here; left to escape, the run would be
            # taken up and crash again on every sweep.
            logger.exception("run %s: the %s model call raised", run.pk, request.purpose)
            message = error_text(exc)
        else:
            self._record_model_call(call, request, completion, prices, completion.latency_ms)
            return completion
        latency = int((time.perf_counter() - started) * 1000)
        self._record_model_call(
            call, request, None, prices, latency_ms=latency, error=message, billed=billed
        )
        self._fail(f"model call for {request.purpose} failed: {message}")
        return None

    def _model_call_started(
        self, request: ModelRequest, prices: dict[str, float], estimate: Decimal
    ) -> ModelCall:
        """The call, on record at its estimate before it is made if it may be billed at all:
        a worker dying mid-call leaves a row that budgets and caps count."""
        call = ModelCall(
            run_id=self.run.pk,
            purpose=request.purpose,
            model=request.model,
            prices=prices,
            cost_usd=estimate,
            estimated_usd=estimate,
            latency_ms=0,
            state=ModelCall.State.STARTED,
        )
        if estimate > 0:  # a free model (offline) bills nothing a crash could hide
            self.recorder.model_call_started(call)
            self.recorder.event("model_call_started", purpose=request.purpose, model=call.model)
            self.recorder.flush(wait=True)
        return call

    def _count_interrupted_model_calls(self) -> None:
        """Calls a dead worker left started: billed by the provider, counted at their estimate."""
        left = rows_where(
            ModelCall, run=self.run.pk, state=ModelCall.State.STARTED
        )  # prepared: every advance
        if not left:
            return
        run = self.run
        for call in left:
            call.state = ModelCall.State.INTERRUPTED
            call.error = "the worker stopped during the call; counted at its estimate"
            run.cost_usd += call.cost_usd
            run.model_call_count += 1
            self.recorder.model_call(call)
            self.recorder.event(
                "model_call_interrupted",
                purpose=call.purpose,
                model=call.model,
                cost_usd=str(call.cost_usd),
                error=call.error,
            )
        self.recorder.run_changed(cost_usd=run.cost_usd, model_call_count=run.model_call_count)

    def _fail(self, error: str) -> None:
        """End the run as failed, saying why."""
        self.run.error = error
        self.recorder.run_changed(error=error)
        self.finish(Run.Status.FAILED)

    def _record_model_call(
        self,
        call: ModelCall,
        request: ModelRequest,
        completion: Completion | None,
        prices: dict[str, float],
        latency_ms: int,
        error: str = "",
        billed: Usage | None = None,
    ) -> None:
        usage = completion.usage if completion else billed
        tokens = {
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "cache_read_tokens": usage.cache_read_tokens if usage else 0,
            "cache_write_tokens": usage.cache_write_tokens if usage else 0,
        }
        cost = cost_usd(usage, prices) if usage else Decimal(0)
        call.model = completion.model if completion else request.model
        call.cost_usd = cost
        call.latency_ms = latency_ms
        call.error = error
        call.state = ModelCall.State.FINISHED
        call.cache_write_1h_tokens = usage.cache_write_1h_tokens if usage else 0
        call.web_search_requests = usage.web_search_requests if usage else 0
        call.web_fetch_requests = usage.web_fetch_requests if usage else 0
        for name, value in tokens.items():
            setattr(call, name, value)
        run = self.run
        for name, value in tokens.items():
            setattr(run, name, getattr(run, name) + value)
        run.cost_usd += cost
        run.model_call_count += 1
        self.recorder.model_call(call)
        if telemetry.observer is not None:
            telemetry.observer.model_call(run, call, requested_model=request.model)
        self.recorder.event(
            "model_call",
            purpose=request.purpose,
            model=call.model,
            cost_usd=str(cost),
            latency_ms=latency_ms,
            error=error,
            **tokens,
            totals={
                "tokens": run.total_tokens,
                "cost_usd": str(run.cost_usd),
                "model_calls": run.model_call_count,
            },
        )
        # Absolute values are safe: only the lease holder changes a run's totals.
        self.recorder.run_changed(
            **{name: getattr(run, name) for name in tokens},
            cost_usd=run.cost_usd,
            model_call_count=run.model_call_count,
        )


class _DecisionRaced(Exception):
    pass


def _step_json(step: Step) -> dict[str, Any]:
    return {"id": step.step_id, "tool": step.tool, "args": step.args, "depends_on": step.depends_on}
