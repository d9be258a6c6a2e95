"""Placeholders: "{{n}}" in a step's arguments stands for the result of step n."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from plans.engine.policies import canonical_json

# ASCII only: without re.ASCII, \d matches any Unicode digit (an Arabic-Indic one, U+0661, would
# name step 1) and \s any Unicode space, so text that only looks like a placeholder would resolve.
PLACEHOLDER = re.compile(r"\{\{\s*(\d+)\s*\}\}", re.ASCII)


class UnresolvedPlaceholder(KeyError):
    """A placeholder names a step that has no result to substitute."""

    def __init__(self, step_id: int) -> None:
        super().__init__(step_id)
        self.step_id = step_id

    def __str__(self) -> str:
        # KeyError would print the repr of its argument.
        return (
            f"placeholder {{{{{self.step_id}}}}} refers to step {self.step_id}, which has no result"
        )


def placeholder_refs(value: Any) -> set[int]:
    """The step ids that placeholders anywhere in value (through lists and dict values) name.

    Raises ValueError for a placeholder number too long for int() to convert.
    """
    refs: set[int] = set()
    pending = [value]
    # A stack rather than recursion: arguments from outside may be nested arbitrarily deep.
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            refs.update(int(match.group(1)) for match in PLACEHOLDER.finditer(item))
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
    return refs


def resolve(value: Any, results: Mapping[int, Any]) -> Any:
    """value with its placeholders replaced by step results; dict keys are left untouched.

    A string that is exactly one placeholder becomes the result itself, keeping its JSON type;
    placeholders inside longer text become the result's text (strings as they are, anything
    else as compact JSON).
    """
    if isinstance(value, str):
        return _resolve_text(value, results)
    if isinstance(value, list):
        return [resolve(item, results) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, results) for key, item in value.items()}
    return value


def _resolve_text(text: str, results: Mapping[int, Any]) -> Any:
    exact = PLACEHOLDER.fullmatch(text)
    if exact:
        return _result(int(exact.group(1)), results)
    return PLACEHOLDER.sub(lambda match: _as_text(_result(int(match.group(1)), results)), text)


def _result(step_id: int, results: Mapping[int, Any]) -> Any:
    try:
        return results[step_id]
    except KeyError:
        raise UnresolvedPlaceholder(step_id) from None


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    # Sorted keys: the same text from the tool's dict and from the one reloaded from the
    # database (PostgreSQL's jsonb reorders keys), so a resolved argument, and its approval's
    # hash, do not change when a run resumes.
    return canonical_json(result)
