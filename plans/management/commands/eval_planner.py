"""Run the eval suite through the real services and gate it against a committed baseline."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Avg
from django.test.utils import override_settings

from plans.evals.baseline import (
    DEFAULT_TOLERANCE,
    BaselineInvalid,
    GateReport,
    baseline_compare,
    baseline_load,
    baseline_save,
)
from plans.evals.cases import DEFAULT_CASES, CasesInvalid, suite_load
from plans.evals.replay import experiment_from_runs
from plans.evals.runner import (
    OFFLINE,
    CaseOutcome,
    experiment_run,
    model_settings,
    usage_by_purpose,
)
from plans.llm import Usage
from plans.llm.pricing import cost_usd, prices_for
from plans.models import EvalResult, Experiment, Goal
from plans.ui.charts import terminal_text

EXIT_REGRESSION = 1


class Command(BaseCommand):
    help = "Run the planner eval cases, print PASS/FAIL per case and gate against a baseline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cases", type=Path, default=DEFAULT_CASES, help="cases JSON file")
        parser.add_argument(
            "--model",
            help='"offline" or a Claude model name (default: the configured planner model)',
        )
        parser.add_argument(
            "--agent",
            choices=Goal.Agent.values,
            default=Goal.Agent.PLAN_EXECUTE,
            help="the agent loop to evaluate",
        )
        parser.add_argument(
            "--compare",
            action="store_true",
            help="run the cases with both agents and print their costs side by side",
        )
        parser.add_argument("--repeat", type=int, default=1, help="run every case N times")
        parser.add_argument("--baseline", type=Path, help="fail on a regression against this")
        parser.add_argument("--save-baseline", type=Path, help="write this run as a baseline")
        parser.add_argument(
            "--tolerance",
            type=float,
            default=DEFAULT_TOLERANCE,
            help="how far a category's pass rate may fall below the baseline (default 0.05)",
        )
        parser.add_argument("--label", default="", help="a name for the experiment")
        parser.add_argument(
            "--judge",
            action="store_true",
            help="also grade every answer with the LLM judge (its rubric: plans/evals/judge.py)",
        )
        parser.add_argument(
            "--router",
            choices=("on", "off"),
            help="run with the router on or off (default: AGENTSITE_ROUTER)",
        )
        parser.add_argument(
            "--from-runs",
            metavar="QUERY",
            help=(
                "replay past runs as the cases instead of the cases file, e.g. "
                '"status=completed,tool=issue_refund,days=7,limit=50" (keys optional)'
            ),
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["repeat"] < 1:
            raise CommandError("--repeat must be at least 1")
        if not 0 <= options["tolerance"] < 1:
            raise CommandError("--tolerance must be between 0 and 1")
        from_runs = options["from_runs"]
        if from_runs is not None and (
            options["compare"] or options["agent"] != Goal.Agent.PLAN_EXECUTE
        ):
            raise CommandError("--from-runs replays plan-and-execute runs: drop --compare/--agent")
        if from_runs is not None and options["repeat"] != 1:
            raise CommandError("--from-runs replays each run once: drop --repeat")
        try:
            suite = suite_load(options["cases"]) if from_runs is None else None
        except CasesInvalid as error:
            raise CommandError(str(error)) from error
        baseline = None
        if options["baseline"] is not None:
            try:
                baseline = baseline_load(options["baseline"])
            except BaselineInvalid as error:
                raise CommandError(str(error)) from error
        model = options["model"] or _configured_model()
        agents = list(Goal.Agent.values) if options["compare"] else [options["agent"]]
        as_json = options["json"]
        experiments: list[Experiment] = []
        router = (
            settings.AGENTSITE_ROUTER if options["router"] is None else options["router"] == "on"
        )
        self.router = bool(router)
        try:
            chosen = model_settings(model)
        except ValueError as error:
            raise CommandError(str(error)) from error
        with chosen, override_settings(AGENTSITE_ROUTER=router):
            if Goal.Agent.REACT in agents and settings.AGENTSITE_REQUIRE_PLAN_APPROVAL:
                raise CommandError(
                    "AGENTSITE_REQUIRE_PLAN_APPROVAL is on: the ReAct agent has no plan to "
                    "approve, so it cannot be evaluated here"
                )
            if from_runs is not None:
                try:
                    experiments.append(
                        experiment_from_runs(
                            query_text=from_runs,
                            model=model,
                            label=options["label"],
                            on_result=None if as_json else self._print_result,
                        )
                    )
                except ValueError as error:
                    raise CommandError(str(error)) from error
            elif suite is not None:
                for agent in agents:
                    if not as_json:
                        self.stdout.write(f"== {agent} on {model}: {len(suite.cases)} cases")
                    experiments.append(
                        experiment_run(
                            suite=suite,
                            agent=agent,
                            model=model,
                            repeat=options["repeat"],
                            label=options["label"],
                            judge=options["judge"],
                            on_case=None if as_json else self._print_case,
                        )
                    )
        gated = _gated(experiments, baseline)
        gate = (
            baseline_compare(gated, baseline, tolerance=options["tolerance"])
            if baseline is not None and gated is not None
            else None
        )
        if options["save_baseline"] is not None:
            baseline_save(experiments[0], options["save_baseline"])
        if as_json:
            report = {
                "experiments": [experiment_json(e) for e in experiments],
                "gate": _gate_json(gate) if gate else None,
            }
            self.stdout.write(json.dumps(report, indent=2, default=str))
        else:
            for experiment in experiments:
                self._print_summary(experiment)
            if len(experiments) > 1:
                self._print_comparison(experiments)
            if gate is not None:
                self._print_gate(gate, options["baseline"])
            if options["save_baseline"] is not None:
                self.stdout.write(f"baseline written to {options['save_baseline']}")
        if gate is not None and not gate.passed:
            sys.exit(EXIT_REGRESSION)

    def _print_case(self, outcome: CaseOutcome) -> None:
        self._print_result(outcome.result)

    def _print_result(self, result: EvalResult) -> None:
        attempt = f" (attempt {result.attempt})" if result.attempt > 1 else ""
        tokens = (
            result.input_tokens
            + result.output_tokens
            + result.cache_read_tokens
            + result.cache_write_tokens
        )
        run = f" [run {result.run_id}, {result.model_calls} calls, {tokens} tokens]"
        # Failures and the judge's errors quote the model's and the tools' text.
        if result.passed:
            self.stdout.write(terminal_text(f"PASS {result.case_id}{attempt}{run}"))
        else:
            failures = "; ".join(result.failures)
            self.stdout.write(terminal_text(f"FAIL {result.case_id}{attempt}{run}: {failures}"))
        if result.judge:
            if "error" in result.judge:
                self.stdout.write(terminal_text(f"     judge: no verdict: {result.judge['error']}"))
            else:
                scores = ", ".join(f"{k} {v}" for k, v in result.judge["scores"].items())
                self.stdout.write(
                    terminal_text(f"     judge: {result.judge['verdict']} ({scores})")
                )

    def _print_summary(self, experiment: Experiment) -> None:
        summary = experiment.summary
        repeated = experiment.repeat > 1
        self.stdout.write(
            f"\nexperiment {experiment.pk}: {experiment.agent} on {experiment.model}, "
            f"prompts {experiment.prompt_version}, cases v{experiment.cases_version}, "
            f"router {'on' if self.router else 'off'}"
        )
        rows = [*summary["categories"].items(), ("overall", summary["overall"])]
        for name, rate in rows:
            interval = f"  95% CI {rate['low']:.0%}-{rate['high']:.0%}" if repeated else ""
            counts = f"{rate['passed']:>3}/{rate['trials']:<3}"
            self.stdout.write(f"  {name:<16} {counts} {rate['rate']:>6.1%}{interval}")
        if judge := summary.get("judge"):
            self.stdout.write(
                f"  judge ({judge['rubric']}): {judge['passed']}/{judge['judged']} answers pass"
                + (f", {judge['errors']} without a verdict" if judge["errors"] else "")
            )
        self.stdout.write(
            f"  {experiment.model_calls} model calls, {experiment.input_tokens} in / "
            f"{experiment.output_tokens} out / {experiment.cache_read_tokens} cache read / "
            f"{experiment.cache_write_tokens} cache write tokens, ${experiment.cost_usd:.6f}, "
            f"{experiment.wall_ms / 1000:.1f}s"
        )
        runs = experiment.trials or 1
        prompt = (
            experiment.input_tokens + experiment.cache_read_tokens + experiment.cache_write_tokens
        )
        priced_as = str(settings.AGENTSITE_PLANNER_MODEL)
        self.stdout.write(
            f"  per run: {experiment.model_calls / runs:.2f} model calls, {prompt / runs:,.0f} "
            f"prompt tokens, {experiment.output_tokens / runs:,.0f} output tokens, "
            f"${experiment.cost_usd / runs:.6f} (at {priced_as} prices "
            f"${experiment_cost_at(experiment, priced_as) / runs:.6f})"
        )
        self.stdout.write(
            "  per call purpose: calls, prompt tokens per call (mean, max), cache reads"
        )
        for purpose, row in usage_by_purpose(experiment).items():
            self.stdout.write(
                f"    {purpose:<8}{row['calls']:>5}{row['prompt_tokens_mean']:>8,}"
                f"{row['prompt_tokens_max']:>8,}{row['cache_read_share']:>9.1%}"
            )

    def _print_comparison(self, experiments: list[Experiment]) -> None:
        self.stdout.write("\nside by side (figures summed from the runs' ModelCall rows):")
        priced_as = str(settings.AGENTSITE_PLANNER_MODEL)
        header = f"  {'agent':<14}{'pass':>8}{'calls':>8}{'in':>10}{'out':>9}{'cache r/w':>13}"
        self.stdout.write(header + f"{'cost $':>12}{'wall s':>9}   at {priced_as} prices $")
        for e in experiments:
            rate = e.pass_rate or 0.0
            cache = f"{e.cache_read_tokens}/{e.cache_write_tokens}"
            self.stdout.write(
                f"  {e.agent:<14}{rate:>8.1%}{e.model_calls:>8}{e.input_tokens:>10}"
                f"{e.output_tokens:>9}{cache:>13}{e.cost_usd:>12.6f}{e.wall_ms / 1000:>9.1f}"
                f"   {experiment_cost_at(e, priced_as):.6f}"
            )
        self.stdout.write("  model calls per case, by category:")
        calls = {e.agent: calls_by_category(e) for e in experiments}
        for category in experiments[0].summary["categories"]:
            row = "  ".join(f"{agent} {calls[agent].get(category, 0):.1f}" for agent in calls)
            self.stdout.write(f"    {category:<16} {row}")

    def _print_gate(self, gate: GateReport, path: Path) -> None:
        self.stdout.write(f"\ngate against {path}:")
        for note in gate.notes:
            self.stdout.write(terminal_text(f"  note: {note}"))
        if gate.newly_passing:
            self.stdout.write(terminal_text(f"  newly passing: {', '.join(gate.newly_passing)}"))
        if gate.newly_failing:
            self.stdout.write(terminal_text(f"  newly failing: {', '.join(gate.newly_failing)}"))
        if gate.passed:
            self.stdout.write("  PASSED: no category fell beyond the tolerance")
        else:
            for regression in gate.regressions:
                self.stdout.write(terminal_text(f"  REGRESSION {regression}"))


def experiment_cost_at(experiment: Experiment, model: str) -> Decimal:
    """What the experiment's recorded tokens would cost at another model's prices."""
    usage = Usage(
        input_tokens=experiment.input_tokens,
        output_tokens=experiment.output_tokens,
        cache_read_tokens=experiment.cache_read_tokens,
        cache_write_tokens=experiment.cache_write_tokens,
    )
    return cost_usd(usage, prices_for(model))


def calls_by_category(experiment: Experiment) -> dict[str, float]:
    """Mean model calls per case in each category."""
    rows = experiment.results.values("category").annotate(calls=Avg("model_calls"))
    return {row["category"]: float(row["calls"]) for row in rows}


def _configured_model() -> str:
    if settings.AGENTSITE_MODEL_BACKEND == OFFLINE:
        return OFFLINE
    return str(settings.AGENTSITE_PLANNER_MODEL)


def _gated(experiments: list[Experiment], baseline: dict[str, Any] | None) -> Experiment | None:
    """The experiment the baseline speaks for: the one with its agent (else the first)."""
    if baseline is None:
        return None
    for experiment in experiments:
        if experiment.agent == baseline.get("agent"):
            return experiment
    return experiments[0]


def experiment_json(experiment: Experiment) -> dict[str, Any]:
    return {
        "id": experiment.pk,
        "agent": experiment.agent,
        "model": experiment.model,
        "prompt_version": experiment.prompt_version,
        "cases_version": experiment.cases_version,
        "repeat": experiment.repeat,
        "summary": experiment.summary,
        "model_calls": experiment.model_calls,
        "tokens": {
            "input": experiment.input_tokens,
            "output": experiment.output_tokens,
            "cache_read": experiment.cache_read_tokens,
            "cache_write": experiment.cache_write_tokens,
        },
        "by_purpose": usage_by_purpose(experiment),
        "cost_usd": float(experiment.cost_usd),
        "wall_s": experiment.wall_ms / 1000,
        "cases": [
            {
                "id": r.case_id,
                "category": r.category,
                "attempt": r.attempt,
                "run_id": r.run_id,
                "passed": r.passed,
                "failures": r.failures,
                "model_calls": r.model_calls,
            }
            for r in experiment.results.all()
        ],
    }


def _gate_json(gate: GateReport) -> dict[str, Any]:
    return {
        "passed": gate.passed,
        "regressions": gate.regressions,
        "newly_failing": gate.newly_failing,
        "newly_passing": gate.newly_passing,
        "notes": gate.notes,
    }
