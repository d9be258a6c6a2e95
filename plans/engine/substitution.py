"""Placeholders: "{{n}}" in a step's arguments stands for the result of step n.

"{{n.field}}", "{{n.field.sub}}" and "{{n[0]}}" stand for part of that result, and follow the
same rules as "{{n}}". A backslash before the braces, "\\{{", writes a literal "{{".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plans.engine.policies import canonical_json

# ASCII only: without re.ASCII, \d matches any Unicode digit (an Arabic-Indic one, U+0661, would
# name step 1) and \s any Unicode space, so text that only looks like a placeholder would resolve.
# Group 1 is the step id, group 2 the path into its result (".field" and "[index]" parts).
PLACEHOLDER = re.compile(
    r"(?<!\\)\{\{\s*(\d+)((?:\.[A-Za-z_][\w-]*|\[\s*\d+\s*\])*)\s*\}\}", re.ASCII
)
_PATH_PART = re.compile(r"\.([A-Za-z_][\w-]*)|\[\s*(\d+)\s*\]", re.ASCII)
# A placeholder or an escaped "\{{", the two things text substitution replaces, in one scan.
_TOKEN = re.compile(PLACEHOLDER.pattern + r"|\\(\{\{)", re.ASCII)
_KEYS_SHOWN = 20

type PathPart = str | int


@dataclass(frozen=True)
class Placeholder:
    """One placeholder: the step it names and the path into that step's result."""

    step_id: int
    path: tuple[PathPart, ...] = ()

    def __str__(self) -> str:
        return "{{" + str(self.step_id) + path_text(self.path) + "}}"


def path_text(path: Sequence[PathPart]) -> str:
    """A path as written in a placeholder: ".reference", "[0].name"."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


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


class MissingPath(UnresolvedPlaceholder):
    """A placeholder's path does not exist in its step's result; the message says what does."""

    def __init__(self, placeholder: Placeholder, reason: str) -> None:
        super().__init__(placeholder.step_id)
        self.placeholder = placeholder
        self.reason = reason

    def __str__(self) -> str:
        return f"placeholder {self.placeholder}: {self.reason}"


def placeholders(value: Any) -> Iterator[Placeholder]:
    """Every placeholder anywhere in value (through lists and dict values), in no set order.

    Raises ValueError for a step id or index too long for int() to convert.
    """
    pending = [value]
    # A stack rather than recursion: arguments from outside may be nested arbitrarily deep.
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            for match in PLACEHOLDER.finditer(item):
                yield _placeholder(match)
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())


def placeholder_refs(value: Any) -> set[int]:
    """The step ids that placeholders anywhere in value (through lists and dict values) name.

    Raises ValueError for a placeholder number too long for int() to convert.
    """
    return {placeholder.step_id for placeholder in placeholders(value)}


def resolve(value: Any, results: Mapping[int, Any]) -> Any:
    """value with its placeholders replaced by (parts of) step results; dict keys left untouched.

    A string that is exactly one placeholder becomes the selected value itself, keeping its JSON
    type; placeholders inside longer text become the value's text (strings as they are, anything
    else as compact JSON), and "\\{{" becomes "{{". Raises UnresolvedPlaceholder for a step
    without a result and MissingPath for a path its result does not have.
    """
    if isinstance(value, str):
        return _resolve_text(value, results)
    if isinstance(value, list):
        return [resolve(item, results) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, results) for key, item in value.items()}
    return value


def select(placeholder: Placeholder, results: Mapping[int, Any]) -> Any:
    """The part of a step's result that placeholder names."""
    try:
        value = results[placeholder.step_id]
    except KeyError:
        raise UnresolvedPlaceholder(placeholder.step_id) from None
    for depth, part in enumerate(placeholder.path):
        where = f"step {placeholder.step_id}'s result"
        if depth:
            where += f" at {path_text(placeholder.path[:depth])}"
        if isinstance(part, str):
            if not isinstance(value, dict):
                raise MissingPath(placeholder, f"{where} is {_kind(value)}, not an object")
            if part not in value:
                raise MissingPath(placeholder, f"{where} has no key {part!r} ({_keys(value)})")
            value = value[part]
        else:
            if not isinstance(value, list):
                raise MissingPath(placeholder, f"{where} is {_kind(value)}, not an array")
            if part >= len(value):
                raise MissingPath(placeholder, f"{where} has no item [{part}] ({_items(value)})")
            value = value[part]
    return value


def _resolve_text(text: str, results: Mapping[int, Any]) -> Any:
    exact = PLACEHOLDER.fullmatch(text)
    if exact:
        return select(_placeholder(exact), results)

    def replace(match: re.Match[str]) -> str:
        if match.group(3) is not None:  # an escaped "\{{"
            return "{{"
        return _as_text(select(_placeholder(match), results))

    return _TOKEN.sub(replace, text)


def _placeholder(match: re.Match[str]) -> Placeholder:
    path: list[PathPart] = []
    for part in _PATH_PART.finditer(match.group(2)):
        field, index = part.groups()
        path.append(field if field is not None else int(index))
    return Placeholder(int(match.group(1)), tuple(path))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _keys(value: Mapping[str, Any]) -> str:
    if not value:
        return "it is an empty object"
    names = sorted(str(key) for key in value)
    shown = ", ".join(names[:_KEYS_SHOWN])
    more = f" and {len(names) - _KEYS_SHOWN} more" if len(names) > _KEYS_SHOWN else ""
    return f"its keys: {shown}{more}"


def _items(value: list[Any]) -> str:
    if not value:
        return "it is empty"
    return "it has 1 item" if len(value) == 1 else f"it has {len(value)} items"


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    # Sorted keys: the same text from the tool's dict and from the one reloaded from the
    # database (PostgreSQL's jsonb reorders keys), so a resolved argument, and its approval's
    # hash, do not change when a run resumes.
    return canonical_json(result)
