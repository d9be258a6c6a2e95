"""Reading numbers from query strings and forms, where any text may arrive."""

from __future__ import annotations

# The largest id a database column holds (a signed 64-bit integer).
MAX_ID = 2**63 - 1


def whole_number(text: str, *, maximum: int = MAX_ID) -> int | None:
    """The text as a whole number from 0 to maximum, or None (str.isdigit() also takes '²')."""
    if not (text.isascii() and text.isdecimal()) or len(text) > len(str(maximum)):
        return None
    number = int(text)
    return number if number <= maximum else None
