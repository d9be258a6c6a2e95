"""Experiments for the evals page: the recent ones, and two side by side case by case."""

from __future__ import annotations

from dataclasses import dataclass, field

from plans.models import EvalResult, Experiment

RECENT_EXPERIMENTS = 50


@dataclass
class CaseVerdict:
    """One case in one experiment, over its attempts."""

    passed: int = 0
    attempts: int = 0
    failures: list[str] = field(default_factory=list)  # of the first failed attempt
    run_id: int | None = None  # the first failed attempt's run, else the first run
    model_calls: int = 0

    @property
    def all_passed(self) -> bool:
        return self.attempts > 0 and self.passed == self.attempts


@dataclass(frozen=True)
class CaseRow:
    case_id: str
    category: str
    a: CaseVerdict | None
    b: CaseVerdict | None

    @property
    def changed(self) -> bool:
        verdicts = [v.all_passed if v else None for v in (self.a, self.b)]
        return verdicts[0] != verdicts[1]


@dataclass(frozen=True)
class CategoryRow:
    name: str
    a: dict | None
    b: dict | None

    @property
    def delta(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return float(self.b["rate"]) - float(self.a["rate"])


@dataclass(frozen=True)
class Comparison:
    a: Experiment
    b: Experiment
    categories: list[CategoryRow]
    cases: list[CaseRow]

    @property
    def changed(self) -> list[CaseRow]:
        return [row for row in self.cases if row.changed]


def experiments_recent(*, limit: int = RECENT_EXPERIMENTS) -> list[Experiment]:
    """The latest finished experiments, newest first."""
    finished = Experiment.objects.filter(finished_at__isnull=False)
    return list(finished.order_by("-created_at", "-pk")[:limit])


def experiment_comparison(*, a_id: int, b_id: int) -> Comparison | None:
    """Two experiments side by side, or None if either does not exist."""
    found = {e.pk: e for e in Experiment.objects.filter(pk__in=[a_id, b_id])}
    if a_id not in found or b_id not in found:
        return None
    a, b = found[a_id], found[b_id]
    verdicts = {a_id: _verdicts(a), b_id: _verdicts(b)}
    categories_seen: dict[str, str] = {}
    for experiment in (a, b):
        for case_id, (category, _) in verdicts[experiment.pk].items():
            categories_seen.setdefault(case_id, category)
    cases = [
        CaseRow(
            case_id=case_id,
            category=category,
            a=verdicts[a_id].get(case_id, ("", None))[1],
            b=verdicts[b_id].get(case_id, ("", None))[1],
        )
        for case_id, category in sorted(categories_seen.items(), key=lambda i: (i[1], i[0]))
    ]
    a_rates = a.summary.get("categories", {})
    b_rates = b.summary.get("categories", {})
    names = list(dict.fromkeys([*a_rates, *b_rates]))
    categories = [CategoryRow(n, a_rates.get(n), b_rates.get(n)) for n in names]
    categories.append(CategoryRow("overall", a.summary.get("overall"), b.summary.get("overall")))
    return Comparison(a=a, b=b, categories=categories, cases=cases)


def _verdicts(experiment: Experiment) -> dict[str, tuple[str, CaseVerdict]]:
    results = EvalResult.objects.filter(experiment=experiment).order_by("case_id", "attempt")
    verdicts: dict[str, tuple[str, CaseVerdict]] = {}
    for result in results:
        _, verdict = verdicts.setdefault(result.case_id, (result.category, CaseVerdict()))
        verdict.attempts += 1
        verdict.model_calls += result.model_calls
        if result.passed:
            verdict.passed += 1
            if verdict.run_id is None:
                verdict.run_id = result.run_id
        elif not verdict.failures:
            verdict.failures = list(result.failures)
            verdict.run_id = result.run_id
    return verdicts
