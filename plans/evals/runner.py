"""Running a suite: every case becomes a real run, driven to its end with the case's decisions.

Runs are created through plans.services.runs (tagged with the experiment, so the runs list
hides them), advanced in this process through the public hook in plans.journal.tasks, and
their destructive steps approved or rejected through plans.services.approvals.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import Count, Sum
from django.test.utils import override_settings
from django.utils import timezone

from plans.evals.cases import Case, Suite
from plans.evals.judge import RUBRIC_NAME, VerdictUnreadable, answer_judge
from plans.evals.predicates import Trajectory, case_failures
from plans.evals.stats import Rate, wilson_interval
from plans.evals.trajectory import run_trajectory
from plans.llm import ModelError, prompts
from plans.models import Approval, EvalResult, Experiment, ModelCall, Run
from plans.runtime.advance import advance_run
from plans.selectors.plans import plan_current
from plans.services.approvals import approvals_decide
from plans.services.plans import plan_decide
from plans.services.runs import run_create

EVAL_USERNAME = "eval"
OFFLINE = "offline"
REJECT_REASON = "rejected by the eval case"
# Advances of one run before the runner gives up on it (each approval round is one).
MAX_ADVANCES = 50
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def prompt_version() -> str:
    """A short hash of every system prompt: experiments on different prompts are told apart."""
    texts = [prompts.PLANNER_SYSTEM, prompts.ANSWER_SYSTEM, getattr(prompts, "REACT_SYSTEM", "")]
    if settings.AGENTSITE_ROUTER:
        texts.append(prompts.ROUTER_RULE)
    return hashlib.sha256("\n\0".join(texts).encode()).hexdigest()[:12]


def eval_author() -> User:
    return get_user_model().objects.get_or_create(username=EVAL_USERNAME)[0]


@dataclass(frozen=True)
class CaseOutcome:
    case: Case
    attempt: int
    result: EvalResult


def experiment_run(
    *,
    suite: Suite,
    agent: str,
    model: str,
    repeat: int = 1,
    label: str = "",
    judge: bool = False,
    on_case: Callable[[CaseOutcome], None] | None = None,
) -> Experiment:
    """Run every case repeat times as the agent, record each result, and summarise."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    author = eval_author()
    experiment = Experiment.objects.create(
        label=label,
        agent=agent,
        model=model,
        prompt_version=prompt_version(),
        cases_file=suite.path[-300:],
        cases_version=suite.version,
        repeat=repeat,
    )
    started = time.perf_counter()
    for attempt in range(1, repeat + 1):
        for case in suite.cases:
            result = case_run(
                case=case,
                attempt=attempt,
                agent=agent,
                experiment=experiment,
                author=author,
                judge=judge,
            )
            if on_case is not None:
                on_case(CaseOutcome(case=case, attempt=attempt, result=result))
    experiment_summarise(experiment, categories=suite.categories)
    experiment.wall_ms = round((time.perf_counter() - started) * 1000)
    experiment.finished_at = timezone.now()
    experiment.save()
    return experiment


def case_run(
    *,
    case: Case,
    attempt: int,
    agent: str,
    experiment: Experiment,
    author: User,
    judge: bool = False,
) -> EvalResult:
    """One case as a real run, judged by its predicates."""
    started = time.perf_counter()
    run = run_create(author=author, goal_text=case.goal, agent=agent, experiment=experiment)
    stuck = _drive(run, case)
    wall_ms = round((time.perf_counter() - started) * 1000)
    run.refresh_from_db()
    trajectory = run_trajectory(run)
    failures = case_failures(case, trajectory)
    if stuck:
        failures.insert(0, f"runner: {stuck}")
    usage = run_model_usage(run)
    return EvalResult.objects.create(
        experiment=experiment,
        case_id=case.id,
        category=case.category,
        attempt=attempt,
        run=run,
        passed=not failures,
        failures=failures,
        wall_ms=wall_ms,
        judge=_judged(trajectory) if judge else None,
        **usage,
    )


def _judged(trajectory: Trajectory) -> dict[str, Any] | None:
    """The judge's verdict on the run's answer (None without one), or why there is none."""
    if not trajectory.answer.strip():
        return None
    outcomes = [
        {
            "id": step.id,
            "tool": step.tool,
            "args": step.args,
            "status": step.status,
            "result": step.result,
            "error": step.error,
        }
        for step in trajectory.steps
    ]
    try:
        verdict = answer_judge(goal=trajectory.goal, answer=trajectory.answer, outcomes=outcomes)
    except (ModelError, VerdictUnreadable) as error:
        return {"rubric": RUBRIC_NAME, "error": str(error)}
    return verdict.as_json()


