"""What a service refuses, with a code for programs and a sentence for people; and typed text.

Each edge maps the codes to its statuses once: the pages in plans/views/refusals.py, the API
in plans/api/errors.py. Nothing branches on a refusal's message.
"""

from __future__ import annotations

from plans.engine import unstorable_in


class Refused(Exception):
    """A request that cannot be carried out; nothing was changed. `code` names the rule."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def text_clean(
    text: str | None,
    *,
    refused: type[Refused],
    code: str,
    holds: str,
    empty: str = "",
    max_chars: int | None = None,
    too_long: str = "",
) -> str:
    """Typed text as stored: trimmed, refused when empty (if `empty` says why), over
    `max_chars` (`too_long`, with {length} and {limit}) or holding text no database stores.

    `holds` begins the last sentence: "The goal holds", "The instructions hold".
    """
    text = (text or "").strip()
    if empty and not text:
        raise refused(code, empty)
    if max_chars is not None and len(text) > max_chars:
        raise refused(code, too_long.format(length=len(text), limit=max_chars))
    unstorable = unstorable_in(text)
    if unstorable is not None:
        raise refused(code, f"{holds} text that cannot be stored: {unstorable}.")
    return text
