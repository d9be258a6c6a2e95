"""Starting a step: resolve its arguments, check them, reuse a result, pass the approval gate,
or ask a person (ask_human); then hand the call to a tool thread."""

from __future__ import annotations

import heapq
import math
import queue
import time
from typing import Any

from django.conf import settings
from django.utils import timezone

from plans.engine import (
    EFFECT_DONE,
    EFFECT_UNKNOWN,
    Outcome,
    UnresolvedPlaceholder,
    args_sha256,
    blocked_result,
    check_args,
    past_effect_for,
    resolve,
)
from plans.guards.circuits import CIRCUIT_OPEN_MESSAGE, circuit_admits
from plans.journal.events import LeaseLost
from plans.models import Approval, HumanQuestion, Run, Step, ToolPreview
from plans.runtime import telemetry
from plans.runtime.gate import (
    GateDecision,
    Verdict,
    approval_gate,
    approval_request,
    approval_rule_payload,
    decided_by_rule_event,
)
from plans.runtime.recorder import Durable
from plans.runtime.steps_state import StepsState
from plans.runtime.tool_calls import (
    ToolOutcome,
    invoke_once_recorded,
    previews_take,
    reconcile_call,
)
from plans.runtime.tool_threads import Call, ToolThreads
from plans.runtime.worker import waiting
from plans.services.questions import question_expired_error
from plans.tools import ToolSpec
from plans.tools.human import ASK_HUMAN


