"""The worker's side of plans: asking the planner and the replanner, the engine's view of a
stored plan, what reviewers declined and what earlier versions' effects did, ReAct's steps.

Checking, storing, reading and deciding plans are services (plans.services.plans).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from plans import engine
from plans.bulk import rows_where
from plans.journal.events import append_events
from plans.journal.leases import Lease
from plans.llm import Completion, ModelRequest, model_for
from plans.llm.prompts import (
    HeldLimits,
    data_text,
    planner_request,
    repair_request,
    replan_request,
)
from plans.models import Plan, Run, Step
from plans.services.plans import plan_parse_and_check, plan_store
from plans.tools import ToolSpec, get_registry, tool_catalog_for_prompt
from plans.tools.results import RESULT_SLICE


def plan_steps(plan: Plan) -> dict[int, Step]:
    """The plan's steps by their plan-local id."""
    return {step.step_id: step for step in rows_where(Step, plan=plan.pk, order_by="step_id")}


def plan_to_engine(steps: Iterable[Step]) -> engine.Plan:
    """The engine's plan made of a stored plan's steps."""
    return engine.Plan(
        steps=tuple(
            engine.PlanStep(
                id=step.step_id,
                tool=step.tool,
                args=step.args,
                depends_on=tuple(step.depends_on),
                repeat=step.repeat,
            )
            for step in sorted(steps, key=lambda step: step.step_id)
        )
    )


def plan_from_completion(
    completion: Completion, request: ModelRequest, *, max_steps: int | None
) -> tuple[engine.Plan | None, list[str], Any]:
    """The planner's reply parsed and checked; a reply cut off or refused says so first."""
    if completion.stop_reason == "max_tokens":
        return (
            None,
            [
                f"the planner's reply was cut off at its max_tokens limit ({request.max_tokens:,} "
                "tokens) before the plan was complete"
            ],
            None,
        )
    if completion.stop_reason == "refusal":
        return None, ["the model refused to plan this goal (stop reason: refusal)"], None
    if completion.stop_reason in ("tool_use", "pause_turn") and not completion.text.strip():
        return (
            None,
            [
                "the planner replied with a tool call instead of a JSON plan "
                f"(stop reason: {completion.stop_reason})"
            ],
            None,
        )
    return plan_parse_and_check(completion.text, max_steps=max_steps)


@dataclass(frozen=True)
class DirectAnswer:
    """The router's answer to a goal that needs no tool: the run ends with it, unplanned."""

    text: str


def direct_answer(data: Any) -> str:
    """The answer a first reply gives instead of a plan ({"steps": [], "answer": ...}), or ""."""
    if not isinstance(data, dict) or data.get("steps") != [] or data.get("reason"):
        return ""
    answer = data.get("answer")
    return answer.strip() if isinstance(answer, str) else ""


def goal_plan_request(goal: str, *, model: str) -> ModelRequest:
    """The first planning call for a goal, with this deployment's tools, step limit and router."""
    max_steps = settings.AGENTSITE_MAX_PLAN_STEPS
    registry = get_registry()
    router = bool(settings.AGENTSITE_ROUTER)
    return planner_request(
        goal=goal,
        catalog=prompt_catalog(registry),
        max_steps=max_steps,
        model=model,
        reply_schema=engine.plan_json_schema(registry, max_steps=max_steps, direct_answer=router),
        router=router,
    )


def first_reply_route(data: Any, problems: list[str], *, router: bool) -> tuple[str, str]:
    """Where the planner's first reply goes, (route, answer): a plan (to repair if it has
    problems), the router's direct answer (its text), or a refusal (never repaired)."""
    answer = direct_answer(data) if router and problems else ""
    if answer:
        return Run.Route.ANSWER, answer
    if isinstance(data, dict) and data.get("steps") == [] and data.get("reason"):
        return Run.Route.REFUSE, ""
    return Run.Route.PLAN, ""


def plan_repair_request(
    request: ModelRequest, completion: Completion, problems: list[str]
) -> ModelRequest:
    """The one repair round: the problems go back to the model once, with room for a longer
    plan if the first was cut off at its token limit."""
    return repair_request(
        request,
        bad_output=completion.text,
        problems=problems,
        max_tokens=request.max_tokens * 2 if completion.stop_reason == "max_tokens" else None,
    )


