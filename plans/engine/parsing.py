"""Getting the plan's JSON object out of what the planner model wrote."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from plans.engine.argschema import json_type_name
from plans.engine.plan import PlanParseError

MAX_PLANNER_OUTPUT_CHARS = 200_000

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
# Where a JSON object can begin: a brace followed by a key or by the closing brace.
_OBJECT_START = re.compile(r'\{\s*["}]')
# What moves the bracket depth: a whole string (so brackets inside it do not count), or a bracket.
# A string left open runs to the end of the text.
_DEPTH_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_MAX_FAILED_STARTS = 100
_DECODER = json.JSONDecoder()
_NOT_JSON = object()


class JSONUnreadable(ValueError):
    """JSON text from outside that cannot be read; str() says why, to follow the text's name.

    "is not valid JSON: Expecting value at line 1 column 3", "is nested too deeply to read", or
    "cannot be read: an integer has more than 4,300 digits"; plural is the same said of a plural
    name ("are ...").
    """

    def __init__(
        self,
        singular: str,
        plural: str,
        *,
        kind: Literal["syntax", "too_deep", "integer_too_long"],
    ) -> None:
        super().__init__(singular)
        self.plural = plural
        self.kind = kind


def read_json(text: str) -> Any:
    """json.loads for text from a file, a form or a model: every failure is JSONUnreadable.

    json.loads itself raises RecursionError for deep nesting and a bare ValueError for an
    integer too long to convert, neither of which says where or is fit to show.
    """
    with _reading_json():
        return json.loads(text)


def _read_json_at(text: str, position: int) -> tuple[Any, int]:
    """The JSON value starting at position and the index after it; JSONUnreadable if none."""
    with _reading_json():
        return _DECODER.raw_decode(text, position)


@contextmanager
def _reading_json() -> Iterator[None]:
    try:
        yield
    except RecursionError:
        raise JSONUnreadable(
            "is nested too deeply to read", "are nested too deeply to read", kind="too_deep"
        ) from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        # "Unterminated string starting at" already ends in "at".
        where = where if error.msg.endswith(" at") else f"at {where}"
        reason = f"not valid JSON: {error.msg} {where}"
        raise JSONUnreadable(f"is {reason}", f"are {reason}", kind="syntax") from None
    except ValueError:
        # json raises a bare ValueError only for an integer too long for int() to convert.
        reason = f"cannot be read: an integer has more than {sys.get_int_max_str_digits():,} digits"
        raise JSONUnreadable(reason, reason, kind="integer_too_long") from None


def parse_planner_output(text: str) -> dict[str, Any]:
    """The one JSON object in text: bare, in a ```json fence, or with prose around it.

    Raises PlanParseError saying what is wrong: empty, too long, no object, several objects,
    invalid JSON (with its line and column), or JSON that is not an object.
    """
    if not isinstance(text, str):
        raise PlanParseError(f"planner output must be text, got {type(text).__name__}")
    if len(text) > MAX_PLANNER_OUTPUT_CHARS:
        raise PlanParseError(
            f"planner output is too long: {len(text):,} characters "
            f"(at most {MAX_PLANNER_OUTPUT_CHARS:,})"
        )
    if not text.strip():
        raise PlanParseError("planner output is empty")
    start, end = _json_region(text)
    whole = _decode_whole(text, start, end)
    if whole is not _NOT_JSON:
        if not isinstance(whole, dict):
            raise PlanParseError(
                f"planner output must be a JSON object, got {json_type_name(whole)}"
            )
        return whole
    return _single_embedded_object(text, start, end)


def _json_region(text: str) -> tuple[int, int]:
    # A single fenced block is where the model put its JSON; with several, search everything.
    fences = list(_FENCE.finditer(text))
    if len(fences) == 1:
        return fences[0].span(1)
    return 0, len(text)


def _decode_whole(text: str, start: int, end: int) -> Any:
    """The region decoded as one JSON value, or _NOT_JSON."""
    region = text[start:end].strip()
    try:
        return read_json(region)
    except JSONUnreadable as error:
        if error.kind == "too_deep":
            raise PlanParseError(_describe(error)) from None
        return _NOT_JSON


def _single_embedded_object(text: str, start: int, end: int) -> dict[str, Any]:
    objects: list[dict[str, Any]] = []
    # Objects inside a broken one: a step of a plan cut short, or the plan itself in a broken
    # wrapper or after a stray '{"' in the prose. Only one with steps is taken from these.
    inside_broken: list[dict[str, Any]] = []
    broken_until = start
    errors: list[JSONUnreadable] = []
    candidate = _OBJECT_START.search(text, start, end)
    # Each failed decode costs O(len(text)) to locate its error, so only so many are tried.
    while candidate is not None and len(errors) < _MAX_FAILED_STARTS:
        decoded = _decode_at(text, candidate.start())
        if isinstance(decoded, JSONUnreadable):
            errors.append(decoded)
            closed_at = _bracket_end(text, candidate.start(), end)
            broken_until = max(broken_until, end if closed_at is None else closed_at)
            candidate = _OBJECT_START.search(text, candidate.start() + 1, end)
            continue
        value, after = decoded
        if after <= end:
            (inside_broken if candidate.start() < broken_until else objects).append(value)
        # Objects nested inside this one are not separate candidates.
        candidate = _OBJECT_START.search(text, after, end)
    if not objects:
        objects = [value for value in inside_broken if "steps" in value]
    if len(objects) == 1:
        return objects[0]
    if objects:
        raise PlanParseError(f"planner output has {len(objects)} JSON objects; expected one")
    if not errors:
        # No brace looked like an object's start; the first one says best what is wrong.
        brace = text.find("{", start, end)
        first = _decode_at(text, brace) if brace != -1 else None
        if isinstance(first, JSONUnreadable):
            errors.append(first)
    if errors:
        raise PlanParseError(_describe(errors[0]))
    raise PlanParseError("planner output has no JSON object")


def _decode_at(text: str, position: int) -> tuple[Any, int] | JSONUnreadable:
    """The JSON value starting at position and the index after it, or why there is none."""
    try:
        return _read_json_at(text, position)
    except JSONUnreadable as error:
        if error.kind == "too_deep":
            raise PlanParseError(_describe(error)) from None
        return error


def _bracket_end(text: str, position: int, end: int) -> int | None:
    """The index after the bracket closing the one at position (strings skipped), or None."""
    depth = 0
    for token in _DEPTH_TOKEN.finditer(text, position, end):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
        elif bracket in ("]", "}"):
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def _describe(error: JSONUnreadable) -> str:
    return f"planner output {error}"
