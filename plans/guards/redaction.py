"""Redaction of sensitive text (payment card numbers by default) before it is stored."""

from __future__ import annotations

import functools
import re
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from plans.engine import canonical_json

# 13-19 digits, optionally grouped by spaces or dashes, standing alone: not the digits of a
# decimal fraction, a longer run, an exponent or an id mixing letters and digits. Confirmed by
# a card network's prefix and length, and the Luhn checksum.
CARD_NUMBER = re.compile(r"(?<![\w.,+-])(?:\d[ -]?){12,18}\d(?![\w-]|[.,]\d)")
_DIGITS = b"0123456789"


def redact(value: Any) -> Any:
    """The value with every sensitive match replaced, recursively through lists and dicts."""
    if isinstance(value, str):
        return _redact_text(value) if _might_contain_secrets(value) else value
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def redacted_json(value: Any) -> tuple[Any, str]:
    """redact(value), and its canonical JSON text; encoded once when nothing needs redacting.

    Encoding keeps every digit, so JSON text with too few digits for a card number (and no
    configured patterns) shows that redacting would change nothing, without walking the value.
    """
    text = canonical_json(value)
    if not _might_contain_secrets(text):
        return value, text
    value = redact(value)
    return value, canonical_json(value)


def _might_contain_secrets(text: str) -> bool:
    # Cheap pre-check for the common case: fewer than 13 digits and no configured patterns.
    if _patterns():
        return True
    if len(text) < 13:
        return False
    if text.isascii():  # bytes.translate: a tenth of the time str.translate takes
        return len(text) - len(text.encode().translate(None, _DIGITS)) >= 13
    return sum(ch.isdigit() for ch in text) >= 13  # \d also matches other scripts' digits


def _redact_text(text: str) -> str:
    if _redact_card_numbers():
        text = CARD_NUMBER.sub(_card_replacement, text)
    for pattern in _patterns():
        text = pattern.sub("[redacted]", text)
    return text


def _card_replacement(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    if _card_network_length(digits) and _luhn_valid(digits):
        return f"[redacted card ending {digits[-4:]}]"
    return match.group()


# Issuer prefixes (as digit-string ranges) and the lengths each network issues.
_NETWORKS: tuple[tuple[str, str, frozenset[int]], ...] = (
    ("4", "4", frozenset({13, 16, 19})),  # Visa
    ("51", "55", frozenset({16})),  # Mastercard
    ("2221", "2720", frozenset({16})),  # Mastercard 2-series
    ("34", "34", frozenset({15})),  # American Express
    ("37", "37", frozenset({15})),
    ("300", "305", frozenset(range(14, 20))),  # Diners Club
    ("36", "36", frozenset(range(14, 20))),
    ("38", "39", frozenset(range(14, 20))),
    ("3528", "3589", frozenset(range(16, 20))),  # JCB
    ("6011", "6011", frozenset(range(16, 20))),  # Discover
    ("644", "649", frozenset(range(16, 20))),
    ("65", "65", frozenset(range(16, 20))),
    ("62", "62", frozenset(range(16, 20))),  # UnionPay
    ("50", "50", frozenset(range(13, 20))),  # Maestro
    ("56", "69", frozenset(range(13, 20))),
    ("60", "60", frozenset(range(13, 20))),  # RuPay
    ("81", "82", frozenset({16})),
)


def _card_network_length(digits: str) -> bool:
    """Does some card network issue numbers of this prefix and length?"""
    return any(
        len(digits) in lengths and low <= digits[: len(low)] <= high
        for low, high, lengths in _NETWORKS
    )


def _luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        digit = int(char)
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


@functools.cache
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


def _patterns() -> tuple[re.Pattern[str], ...]:
    if _configured["patterns"] is None:
        _configured["patterns"] = _compiled(tuple(settings.AGENTSITE_REDACTION_PATTERNS))
    return _configured["patterns"]


def _redact_card_numbers() -> bool:
    if _configured["cards"] is None:
        _configured["cards"] = bool(settings.AGENTSITE_REDACT_CARD_NUMBERS)
    return _configured["cards"]


# Settings read once (this runs for every string stored), and again when a setting changes.
_configured: dict[str, Any] = {"patterns": None, "cards": None}


@receiver(setting_changed)
def _forget_configuration(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("AGENTSITE_REDACT"):
        _configured.update(patterns=None, cards=None)