def plan_from_planner(
    *,
    run: Run,
    call_model: Callable[[ModelRequest], Completion | None],
    lease: Lease | None,
) -> Plan | DirectAnswer | None:
    """Ask the model for a plan, with one repair round; None if a model call ended the run.

    With the router on (AGENTSITE_ROUTER), the first reply may answer a goal that needs no tool
    (a DirectAnswer, for the caller to finish the run with) or refuse it; the decision is kept
    on the run and in a "routed" event.
    """
    request = goal_plan_request(run.goal.text, model=model_for("plan"))
    completion = call_model(request)
    if completion is None:
        return None
    max_steps = request.metadata["max_steps"]
    plan, problems, data = plan_from_completion(completion, request, max_steps=max_steps)
    raw_output = completion.text
    route, answer = first_reply_route(data, problems, router=request.metadata["router"])
    if request.metadata["router"]:
        run_route(run=run, route=route, lease=lease)
        if answer:
            return DirectAnswer(text=answer)
    if problems and route == Run.Route.PLAN:
        repair = plan_repair_request(request, completion, problems)
        completion = call_model(repair)
        if completion is None:
            return None
        raw_output = completion.text
        plan, problems, _ = plan_from_completion(completion, repair, max_steps=max_steps)
    return plan_store(
        run=run, raw_output=raw_output, plan=plan, problems=problems, source="planner", lease=lease
    )


def run_route(*, run: Run, route: str, lease: Lease | None) -> None:
    """The router's decision, on the run and in its event log."""
    run.route = route
    append_events(
        run.pk,
        [("routed", {"route": route})],
        lease_token=lease.token if lease else None,
        run_fields={"route": route},
    )


def plan_from_replanner(
    *,
    run: Run,
    current: Plan,
    outcomes: list[dict[str, Any]],
    call_model: Callable[[ModelRequest], Completion | None],
    lease: Lease | None,
    change_requests: list[dict[str, Any]] | None = None,
) -> Plan | None:
    """A new plan version after failures or reviewers' requests for changes; None if a model
    call ended the run."""
    max_steps = settings.AGENTSITE_MAX_PLAN_STEPS
    registry = get_registry()
    request = replan_request(
        goal=run.goal.text,
        # As the plan call's, so the two requests keep one cached prefix (unless a result is
        # held by reference: then result_slice joins the catalog).
        catalog=prompt_catalog(registry, held=any_held(outcomes)),
        reply_schema=engine.plan_json_schema(
            registry, max_steps=max_steps, direct_answer=bool(settings.AGENTSITE_ROUTER)
        ),
        router=bool(settings.AGENTSITE_ROUTER),
        max_steps=max_steps,
        model=model_for("replan"),
        plan={"steps": [_step_json(step) for step in current.steps.all()]},
        outcomes=outcomes,
        change_requests=change_requests or [],
        effects_done=effects_done(run.pk, before_version=current.version + 1),
        held=held_limits(),
    )
    completion = call_model(request)
    if completion is None:
        return None
    plan, problems, _ = plan_from_completion(completion, request, max_steps=max_steps)
    problems += _redeclined_calls(run, plan)
    return plan_store(
        run=run,
        raw_output=completion.text,
        plan=plan if not problems else None,
        problems=problems,
        source="replan",
        lease=lease,
        ends_run_if_invalid=False,
    )


def _redeclined_calls(run: Run, plan: engine.Plan | None) -> list[str]:
    """A replan may not propose again a destructive call a reviewer declined."""
    if plan is None:
        return []
    declined = declined_calls(run)
    return [
        f"step {step.id}: a reviewer declined {step.tool} with these arguments; "
        "it may not be proposed again"
        for step in plan.steps
        if engine.args_sha256(step.tool, step.args) in declined
    ]


def declined_calls(run: Run) -> dict[str, str]:
    """The calls reviewers declined in this run: args hash -> the reviewer's reason."""
    return {
        engine.args_sha256(tool, args): reason
        for tool, args, reason in run.approvals.filter(decision="rejected").values_list(
            "tool", "requested_args", "reason"
        )
    }


def effects_taken(run_id: int, *, before_version: int) -> list[engine.PastEffect]:
    """The destructive calls plan versions before this one made, one per key, in order of use."""
    steps = (
        Step.objects.filter(plan__run_id=run_id, plan__version__lt=before_version, destructive=True)
        .exclude(idempotency_key="")
        .select_related("plan")
        .prefetch_related("tool_calls")
        .order_by("plan__version", "step_id")
    )
    records = []
    for step in steps:
        calls = [
            engine.AttemptRecord(
                error=call.error,
                # A destructive call past its limit is awaited, and says so, not given up on.
                timed_out="outcome unknown" in call.error,
                late_arrived=call.late_arrived_at is not None,
                late_error=call.late_error,
                late_result=call.late_result,
            )
            for call in sorted(step.tool_calls.all(), key=lambda call: call.attempt)
        ]
        known = engine.effect_state(
            succeeded=step.status == Step.Status.SUCCEEDED, attempts=step.attempts, calls=calls
        )
        if known is None:
            continue
        state, late_result = known
        records.append(
            engine.PastEffect(
                call=engine.args_sha256(step.tool, step.resolved_args or step.args),
                key=step.idempotency_key,
                state=state,
                result=step.result if step.status == Step.Status.SUCCEEDED else late_result,
                origin=step.reused_from or f"plan v{step.plan.version} step {step.step_id}",
                tool=step.tool,
                args=step.resolved_args or step.args,
            )
        )
    return engine.past_effects(records)


