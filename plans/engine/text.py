"""Text every database can store: Unicode without unpaired surrogates.

JSON may spell a lone surrogate ("\\ud800") and Python keeps it in a str, but it has no UTF-8
encoding, so storing it fails. Untrusted text (plans, tool results, model output) goes through
here before it is stored.
"""

from __future__ import annotations

from typing import Any


def surrogate_in(value: Any) -> str | None:
    """An unpaired surrogate in value's text (dict keys included), or None."""
    pending = [value]
    while pending:  # a stack: values from outside may be nested arbitrarily deep
        item = pending.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return next(ch for ch in item if "\ud800" <= ch <= "\udfff")
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return None


def storable(value: Any) -> Any:
    """value with each unpaired surrogate in its text written out as an escape: \\ud800."""
    if isinstance(value, str):
        if _encodable(value):
            return value
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
