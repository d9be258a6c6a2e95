"""The statistics evals report: pass-rate intervals and chance-corrected agreement."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile


@dataclass(frozen=True)
class Rate:
    passed: int
    trials: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.passed / self.trials if self.trials else 0.0

    def as_json(self) -> dict[str, float | int]:
        return {
            "passed": self.passed,
            "trials": self.trials,
            "rate": round(self.rate, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
        }


def wilson_interval(passed: int, trials: int, z: float = Z_95) -> Rate:
    """The pass rate with its Wilson score interval (sound at 0%, 100% and small n)."""
    if trials < 0 or not 0 <= passed <= trials:
        raise ValueError(f"need 0 <= passed <= trials, got {passed} of {trials}")
    if trials == 0:
        return Rate(0, 0, 0.0, 1.0)
    p = passed / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # At 0 and at n the interval touches the end exactly; rounding must not leave it a hair off.
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == trials else min(1.0, centre + half)
    return Rate(passed, trials, low, high)


@dataclass(frozen=True)
class Agreement:
    n: int
    observed: float  # raw agreement
    expected: float  # agreement expected by chance from each rater's label frequencies
    kappa: float


def cohens_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> Agreement:
    """Raw agreement and Cohen's kappa between two raters labelling the same items."""
    if len(first) != len(second):
        raise ValueError(f"the raters labelled {len(first)} and {len(second)} items")
    n = len(first)
    if n == 0:
        raise ValueError("no items to compare")
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    counts_a, counts_b = Counter(first), Counter(second)
    expected = sum(counts_a[label] * counts_b[label] for label in counts_a) / (n * n)
    # Both raters gave one and the same label throughout: perfect, if trivially so.
    kappa = 1.0 if expected == 1 else (observed - expected) / (1 - expected)
    return Agreement(n=n, observed=observed, expected=expected, kappa=kappa)
