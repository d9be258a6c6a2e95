"""What a destructive call will do, in one line: its tool and the amounts and recipients it carries.

The decision bar shows these for the steps a reviewer has ticked, so "Approve" says what it does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Argument names that carry money, and the currency their suffix names.
_AMOUNT = re.compile(r"(amount|price|total|cost|fare|sum)", re.IGNORECASE)
_CURRENCY_SUFFIX = {"_inr": "INR", "_usd": "USD", "_eur": "EUR", "_gbp": "GBP"}
# Argument names that say who or what the effect reaches.
_RECIPIENTS = ("to", "recipient", "email", "customer", "passenger", "guest", "account", "payee")
_MAX_VALUE_CHARS = 60


def effect_line(tool: str, args: Any) -> str:
    """ "issue_refund: INR 2,499 · order_id A-1001" — amounts first, then recipients and ids."""
    if not isinstance(args, Mapping):
        return tool
    amounts, reaches = [], []
    for name, value in args.items():
        key = str(name)
        if _AMOUNT.search(key) and _is_number(value):
            amounts.append(_money(key, value))
        elif key.lower() in _RECIPIENTS and isinstance(value, str):
            reaches.append(
                f"to {_short(value)}" if key.lower() == "to" else f"{key} {_short(value)}"
            )
        elif key.lower().endswith("_id") and isinstance(value, str | int):
            reaches.append(f"{key} {_short(str(value))}")
    parts = amounts + reaches + _where_and_when(args)
    return f"{tool}: {' · '.join(parts)}" if parts else tool


def effect_note(step: Any) -> str:
    """ "done in v1 (step 2), not repeated" for a destructive step an earlier plan version's
    identical call settled, "runs again" for one the plan marked a repeat, else ""."""
    origin = str(getattr(step, "reused_from", "") or "")
    if getattr(step, "destructive", False) and origin:
        return f"done in {_where(origin)}, not repeated"
    expected = str(getattr(step, "done_before", "") or "")
    if expected:  # a plan diff's step not run yet
        return f"done in {_where(expected)}, not repeated if its inputs come out the same"
    if getattr(step, "repeat", False):
        return "runs again"
    return ""


def _where(origin: str) -> str:
    """ "plan v1 step 2" -> "v1 (step 2)"."""
    version, _, step_id = origin.removeprefix("plan ").partition(" step ")
    return f"{version} (step {step_id})" if step_id else version


def _where_and_when(args: Mapping[str, Any]) -> list[str]:
    """Route, place and day of a booking-like call: "Delhi → Goa", "in Goa", "on 2026-12-20"."""
    text = {key: value for key, value in args.items() if isinstance(value, str)}
    parts = []
    if "origin" in text and "destination" in text:
        parts.append(f"{_short(text['origin'])} \u2192 {_short(text['destination'])}")
    elif "city" in text:
        parts.append(f"in {_short(text['city'])}")
    day = text.get("date") or text.get("check_in")
    if day:
        parts.append(f"on {_short(day)}")
    return parts


def _money(name: str, value: float) -> str:
    currency = next(
        (code for suffix, code in _CURRENCY_SUFFIX.items() if name.lower().endswith(suffix)), None
    )
    number = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
    return f"{currency} {number}" if currency else f"{name} {number}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "\u2026"
