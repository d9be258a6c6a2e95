"""A plan's cost forecast: the answer call's tokens from similar past runs, and tools' declared
per-call costs. Pure arithmetic; pricing the tokens is the caller's (plans.llm.pricing)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from statistics import median

TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# With no past answer call at all: a small answer over a small prompt (stated as the basis).
DEFAULT_ANSWER_TOKENS = {
    "input_tokens": 1500,
    "output_tokens": 400,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
}
BASIS_SAME_TOOLS = "same tools"
BASIS_ALL_RUNS = "all runs"
BASIS_DEFAULT = "default"


@dataclass(frozen=True)
class AnswerSample:
    """One past answer call: its token counts and the tool set of its run."""

    tools: frozenset[str]
    tokens: Mapping[str, int]


@dataclass(frozen=True)
class AnswerTokens:
    """The answer call's expected tokens, and what they were taken from."""

    basis: str
    samples: int
    tokens: dict[str, int]


def answer_tokens(tools: Iterable[str], history: Sequence[AnswerSample]) -> AnswerTokens:
    """Median tokens of past answers of runs with this plan's tool set; else of all; else the
    default."""
    wanted = frozenset(tools)
    similar = [sample for sample in history if sample.tools == wanted]
    for basis, samples in ((BASIS_SAME_TOOLS, similar), (BASIS_ALL_RUNS, list(history))):
        if samples:
            tokens = {key: int(median(s.tokens.get(key, 0) for s in samples)) for key in TOKEN_KEYS}
            return AnswerTokens(basis=basis, samples=len(samples), tokens=tokens)
    return AnswerTokens(basis=BASIS_DEFAULT, samples=0, tokens=dict(DEFAULT_ANSWER_TOKENS))


def tools_cost(
    tools: Sequence[str], declared: Mapping[str, Decimal | None]
) -> tuple[Decimal, list[str]]:
    """The declared per-call costs of the plan's calls, summed; and the tools declaring none."""
    total = Decimal(0)
    undeclared: list[str] = []
    for name in tools:
        cost = declared.get(name)
        if cost is None:
            if name not in undeclared:
                undeclared.append(name)
        else:
            total += cost
    return total, undeclared


def forecast_error(forecast_usd: Decimal, actual_usd: Decimal) -> Decimal | None:
    """How far the forecast was off, as a fraction of the actual cost (None if it was 0)."""
    if actual_usd == 0:
        return None
    return (forecast_usd - actual_usd) / actual_usd