def effects_done(run_id: int, *, before_version: int) -> list[dict[str, Any]]:
    """The destructive calls that took effect in versions before this one, as prompts show them."""
    return [
        {"tool": e.tool, "args": e.args, "result": e.result, "origin": e.origin}
        for e in effects_taken(run_id, before_version=before_version)
        if e.state == engine.EFFECT_DONE
    ]


def step_outcomes(steps: dict[int, Step], *, version: int | None = None) -> list[dict[str, Any]]:
    """Each step's call and outcome, in step order: what the answer and replan prompts show;
    with the steps' plan version, each carries the ref result_slice reads its result by."""
    return [
        {
            "id": s.step_id,
            **({"ref": engine.held_ref(version, s.step_id)} if version is not None else {}),
            "tool": s.tool,
            "args": s.effective_args,
            "status": s.status,
            "result": s.result,
            "error": s.error,
            # An earlier version's call whose result was taken, not made again.
            **({"reused_from": s.reused_from} if s.reused_from else {}),
        }
        for s in sorted(steps.values(), key=lambda s: s.step_id)
    ]


def final_status(steps: Any) -> str:
    statuses = {s.status for s in steps}
    if Step.Status.BLOCKED in statuses:
        return Run.Status.BLOCKED
    if Step.Status.FAILED in statuses:
        return Run.Status.FAILED
    return Run.Status.COMPLETED


def _step_json(step: Step) -> dict[str, Any]:
    data = {"id": step.step_id, "tool": step.tool, "args": step.args, "depends_on": step.depends_on}
    if step.repeat:
        data["repeat"] = True
    return data


def plan_step_add(
    *, run: Run, plan: Plan, tool: str, args: Any, lease: Lease | None, error: str = ""
) -> Step:
    """Append one step (a ReAct turn's call) to the plan; with an error it is failed at once.

    The step depends on nothing (its arguments are written out) and is its own round.
    """
    registry = get_registry()
    spec = registry.get(tool)
    with transaction.atomic():
        last = plan.steps.aggregate(last=Max("step_id"))["last"] or 0
        step = Step.objects.create(
            plan=plan,
            step_id=last + 1,
            tool=engine.storable(tool)[:100],
            args=engine.storable(args) if isinstance(args, dict) else {},
            depends_on=[],
            destructive=spec.destructive if spec else False,
            round=last + 1,
            status=Step.Status.FAILED if error else Step.Status.PENDING,
            error=engine.storable(error),
            finished_at=timezone.now() if error else None,
        )
        run_fields: dict[str, Any] = {}
        if spec is not None and tool not in run.tools_used:
            run.tools_used = sorted({*run.tools_used, tool})
            run_fields["tools_used"] = run.tools_used
        payload = {"version": plan.version, "step": step.step_id, "tool": step.tool}
        events: list[tuple[str, dict[str, Any]]] = [
            ("step_planned", {**payload, "args": step.args})
        ]
        if error:
            events.append(("step_finished", {**payload, "status": step.status, "error": error}))
        append_events(
            run.pk, events, lease_token=lease.token if lease else None, run_fields=run_fields
        )
    return step


def held_limits() -> HeldLimits:
    """The settings' limits past which a result goes into a prompt as an extract by reference."""
    return HeldLimits(
        max_chars=settings.AGENTSITE_PROMPT_RESULT_MAX_CHARS,
        head_chars=settings.AGENTSITE_PROMPT_RESULT_HEAD_CHARS,
    )


def prompt_catalog(registry: dict[str, ToolSpec], *, held: bool = False) -> list[dict[str, Any]]:
    """The catalog a prompt shows: result_slice only when a result is held by reference, so
    every other plan call's cached prefix does not pay for a tool it cannot use."""
    shown = registry if held else {n: s for n, s in registry.items() if n != RESULT_SLICE}
    return tool_catalog_for_prompt(shown)


def any_held(outcomes: list[dict[str, Any]]) -> bool:
    """Whether a prompt shows one of these results as an extract by reference."""
    limit = settings.AGENTSITE_PROMPT_RESULT_MAX_CHARS
    return any(
        o.get("status") == Step.Status.SUCCEEDED and len(data_text(o.get("result"))) > limit
        for o in outcomes
    )
