"""Replaying a past run on a model and prompt version: re-planned and re-answered, with the
run's recorded tool results standing in for the tools, and diffed against the original.

No tool is ever called: RecordedTools holds only the original's results, keyed by (tool,
canonical resolved arguments), and has no way to reach a tool's code.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from plans import engine
from plans.engine.plan_diff import ADDED, REMOVED, UNCHANGED, plan_diff
from plans.evals.runner import (
    experiment_summarise,
    model_problem,
    prompt_version,
    run_model_usage,
)
from plans.llm import Completion, ModelError, Usage, get_model, model_for, model_named
from plans.llm.pricing import cost_usd, prices_for
from plans.llm.prompts import answer_request
from plans.models import EvalResult, Experiment, Goal, Run, RunReplay, Step, ToolCall
from plans.runtime.planning import (
    first_reply_route,
    goal_plan_request,
    plan_from_completion,
    plan_repair_request,
)

RECORDED = "recorded"
# The prompt version that means "this checkout's", whatever it hashes to.
CURRENT_PROMPTS = "current"
NOT_RECORDED = "not recorded"
UNRESOLVED = "unresolved"
NOT_RECORDED_ERROR = (
    "not recorded: the original run did not make this call, so replay has no result"
)


class ReplayError(Exception):
    """The replay cannot be made as asked; code says why (each edge maps it once): "agent" (not
    a plan-and-execute run), "prompt_version", "model" (unknown or unusable), "model_failed"."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Recorded:
    status: str  # "succeeded" or "failed", as the original call ended
    result: Any
    error: str


class RecordedTools:
    """The original run's tool outcomes by (tool, canonical resolved args); serves, never calls."""

    def __init__(self, run: Run) -> None:
        self._by_call: dict[str, Recorded] = {}
        # Failed attempts first, so a later success of the same call wins.
        for call in ToolCall.objects.filter(run=run).order_by("-error", "attempt"):
            # A call past its time limit whose reply came late did take effect, with that result.
            late = bool(call.error and call.late_arrived_at and not call.late_error)
            self._by_call[engine.args_sha256(call.tool, call.args)] = Recorded(
                status="failed" if call.error and not late else "succeeded",
                result=call.late_result if late else call.result,
                error="" if late else call.error,
            )
        # A step that took an earlier version's result made no call of its own, but has one.
        for step in Step.objects.filter(plan__run=run, status=Step.Status.SUCCEEDED):
            self._by_call[engine.args_sha256(step.tool, step.effective_args)] = Recorded(
                status="succeeded", result=step.result, error=""
            )

    def serve(self, tool: str, args: Mapping[str, Any]) -> Recorded | None:
        """The recorded outcome of this exact call, or None when the original never made it."""
        return self._by_call.get(engine.args_sha256(tool, args))


@dataclass
class ReplayStep:
    id: int
    tool: str
    args: Any  # as planned, placeholders included
    resolved_args: Any  # None when it could not be resolved
    status: str  # recorded: the recorded call's status; else "not recorded" or "unresolved"
    result: Any = None
    error: str = ""
    depends_on: list[int] = field(default_factory=list)

    @property
    def shown_args(self) -> Any:
        """The arguments as called, or as planned when they could not be resolved (as the
        original's steps are read): an unresolved step is not a changed one."""
        return self.resolved_args if self.resolved_args is not None else self.args

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "args": self.args,
            "resolved_args": self.resolved_args,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "depends_on": self.depends_on,
        }


