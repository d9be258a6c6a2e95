"""The numbers a text states, normalised so "92,800" and "92800.0" read as 92800."""

from __future__ import annotations

import re

_CITATION = re.compile(r"\[\s*step\s+\d+\s*\]", re.IGNORECASE)
_FIGURE = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{2,3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def figures(text: str) -> set[str]:
    """The numbers in text: grouping commas (Western or Indian) dropped, trailing zeros too.

    The N of a citation "[step N]" is not a figure the text states.
    """
    found = set()
    for match in _FIGURE.findall(_CITATION.sub(" ", text)):
        plain = match.replace(",", "")
        if "." in plain:
            plain = plain.rstrip("0").rstrip(".")
        found.add(plain)
    return found
