"""The ReAct loop: one model call per step, each seeing every observation so far.

The second agent loop, for comparison with plan-and-execute over the same cases. It shares
everything but the loop: the run's advancer makes and records each model call (budgets,
ModelCall rows, costs), each chosen call is a step of the run's single "react" plan, and the
step runs through StepsExecution, so the registry, the approval gate, retries, circuits and
the tool ledger are the very same. A step waiting for a reviewer parks the run as usual.
"""

from __future__ import annotations

from typing import Any, Protocol

from django.conf import settings

from plans import engine
from plans.guards.redaction import redact
from plans.journal.events import publish_text
from plans.llm import Completion, ModelRequest, model_for
from plans.llm.prompts import react_request
from plans.models import Run, Step
from plans.runtime.planning import (
    any_held,
    final_status,
    held_limits,
    plan_step_add,
    plan_steps,
    prompt_catalog,
    step_outcomes,
)
from plans.runtime.steps import StepsExecution
from plans.runtime.steps_state import Advancer
from plans.selectors.plans import plan_current
from plans.services.plans import plan_store

REACT_SOURCE = "react"


def react_max_steps() -> int:
    """Tool calls a ReAct run may make before it must answer (AGENTSITE_REACT_MAX_STEPS)."""
    return int(settings.AGENTSITE_REACT_MAX_STEPS)


class LoopAdvancer(Advancer, Protocol):
    """What the loop uses of its run's advancer (plans.runtime.advance.RunAdvancer), besides
    what the steps use: the run's start, model calls, the answer's check and the end."""

    def mark_running(self) -> None: ...

    def call_model(self, request: ModelRequest, *, on_text: Any = None) -> Completion | None: ...

    def check_answer(self, steps: dict[int, Step]) -> None: ...

    def finish(self, status: str) -> str: ...


class ReactLoop:
    """Advances a ReAct run: ask for the next call, run it, feed the observation back."""

    def __init__(self, advancer: LoopAdvancer) -> None:
        self.advancer = advancer
        self.run = advancer.run
        self.recorder = advancer.recorder
        self._catalogs: dict[bool, list[dict[str, Any]]] = {}

    def advance(self) -> str:
        advancer, run = self.advancer, self.run
        plan_row = plan_current(run)
        if plan_row is None:
            plan_row = plan_store(
                run=run,
                raw_output="",
                plan=engine.Plan(steps=()),
                problems=[],
                source=REACT_SOURCE,
                lease=advancer.lease,
            )
        advancer.mark_running()
        cap = react_max_steps()
        while True:
            steps = plan_steps(plan_row)
            unfinished = any(step.status not in Step.FINISHED for step in steps.values())
            # The steps' outcomes land on these rows; the recorder commits them later.
            if unfinished and StepsExecution(advancer, plan_row, steps).execute():
                return Run.Status.AWAITING_APPROVAL
            if advancer.cancel_known:
                return advancer.finish(Run.Status.CANCELLED)
            final = len(steps) >= cap
            # Each call's outcome with its reference: a large observation goes into the prompt
            # as an extract that result_slice reads on from, as in the answer prompt.
            actions = step_outcomes(steps, version=plan_row.version)
            request = react_request(
                goal=run.goal.text,
                catalog=self._catalog(held=any_held(actions)),
                actions=actions,
                model=model_for("act"),
                final=final,
                held=held_limits(),
            )
            completion = advancer.call_model(request)
            if completion is None:
                return run.status  # the budget or an error ended the run
            reply, problem = _reply(completion.text)
            if "answer" in reply:
                return self._answer(str(reply["answer"]), steps)
            if final:
                run.error = f"the ReAct loop reached its cap of {cap} tool calls without answering"
                self.recorder.run_changed(error=run.error)
                return advancer.finish(Run.Status.FAILED)
            self.recorder.flush(wait=True)  # the turn's model call is on record before its step
            plan_step_add(
                run=run,
                plan=plan_row,
                tool=str(reply.get("tool") or "(none)"),
                args=reply.get("args") if isinstance(reply.get("args"), dict) else {},
                lease=advancer.lease,
                error=problem,
            )

    def _catalog(self, *, held: bool) -> list[dict[str, Any]]:
        """The tools offered: result_slice only once an observation is held by reference."""
        if held not in self._catalogs:
            self._catalogs[held] = prompt_catalog(self.advancer.registry, held=held)
        return self._catalogs[held]

    def _answer(self, text: str, steps: dict[int, Step]) -> str:
        advancer = self.advancer
        answer = redact(engine.storable(text))
        publish_text(self.run.pk, "answer_delta", answer)
        self.run.answer = answer
        self.recorder.run_changed(answer=answer)
        self.recorder.event("answer_finished", text=answer)
        advancer.check_answer(steps)
        return advancer.finish(final_status(steps.values()))


def _reply(text: str) -> tuple[dict[str, Any], str]:
    """The turn's JSON object, and what is wrong with it (which becomes the observation)."""
    try:
        data = engine.parse_planner_output(text)
    except engine.PlanParseError as error:
        return {}, f"the reply was not one JSON object: {error}"
    if "answer" in data:
        return data, ""
    tool = data.get("tool")
    if not isinstance(tool, str) or not tool:
        return (
            data,
            'the reply named no tool: reply {"tool": ..., "args": {...}} or {"answer": ...}',
        )
    if not isinstance(data.get("args", {}), dict):
        return data, f"the arguments for {tool} must be a JSON object"
    return data, ""