@dataclass
class Replay:
    """A replay's plan, calls, answer and usage, with the original's beside them."""

    run_id: int
    model: str
    prompt_version: str
    route: str
    plan_problems: list[str]
    steps: list[ReplayStep]
    answer: str
    usage: Usage
    model_calls: int
    cost_usd: Decimal
    original: dict[str, Any]

    @property
    def not_recorded(self) -> list[ReplayStep]:
        return [s for s in self.steps if s.status == NOT_RECORDED]

    def diff(self) -> dict[str, Any]:
        """Plan, arguments, answer, calls, tokens and cost: the original's against the replay's."""
        old = self.original
        # Compared on their resolved arguments (a step the replay could not resolve, on its
        # planned ones, as the original's are read): the calls each would make.
        status = {s.id: s.status for s in self.steps}
        plan = [
            {
                "step": c.step_id,
                "change": c.change,
                "original": (
                    {"tool": c.old_tool, "args": c.old_args} if c.change != ADDED else None
                ),
                "replay": (
                    {"tool": c.new_tool, "args": c.new_args, "status": status[c.step_id]}
                    if c.change != REMOVED
                    else None
                ),
            }
            for c in plan_diff(
                [_Called(s["id"], s["tool"], s["resolved_args"]) for s in old["steps"]],
                [_Called(s.id, s.tool, s.shown_args) for s in self.steps],
            )
        ]
        old_calls = {_call_key(c["tool"], c["args"]): c for c in old["calls"]}
        new_calls = {
            _call_key(s.tool, s.resolved_args): {"tool": s.tool, "args": s.resolved_args}
            for s in self.steps
            if s.resolved_args is not None
        }
        tokens = {
            name: {"original": old["tokens"][name], "replay": getattr(self.usage, name)}
            for name in old["tokens"]
        }
        return {
            "plan": plan,
            "calls": {
                "only_original": [old_calls[k] for k in sorted(old_calls.keys() - new_calls)],
                "only_replay": [new_calls[k] for k in sorted(new_calls.keys() - old_calls)],
                "both": len(old_calls.keys() & new_calls.keys()),
                "not_recorded": [
                    {"step": s.id, "tool": s.tool, "args": s.resolved_args}
                    for s in self.not_recorded
                ],
            },
            "answer": {
                "same": old["answer"] == self.answer,
                "original": old["answer"],
                "replay": self.answer,
                "unified": list(
                    difflib.unified_diff(
                        old["answer"].splitlines(),
                        self.answer.splitlines(),
                        "original",
                        "replay",
                        lineterm="",
                    )
                ),
            },
            "model_calls": {"original": old["model_calls"], "replay": self.model_calls},
            "tokens": tokens,
            "cost_usd": {"original": str(old["cost_usd"]), "replay": str(self.cost_usd)},
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "route": self.route,
            "plan_problems": self.plan_problems,
            "steps": [s.as_json() for s in self.steps],
            "diff": self.diff(),
        }


@dataclass
class _Called:
    """A step as plan_diff compares it, its arguments resolved."""

    step_id: int
    tool: str
    args: Any


def _call_key(tool: str, args: Any) -> str:
    return engine.args_sha256(tool, args if isinstance(args, Mapping) else {})


def run_original(run: Run) -> dict[str, Any]:
    """What the run did: its last plan's steps, its tool calls, answer, and recorded usage."""
    plan = run.plans.order_by("-version").first()
    steps = []
    if plan is not None:
        for step in plan.steps.order_by("step_id"):
            steps.append(
                {
                    "id": step.step_id,
                    "tool": step.tool,
                    "resolved_args": step.effective_args,
                }
            )
    calls = [
        {"tool": tool, "args": args}
        for tool, args in ToolCall.objects.filter(run=run)
        .order_by("started_at", "pk")
        .values_list("tool", "args")
    ]
    usage = run_model_usage(run)
    return {
        "steps": steps,
        "calls": calls,
        "answer": run.answer,
        "model_calls": usage["model_calls"],
        "cost_usd": usage["cost_usd"],
        "tokens": {
            "input_tokens": usage["input_tokens"],
            "output_tokens": usage["output_tokens"],
            "cache_read_tokens": usage["cache_read_tokens"],
            "cache_write_tokens": usage["cache_write_tokens"],
        },
    }


