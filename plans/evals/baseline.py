"""The regression gate: an experiment against a committed baseline, category by category."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plans.models import Experiment

BASELINES_DIR = Path(__file__).resolve().parent / "baselines"
DEFAULT_BASELINE = BASELINES_DIR / "offline.json"
DEFAULT_TOLERANCE = 0.05
# Usage that grows by more than this is reported beside the gate (it does not fail it): a
# prompt that passes more cases by tripling the calls deserves a look before it is merged.
USAGE_GROWTH_NOTED = 0.25


class BaselineInvalid(ValueError):
    """The baseline file cannot be used; the message says why."""


def baseline_of(experiment: Experiment) -> dict[str, Any]:
    """What a baseline file keeps: the setup, rates per category and each case's verdict."""
    verdicts: dict[str, bool] = {}
    for result in experiment.results.order_by("case_id", "attempt"):
        # With repeats, a case counts as passing in the baseline only if every attempt passed.
        verdicts[result.case_id] = verdicts.get(result.case_id, True) and result.passed
    return {
        "agent": experiment.agent,
        "model": experiment.model,
        "prompt_version": experiment.prompt_version,
        "cases_version": experiment.cases_version,
        "repeat": experiment.repeat,
        "model_calls": experiment.model_calls,
        "input_tokens": experiment.input_tokens,
        "output_tokens": experiment.output_tokens,
        # Input read from or written to the cache as well: what the prompts weigh in all.
        "prompt_tokens": (
            experiment.input_tokens + experiment.cache_read_tokens + experiment.cache_write_tokens
        ),
        "categories": experiment.summary.get("categories", {}),
        "overall": experiment.summary.get("overall", {}),
        "cases": verdicts,
    }


def baseline_save(experiment: Experiment, path: Path) -> None:
    text = json.dumps(baseline_of(experiment), indent=2, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")


def baseline_load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineInvalid(f"baseline file {path} does not exist") from None
    except (OSError, ValueError) as error:
        raise BaselineInvalid(f"baseline file {path} cannot be read: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("categories"), dict):
        raise BaselineInvalid(f'baseline file {path} has no "categories" object')
    return data


@dataclass
class GateReport:
    regressions: list[str] = field(default_factory=list)  # these fail the gate
    notes: list[str] = field(default_factory=list)  # worth reading, not failing
    newly_failing: list[str] = field(default_factory=list)
    newly_passing: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.regressions


def baseline_compare(
    experiment: Experiment, baseline: dict[str, Any], *, tolerance: float = DEFAULT_TOLERANCE
) -> GateReport:
    """Regressions: a category whose pass rate fell more than tolerance below the baseline's."""
    report = GateReport()
    current = baseline_of(experiment)
    for key in ("agent", "model", "cases_version", "prompt_version"):
        if baseline.get(key) not in (None, current[key]):
            report.notes.append(
                f"the baseline was taken with {key} {baseline.get(key)!r}, this run has "
                f"{current[key]!r}"
            )
    for key in ("model_calls", "prompt_tokens", "output_tokens"):
        then, now = baseline.get(key), current[key]
        if isinstance(then, int) and then > 0 and now > then * (1 + USAGE_GROWTH_NOTED):
            report.notes.append(f"{key} rose from {then} to {now} (+{now / then - 1:.0%})")
    then_cases: dict[str, bool] = baseline.get("cases", {})
    for case_id, passed in sorted(current["cases"].items()):
        before = then_cases.get(case_id)
        if before is True and not passed:
            report.newly_failing.append(case_id)
        elif before is False and passed:
            report.newly_passing.append(case_id)
        elif before is None:
            report.notes.append(f"case {case_id} is not in the baseline")
    by_category = {
        r.case_id: r.category for r in experiment.results.only("case_id", "category").distinct()
    }
    for category, then in sorted(baseline["categories"].items()):
        now = current["categories"].get(category)
        if now is None:
            report.regressions.append(f"category {category}: no cases ran (the baseline has some)")
            continue
        floor = float(then.get("rate", 0)) - tolerance
        if float(now["rate"]) < floor - 1e-9:
            dropped = [c for c in report.newly_failing if by_category.get(c) == category]
            report.regressions.append(
                f"category {category}: pass rate {now['rate']:.1%} is below the baseline "
                f"{float(then['rate']):.1%} minus {tolerance:.1%}"
                + (f"; newly failing: {', '.join(dropped)}" if dropped else "")
            )
    return report
