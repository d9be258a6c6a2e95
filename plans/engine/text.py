"""Text every database can store: no unpaired surrogates, no NUL characters.

JSON may spell both ("\\ud800", "\\u0000") and Python keeps them in a str, but a lone surrogate
has no UTF-8 encoding and PostgreSQL refuses NUL in text and jsonb, so storing either fails.
Untrusted text (goals, plans, tool results, model output) goes through here before it is stored.
Typed numbers (query strings, forms, a socket's ?after=) are read here too: whole_number.
"""

from __future__ import annotations

from typing import Any


def unstorable_in(value: Any) -> str | None:
    """A description of one character in value's text (dict keys included) that cannot be
    stored, such as "an unpaired surrogate ('\\ud800')", or None if there is none."""
    pending = [value]
    while pending:  # a stack: values from outside may be nested arbitrarily deep
        item = pending.pop()
        if isinstance(item, str):
            if not _storable_text(item):
                return _describe(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return None


def storable(value: Any) -> Any:
    """value with each character that cannot be stored written out as its escape (\\ud800)."""
    if isinstance(value, str):
        if _storable_text(value):
            return value
        escaped = value.replace("\x00", "\\u0000")
        return escaped.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def _storable_text(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _describe(text: str) -> str:
    if "\x00" in text:
        return "a NUL character ('\\x00')"
    surrogate = next(ch for ch in text if "\ud800" <= ch <= "\udfff")
    return f"an unpaired surrogate ({surrogate!r})"


# The largest id a database column holds (a signed 64-bit integer).
MAX_ID = 2**63 - 1


def whole_number(text: str, *, maximum: int = MAX_ID) -> int | None:
    """The text as a whole number from 0 to maximum, or None (str.isdigit() also takes '²')."""
    if not (text.isascii() and text.isdecimal()) or len(text) > len(str(maximum)):
        return None
    number = int(text)
    return number if number <= maximum else None