class Launching(StepsState):
    """StepsExecution's launching part."""

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
        if not spec.destructive:
            self._call(step, spec, args, None, pool)
            return
        gate = approval_gate(step=step, resolved_args=args)
        if gate.verdict is Verdict.MISSING and call_hash in self.declined:
            # A reviewer declined this very call for another step: not asked again. A
            # request already made for this step itself is still the reviewer's to decide.
            reason = self.declined[call_hash]
            result = blocked_result(step.tool, reason)
            self._finish_step(step, Outcome.BLOCKED, result=result, error=reason)
            return
        if gate.verdict is Verdict.MISSING:
            if spec.preview is not None:
                # Asked with the round's other previewed requests, their hooks run at once.
                self.requesting.append((step, spec, args))
                return
            # Asked for the first time: the approval rules may decide it at once.
            gate = self._request_approval(step, spec, args)
        self._pass_gate(step, spec, args, gate, pool)

    def _pass_gate(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        gate: GateDecision,
        pool: ToolThreads,
    ) -> None:
        """A destructive step with its approval's verdict: called, blocked, or left waiting."""
        step_id = step.step_id
        decided = gate.verdict in (Verdict.APPROVED, Verdict.REJECTED)
        if decided and gate.approval is not None and telemetry.observer is not None:
            telemetry.observer.approval_waited(self.run, step, gate.approval)
        if gate.verdict is Verdict.REJECTED:
            assert gate.approval is not None
            reason = gate.approval.reason
            if gate.approval.decision == Approval.Decision.EXPIRED:
                result = f"BLOCKED: {step.tool} was not approved in time. {reason}. Do not retry."
            elif gate.approval.decided_by_rule:
                result = f"BLOCKED: {step.tool} was {reason}. Do not retry."
            else:
                result = blocked_result(step.tool, reason)
            self._finish_step(
                step,
                Outcome.BLOCKED,
                result=result,
                error=reason,
                changes_requested=step_id in self.changes_requested,
            )
            return
        if gate.verdict is not Verdict.APPROVED:
            self._await_approval(step, args)
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
        self._call(step, spec, args, approval, pool)

    def _call(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        approval: Approval | None,
        pool: ToolThreads,
    ) -> None:
        if not circuit_admits(step.tool):
            self._finish_step(step, Outcome.FAILED, error=CIRCUIT_OPEN_MESSAGE)
            return
        self._submit(step, spec, args, approval, pool)

    def _request_previewed(self, pool: ToolThreads) -> None:
        """Ask for the approvals launching put off for their previews: the hooks run at once on
        the tool threads (waited for here: each request's card needs its preview), then each
        request is made, and decided by a rule or left to a person, in launch order."""
        requesting, self.requesting = self.requesting, []
        wanted = [(spec, args, step.idempotency_key) for step, spec, args in requesting]
        with waiting():  # the hooks' wait: this run's worker slot serves others meanwhile
            taken = previews_take(wanted, pool=self.pool)
        for (step, spec, args), preview in zip(requesting, taken, strict=True):
            self._record_preview(step, preview, purpose=ToolPreview.Purpose.REQUEST)
            gate = self._request_approval(step, spec, args, preview=preview.preview)
            self._pass_gate(step, spec, args, gate, pool)

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

        One commit for everything launched together: made on this thread when the recorder's
        writer is idle (the calls then start without waiting on another thread), else handed
        to the writer, and the calls' threads wait for it. So the audit never misses a call
        that happened (a destructive call's attempt and key, an impure read's step_started),
        and a lost lease or database stops every call of the round before it starts. Pure
        calls go first and do not wait: calling one again is harmless, and the wait is most of
        a short one's cost.
        """
        if self.requesting:
            self._request_previewed(pool)
        starting, self.starting = self.starting, []
        if not starting:
            return
        waiting = [launch for launch in starting if not _calls_at_once(launch[1])]
        for step, spec, args, key, approval in starting:
            if _calls_at_once(spec):
                self._start_call(pool, None, step, spec, args, key, approval)
        if waiting:
            durable = self.recorder.flush_before_calls()
            for step, spec, args, key, approval in waiting:
                self._start_call(pool, durable, step, spec, args, key, approval)

    def _start_call(
        self,
        pool: ToolThreads,
        durable: Durable | None,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        key: str,
        approval: Approval | None,
    ) -> None:
        """Hand the call to a tool thread, to start once durable is committed (None: at once)."""
        timeout = spec.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
        call = pool.submit(
            invoke_once_recorded,
            durable,
            spec,
            args,
            key=key,
            approval=approval,
            step_pk=step.pk,
            results=self.held_results,
            reply=self._reply,
        )
        self.inflight[call] = step.step_id
        self.calls[step.step_id] = (spec, args, approval)
        heapq.heappush(self.deadlines, (time.monotonic() + timeout, step.step_id, call))

    def _request_approval(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        *,
        preview: dict[str, Any] | None = None,
    ) -> GateDecision:
        """Ask for an approval of this call (with its preview, taken already, if the tool has
        one): on record, decided by a rule or left pending."""
        approval = approval_request(
            run=self.run, step=step, spec=spec, resolved_args=args, preview=preview
        )
        self.recorder.approval_requested(approval)
        if approval.decision == Approval.Decision.PENDING:
            self.recorder.event(
                "approval_requested",
                step=step.step_id,
                tool=step.tool,
                round=step.round,
                args=args,
                preview=preview,
                **approval_rule_payload(approval),
            )
            return GateDecision(Verdict.PENDING, approval)
        # Decided as it was asked: nobody is asked (no request event, no e-mail), the audit
        # names the rule and its version.
        kind, payload = decided_by_rule_event(approval)
        self.recorder.event(kind, **payload)
        if approval.decision == Approval.Decision.APPROVED:
            return GateDecision(Verdict.APPROVED, approval)
        return GateDecision(Verdict.REJECTED, approval)

    def _await_approval(self, step: Step, args: dict[str, Any]) -> None:
        self.awaiting[step.step_id] = args
        step.status = Step.Status.AWAITING_APPROVAL
        self.recorder.step_changed(step, "status")

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
        """Release the run while it waits for reviewers or answers; False if one raced in."""
        questions = [
            {"step": step_id, "audience": str(args.get("audience") or "author")}
            for step_id, args in sorted(self.awaiting.items())
            if self.steps[step_id].tool == ASK_HUMAN
        ]
        return self.advancer.park(
            Run.Status.AWAITING_APPROVAL,
            awaiting=sorted(self.awaiting),
            decided=lambda: bool(self._decided()),
            questions=questions,
        )


def _calls_at_once(spec: ToolSpec) -> bool:
    """A pure tool's call starts without waiting for its step_started to be committed."""
    return spec.pure and not spec.destructive


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
