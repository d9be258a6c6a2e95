"""Small rules the executor applies: call identity, retry delays, budgets, declined calls."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

# Beyond this many doublings every delay is capped anyway; stopping here avoids float overflow.
_MAX_DOUBLINGS = 1000


def canonical_json(value: Any) -> str:
    """One spelling for equal JSON values: sorted keys, no spaces, unescaped Unicode."""
    return _CANONICAL.encode(value)


# Built once: json.dumps with non-default options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_numbers_as_values(value: Any) -> Any:
    """The value with each integral float written as the integer it equals (1.0 -> 1, -0.0 -> 0).

    JSON numbers are values, not spellings (RFC 8785 writes 1.0 as 1): identical calls must hash
    alike whichever form a model or a reviewer typed.
    """
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is dict:
        return {key: json_numbers_as_values(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [json_numbers_as_values(item) for item in value]
    return value


def args_sha256(tool: str, args: Mapping[str, Any]) -> str:
    """Hex SHA-256 identifying a call: the tool and its arguments, numbers compared by value."""
    payload = canonical_json({"tool": tool, "args": json_numbers_as_values(dict(args))})
    return hashlib.sha256(payload.encode()).hexdigest()


def legacy_args_sha256(tool: str, args: Mapping[str, Any]) -> str:
    """The hash approvals stored before numbers were compared by value (1.0 and 1 differed)."""
    payload = canonical_json({"tool": tool, "args": dict(args)})
    return hashlib.sha256(payload.encode()).hexdigest()


def args_match_sha256(stored: str, tool: str, args: Mapping[str, Any]) -> bool:
    """Does a stored call hash (current or legacy form) name this exact call?"""
    return stored == args_sha256(tool, args) or stored == legacy_args_sha256(tool, args)


def idempotency_key(tool: str, args: Mapping[str, Any], *, run_id: int, step: str) -> str:
    """The key a side effect is recorded under: one per run and step identity, so a retry, a
    reconciliation or a recovery of that step repeats it under the same key, while another run's
    identical call (approved on its own) gets a key of its own and happens too."""
    payload = canonical_json(
        {"run": run_id, "step": step, "call": args_sha256(tool, args)},
    )
    return hashlib.sha256(payload.encode()).hexdigest()


# What became of a destructive call made under a key: it acted, it may have acted, or it did not.
EFFECT_DONE = "done"
EFFECT_UNKNOWN = "unknown"
EFFECT_NOT_DONE = "not_done"
_EFFECT_RANK = {EFFECT_NOT_DONE: 0, EFFECT_UNKNOWN: 1, EFFECT_DONE: 2}


@dataclass(frozen=True)
class AttemptRecord:
    """One recorded call of a destructive step: its error, and a late outcome if one came."""

    error: str
    timed_out: bool = False
    late_arrived: bool = False
    late_error: str = ""
    late_result: Any = None


def effect_state(
    *, succeeded: bool, attempts: int, calls: Sequence[AttemptRecord]
) -> tuple[str, Any] | None:
    """(state, result) of a destructive step's effect; None if it was never called.

    A call that timed out with no late answer, or an attempt started with no record of its end
    (the worker died), may have acted: unknown. Only recorded refusals make "not done".
    """
    if succeeded:
        return EFFECT_DONE, None
    for call in calls:
        if call.late_arrived and not call.late_error:
            return EFFECT_DONE, call.late_result
    if attempts == 0:
        return None
    if attempts > len(calls) or any(c.timed_out and not c.late_arrived for c in calls):
        return EFFECT_UNKNOWN, None
    return EFFECT_NOT_DONE, None


@dataclass(frozen=True)
class PastEffect:
    """A destructive call of an earlier plan version, under its key: what became of it."""

    call: str  # args_sha256 of the tool and its arguments
    key: str
    state: str  # EFFECT_DONE, EFFECT_UNKNOWN or EFFECT_NOT_DONE
    result: Any
    origin: str  # where it happened (or was last tried): "plan v1 step 2"
    tool: str = ""
    args: Any = None  # as called, for the prompts that list what happened


def past_effects(records: Iterable[PastEffect]) -> list[PastEffect]:
    """One entry per key, in order of its first use, records given in (version, step) order.

    A later holder of the same key (a reuse, a reconcile, a retry in a later version) only
    raises what is known: not done < unknown < done, and a done effect keeps where it happened.
    """
    by_key: dict[str, PastEffect] = {}
    for record in records:
        known = by_key.get(record.key)
        if known is None:
            by_key[record.key] = record
        elif _EFFECT_RANK[record.state] > _EFFECT_RANK[known.state]:
            by_key[record.key] = replace(record, call=known.call)
    return list(by_key.values())


def past_effect_for(
    call: str, *, past: Sequence[PastEffect], held: Collection[str], repeat: bool
) -> PastEffect | None:
    """The earlier call a later version's identical destructive call continues, under its key.

    Identical calls match in order: the n-th keeps the n-th key, skipping keys steps of this
    version already hold. A step marked "repeat" is a new effect and continues none.
    """
    if repeat:
        return None
    return next((e for e in past if e.call == call and e.key not in held), None)


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry number attempt (from 1): full jitter, exponential cap."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    if base < 0 or cap < 0:
        raise ValueError(f"base and cap must not be negative, got base={base}, cap={cap}")
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, _MAX_DOUBLINGS))
    return rng.uniform(0, ceiling)


@dataclass(frozen=True)
class Budget:
    usd: Decimal
    tokens: int


def budget_problem(
    *,
    budget: Budget,
    spent_usd: Decimal,
    spent_tokens: int,
    next_call_usd: Decimal,
    next_call_tokens: int,
) -> str | None:
    """None if the next model call fits the budget, else a sentence naming what it would exceed."""
    total_usd = spent_usd + next_call_usd
    total_tokens = spent_tokens + next_call_tokens
    overruns = []
    if total_usd > budget.usd:
        overruns.append(f"{_usd(total_usd)} of its {_usd(budget.usd)} cost budget")
    if total_tokens > budget.tokens:
        overruns.append(f"{total_tokens:,} of its {budget.tokens:,}-token budget")
    if not overruns:
        return None
    return (
        f"The next model call (about {_usd(next_call_usd)} and {next_call_tokens:,} tokens) "
        f"would bring the run to {' and '.join(overruns)}."
    )


def blocked_result(tool: str, reason: str) -> str:
    """What a step's result says when a reviewer declined its call, so the model does not retry."""
    reason = reason.strip().rstrip(".") or "none given"
    return f"BLOCKED: a reviewer declined {tool}. Reason: {reason}. Do not retry."


def _usd(amount: Decimal) -> str:
    # Model calls cost fractions of a cent, so show up to six places but at least two.
    text = f"{Decimal(amount).quantize(Decimal('0.000001')):f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"