def run_replay(*, run: Run, wanted_prompt_version: str, model: str | None = None) -> Replay:
    """Re-plan and re-answer the run on a model; its tools are served as recorded.

    model: "offline" or a Claude model with prices (models_known), for every call of the
    replay; None for the configured models. The prompt version must be the one this code's
    prompts hash to, as a replay cannot run prompts it does not have.
    """
    if run.goal.agent != Goal.Agent.PLAN_EXECUTE:
        raise ReplayError(
            f"run {run.pk} was run by the {run.goal.agent} agent; replay re-plans "
            "plan-and-execute runs only",
            code="agent",
        )
    current = prompt_version()
    if wanted_prompt_version not in (CURRENT_PROMPTS, current):
        raise ReplayError(
            f"prompt version {wanted_prompt_version!r} is not available here: this checkout's "
            f"prompts are version {current} (pass it, or {CURRENT_PROMPTS!r}); check out the "
            "code of another version to replay on it",
            code="prompt_version",
        )
    if model is not None and (problem := model_problem(model)):
        raise ReplayError(problem, code="model")
    plan_model = model or model_for("plan")
    answer_model = model or model_for("answer")
    tools = RecordedTools(run)
    # Chosen per replay, not through settings: a replay made in a web request must not change
    # the model of the runs the same process is advancing.
    chat = model_named(model) if model is not None else get_model()
    calls: list[tuple[Completion, str]] = []

    def call(request: Any) -> Completion:
        try:
            completion = chat.complete(request)
        except ModelError as error:
            raise ReplayError(
                f"the {request.purpose} call failed: {error}", code="model_failed"
            ) from error
        calls.append((completion, request.model))
        return completion

    request = goal_plan_request(run.goal.text, model=plan_model)
    max_steps = request.metadata["max_steps"]
    completion = call(request)
    plan, problems, data = plan_from_completion(completion, request, max_steps=max_steps)
    route, answer = first_reply_route(data, problems, router=request.metadata["router"])
    steps: list[ReplayStep] = []
    if problems and route == Run.Route.PLAN:
        repair = plan_repair_request(request, completion, problems)
        completion = call(repair)
        plan, problems, _ = plan_from_completion(completion, repair, max_steps=max_steps)
    if plan is not None and not problems:
        steps = replay_steps(plan, tools)
        answer_call = answer_request(
            goal=run.goal.text,
            plan={"steps": [_planned_json(s) for s in steps]},
            outcomes=[
                {
                    "id": s.id,
                    "tool": s.tool,
                    "args": s.resolved_args if s.resolved_args is not None else s.args,
                    "status": s.status if s.status != RECORDED else "succeeded",
                    "result": s.result,
                    "error": s.error,
                }
                for s in steps
            ],
            model=answer_model,
        )
        answer = call(answer_call).text
    elif route == Run.Route.REFUSE:
        answer = str(data.get("reason", ""))
    usage = sum((c.usage for c, _ in calls), Usage())
    return Replay(
        run_id=run.pk,
        model=plan_model,
        prompt_version=current,
        route=route,
        plan_problems=[] if route == Run.Route.REFUSE else problems,
        steps=steps,
        answer=answer,
        usage=usage,
        model_calls=len(calls),
        cost_usd=sum((cost_usd(c.usage, prices_for(m)) for c, m in calls), Decimal(0)),
        original=run_original(run),
    )


def replay_save(replay: Replay, *, requested_by: Any = None) -> RunReplay:
    """The replay kept with its run, its diff to be read on the replay page later."""
    data = replay.as_json()
    return RunReplay.objects.create(
        run_id=replay.run_id,
        requested_by=requested_by,
        model=replay.model[:100],
        prompt_version=replay.prompt_version,
        route=replay.route,
        steps=engine.storable(data["steps"]),
        diff=engine.storable(json.loads(json.dumps(data["diff"], default=str))),
        not_recorded=len(replay.not_recorded),
        model_calls=replay.model_calls,
        cost_usd=replay.cost_usd,
    )