def _drive(run: Run, case: Case) -> str:
    """Advance the run to its end, deciding as the case says; why it stopped short, if it did."""
    approve = case.decisions == "approve"
    reason = "" if approve else REJECT_REASON
    for _ in range(MAX_ADVANCES):
        outcome = advance_run(run.pk)
        run.refresh_from_db()
        if run.is_terminal:
            return ""
        if outcome == "busy":
            time.sleep(0.2)  # another worker holds it; its lease runs out
            continue
        if run.status == Run.Status.AWAITING_PLAN_APPROVAL:
            plan = plan_current(run)
            if plan is not None:
                plan_decide(
                    plan=plan,
                    reviewer=None,
                    approve=approve,
                    reason=reason,
                    via="eval",
                    resume=False,
                )
            continue
        if run.status == Run.Status.AWAITING_APPROVAL:
            pending = list(run.approvals.filter(decision=Approval.Decision.PENDING))
            if pending:
                approvals_decide(
                    approvals=pending,
                    reviewer=None,
                    approve=approve,
                    reason=reason,
                    via="eval",
                    resume=False,
                )
    return f"the run was still {run.status} after {MAX_ADVANCES} advances"


def run_model_usage(run: Run) -> dict[str, Any]:
    """Calls, tokens and cost summed from the run's ModelCall rows (the recorded figures)."""
    totals = ModelCall.objects.filter(run=run).aggregate(
        model_calls=Count("pk"),
        cost_usd=Sum("cost_usd"),
        **{name: Sum(name) for name in USAGE_FIELDS},
    )
    return {
        "model_calls": totals["model_calls"] or 0,
        "cost_usd": totals["cost_usd"] or Decimal(0),
        **{name: totals[name] or 0 for name in USAGE_FIELDS},
    }


def usage_by_purpose(experiment: Experiment) -> dict[str, dict[str, Any]]:
    """Per call purpose (plan, answer, ...): calls, prompt tokens (input, cache reads and writes
    together) per call on average and at most, and the share of them read from the cache."""
    calls = ModelCall.objects.filter(run__experiment=experiment).values_list(
        "purpose", "input_tokens", "cache_read_tokens", "cache_write_tokens"
    )
    by_purpose: dict[str, list[tuple[int, int]]] = {}
    for purpose, uncached, read, written in calls:
        by_purpose.setdefault(purpose, []).append((uncached + read + written, read))
    report = {}
    for purpose, rows in sorted(by_purpose.items()):
        prompt = sum(total for total, _ in rows)
        report[purpose] = {
            "calls": len(rows),
            "prompt_tokens_mean": round(prompt / len(rows)),
            "prompt_tokens_max": max(total for total, _ in rows),
            "cache_read_share": round(sum(read for _, read in rows) / prompt, 4) if prompt else 0.0,
        }
    return report


def experiment_summarise(experiment: Experiment, *, categories: list[str]) -> None:
    """Per category and overall pass rates (with Wilson intervals) and summed usage."""
    results = list(experiment.results.all())
    summary: dict[str, Any] = {"categories": {}, "overall": {}}
    for category in categories:
        mine = [r for r in results if r.category == category]
        summary["categories"][category] = _rate(mine).as_json()
    overall = _rate(results)
    summary["overall"] = overall.as_json()
    judged = [r.judge for r in results if r.judge and "verdict" in r.judge]
    if judged:
        summary["judge"] = {
            "rubric": RUBRIC_NAME,
            "judged": len(judged),
            "passed": sum(j["verdict"] == "pass" for j in judged),
            "errors": sum(1 for r in results if r.judge and "error" in r.judge),
        }
    experiment.summary = summary
    experiment.trials = overall.trials
    experiment.passed = overall.passed
    experiment.model_calls = sum(r.model_calls for r in results)
    for name in USAGE_FIELDS:
        setattr(experiment, name, sum(getattr(r, name) for r in results))
    experiment.cost_usd = sum((r.cost_usd for r in results), Decimal(0))


def _rate(results: list[EvalResult]) -> Rate:
    return wilson_interval(sum(r.passed for r in results), len(results))


def models_known() -> list[str]:
    """The models a run can be evaluated or replayed on: offline, then every model with prices
    in AGENTSITE_MODEL_PRICES (Claude's need ANTHROPIC_API_KEY)."""
    return [OFFLINE, *sorted(name for name in settings.AGENTSITE_MODEL_PRICES if name != OFFLINE)]


def model_problem(model: str) -> str:
    """Why a run cannot be evaluated or replayed on this model, naming it ("" if it can)."""
    if model == OFFLINE:
        return ""
    if model not in settings.AGENTSITE_MODEL_PRICES:
        return (
            f"model {model!r} is not known: it has no prices in AGENTSITE_MODEL_PRICES "
            f"(known: {', '.join(models_known())})"
        )
    if not settings.ANTHROPIC_API_KEY:
        return f"model {model!r} needs ANTHROPIC_API_KEY, which is not set; use {OFFLINE}"
    return ""


def model_settings(model: str) -> AbstractContextManager[Any]:
    """Settings that make every model call use the model asked for; ValueError if it cannot be.

    Process-wide (override_settings): for commands, never inside a web request.
    """
    problem = model_problem(model)
    if problem:
        raise ValueError(problem)
    if model == OFFLINE:
        # The shared call-rate limit protects a provider's quota; the offline model has none,
        # and waiting for it would only make the wall times meaningless.
        return override_settings(
            AGENTSITE_MODEL_BACKEND=OFFLINE, AGENTSITE_MODEL_CALLS_PER_MINUTE=0
        )
    return override_settings(
        AGENTSITE_MODEL_BACKEND="anthropic",
        AGENTSITE_PLANNER_MODEL=model,
        AGENTSITE_ANSWER_MODEL=model,
    )