def replay_steps(plan: engine.Plan, tools: RecordedTools) -> list[ReplayStep]:
    """Each step in dependency order, its arguments resolved from earlier served results."""
    results: dict[int, Any] = {}
    done: dict[int, ReplayStep] = {}
    for step_id in engine.topological_order(plan):
        planned = plan.step(step_id)
        step = ReplayStep(
            id=planned.id,
            tool=planned.tool,
            args=planned.args,
            resolved_args=None,
            status=UNRESOLVED,
            depends_on=list(planned.depends_on),
        )
        done[step_id] = step
        missing = [d for d in planned.depends_on if d not in results]
        if missing:
            step.error = f"depends on step {missing[0]}, which has no result in the replay"
            continue
        try:
            step.resolved_args = engine.resolve(planned.args, results)
        except (engine.UnresolvedPlaceholder, engine.MissingPath) as error:
            step.error = str(error)
            continue
        served = tools.serve(planned.tool, step.resolved_args)
        if served is None:
            step.status = NOT_RECORDED
            step.error = NOT_RECORDED_ERROR
            continue
        step.status = RECORDED if served.status == "succeeded" else "failed"
        step.result, step.error = served.result, served.error
        if served.status == "succeeded":
            results[step_id] = served.result
    return [done[s] for s in sorted(done)]


def _planned_json(step: ReplayStep) -> dict[str, Any]:
    return {"id": step.id, "tool": step.tool, "args": step.args, "depends_on": step.depends_on}


def replay_lines(replay: Replay) -> list[str]:
    """The diff as text lines, for the terminal (callers strip hidden characters)."""
    diff = replay.diff()
    lines = [
        f"replay of run {replay.run_id} on {replay.model}, prompts {replay.prompt_version}: "
        f"route {replay.route}, no tool called"
    ]
    lines += [f"  plan problem: {problem}" for problem in replay.plan_problems]
    lines.append("plan (original -> replay):")
    for row in diff["plan"]:
        before, after = row["original"], row["replay"]
        old = f"{before['tool']} {_compact(before['args'])}" if before else "-"
        new = f"{after['tool']} {_compact(after['args'])} [{after['status']}]" if after else "-"
        if row["change"] == UNCHANGED:
            lines.append(f"  step {row['step']} unchanged: {new}")
        else:
            lines.append(f"  step {row['step']} {row['change']}: {old} -> {new}")
    calls = diff["calls"]
    lines.append(
        f"calls: {calls['both']} in both, {len(calls['only_original'])} only in the original, "
        f"{len(calls['only_replay'])} only in the replay"
    )
    lines += [f"  - {c['tool']} {_compact(c['args'])}" for c in calls["only_original"]]
    lines += [f"  + {c['tool']} {_compact(c['args'])}" for c in calls["only_replay"]]
    lines += [
        f"  step {c['step']} {c['tool']} {_compact(c['args'])}: {NOT_RECORDED}"
        for c in calls["not_recorded"]
    ]
    answer = diff["answer"]
    lines.append("answer: the same" if answer["same"] else "answer (original -> replay):")
    lines += [f"  {line}" for line in answer["unified"]]
    calls_row = diff["model_calls"]
    lines.append(f"model calls: {calls_row['original']} -> {calls_row['replay']}")
    for name, row in diff["tokens"].items():
        lines.append(f"{name.replace('_', ' ')}: {row['original']} -> {row['replay']}")
    lines.append(f"cost: ${replay.original['cost_usd']:.6f} -> ${replay.cost_usd:.6f}")
    return lines


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


# eval_planner --from-runs QUERY: which past runs become replay cases.
QUERY_KEYS = ("status", "tool", "days", "limit")
DEFAULT_LIMIT = 50
REPLAY_CATEGORY = "replay"


def runs_query_parse(text: str) -> dict[str, Any]:
    """ "status=completed,tool=issue_refund,days=7,limit=20" as a dict; ValueError naming a bad
    part. Every key is optional; limit defaults to 50."""
    query: dict[str, Any] = {"limit": DEFAULT_LIMIT}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ValueError(f"--from-runs: {part!r} is not key=value")
        if key not in QUERY_KEYS:
            raise ValueError(f"--from-runs: unknown key {key!r}; use {', '.join(QUERY_KEYS)}")
        if key == "status" and value not in Run.Status.values:
            raise ValueError(
                f"--from-runs: status {value!r} is not one of {', '.join(Run.Status.values)}"
            )
        if key in ("days", "limit"):
            if not value.isdigit() or int(value) < 1:
                raise ValueError(
                    f"--from-runs: {key} must be a whole number above 0, not {value!r}"
                )
            query[key] = int(value)
        else:
            query[key] = value
    return query


def runs_for_query(query: Mapping[str, Any]) -> list[Run]:
    """The plan-and-execute runs (eval runs left out) the query selects, newest first."""
    runs = Run.objects.filter(experiment__isnull=True, goal__agent=Goal.Agent.PLAN_EXECUTE)
    if "status" in query:
        runs = runs.filter(status=query["status"])
    if "tool" in query:
        runs = runs.filter(tool_calls__tool=query["tool"]).distinct()
    if "days" in query:
        runs = runs.filter(created_at__gte=timezone.now() - timedelta(days=query["days"]))
    return list(runs.select_related("goal").order_by("-pk")[: query["limit"]])


def replay_failures(replay: Replay) -> list[str]:
    """Why a replay case fails: an invalid plan, a call without a record, a call the original
    made and the replay dropped (or the reverse), no answer."""
    diff = replay.diff()
    failures = [f"plan: {problem}" for problem in replay.plan_problems]
    failures += [
        f"step {s.id} {s.tool}: {s.status}"
        for s in replay.steps
        if s.status in (NOT_RECORDED, UNRESOLVED)
    ]
    failures += [
        f"call dropped: {c['tool']} {_compact(c['args'])}" for c in diff["calls"]["only_original"]
    ]
    failures += [
        f"call added: {c['tool']} {_compact(c['args'])}"
        for c in diff["calls"]["only_replay"]
        if not any(
            n["tool"] == c["tool"] and n["args"] == c["args"] for n in diff["calls"]["not_recorded"]
        )
    ]
    if not replay.answer.strip():
        failures.append("answer: the replay gave none")
    return failures


def experiment_from_runs(
    *,
    query_text: str,
    model: str,
    label: str = "",
    on_result: Callable[[EvalResult], None] | None = None,
) -> Experiment:
    """Each run the query selects replayed as a case (category "replay"), recorded and
    summarised as an experiment, so the gate can compare it with a baseline."""
    query = runs_query_parse(query_text)
    runs = runs_for_query(query)
    if not runs:
        raise ValueError(f"--from-runs {query_text!r} selects no runs")
    experiment = Experiment.objects.create(
        label=label,
        agent=Goal.Agent.PLAN_EXECUTE,
        model=model,
        prompt_version=prompt_version(),
        cases_file=f"runs: {query_text}"[-300:],
        # The same runs make the same suite.
        cases_version=hashlib.sha256(",".join(str(r.pk) for r in runs).encode()).hexdigest()[:12],
    )
    started = time.perf_counter()
    for run in runs:
        case_started = time.perf_counter()
        try:
            replay = run_replay(run=run, wanted_prompt_version=CURRENT_PROMPTS)
        except ReplayError as error:
            result = EvalResult.objects.create(
                experiment=experiment,
                case_id=f"run-{run.pk}",
                category=REPLAY_CATEGORY,
                run=run,
                passed=False,
                failures=[f"replay: {error}"],
            )
        else:
            result = EvalResult.objects.create(
                experiment=experiment,
                case_id=f"run-{run.pk}",
                category=REPLAY_CATEGORY,
                run=run,
                passed=not (failures := replay_failures(replay)),
                failures=failures,
                model_calls=replay.model_calls,
                input_tokens=replay.usage.input_tokens,
                output_tokens=replay.usage.output_tokens,
                cache_read_tokens=replay.usage.cache_read_tokens,
                cache_write_tokens=replay.usage.cache_write_tokens,
                cost_usd=replay.cost_usd,
                wall_ms=round((time.perf_counter() - case_started) * 1000),
            )
        if on_result is not None:
            on_result(result)
    experiment_summarise(experiment, categories=[REPLAY_CATEGORY])
    experiment.wall_ms = round((time.perf_counter() - started) * 1000)
    experiment.finished_at = timezone.now()
    experiment.save()
    return experiment
