"""Getting the plan's JSON object out of what the planner model wrote."""

from __future__ import annotations

import json
import re
from typing import Any

from plans.engine.argschema import json_type_name
from plans.engine.plan import PlanParseError

MAX_PLANNER_OUTPUT_CHARS = 200_000

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
# Where a JSON object can begin: a brace followed by a key or by the closing brace.
_OBJECT_START = re.compile(r'\{\s*["}]')
_MAX_FAILED_STARTS = 100
_DECODER = json.JSONDecoder()
_NOT_JSON = object()
_TOO_DEEP = "planner output is nested too deeply to read"


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
        return json.loads(region)
    except RecursionError:
        raise PlanParseError(_TOO_DEEP) from None
    except ValueError:
        return _NOT_JSON


def _single_embedded_object(text: str, start: int, end: int) -> dict[str, Any]:
    objects: list[dict[str, Any]] = []
    errors: list[ValueError] = []
    candidate = _OBJECT_START.search(text, start, end)
    # Each failed decode costs O(len(text)) to locate its error, so only so many are tried.
    while candidate is not None and len(errors) < _MAX_FAILED_STARTS:
        decoded = _decode_at(text, candidate.start())
        if isinstance(decoded, ValueError):
            errors.append(decoded)
            candidate = _OBJECT_START.search(text, candidate.start() + 1, end)
            continue
        value, after = decoded
        if after <= end:
            objects.append(value)
        # Objects nested inside this one are not separate candidates.
        candidate = _OBJECT_START.search(text, after, end)
    if len(objects) == 1:
        return objects[0]
    if objects:
        raise PlanParseError(f"planner output has {len(objects)} JSON objects; expected one")
    if not errors:
        # No brace looked like an object's start; the first one says best what is wrong.
        brace = text.find("{", start, end)
        decoded = _decode_at(text, brace) if brace != -1 else None
        if isinstance(decoded, ValueError):
            errors.append(decoded)
    if errors:
        raise PlanParseError(_describe(errors[0]))
    raise PlanParseError("planner output has no JSON object")


def _decode_at(text: str, position: int) -> tuple[Any, int] | ValueError:
    """The JSON value starting at position and the index after it, or why there is none."""
    try:
        return _DECODER.raw_decode(text, position)
    except RecursionError:
        raise PlanParseError(_TOO_DEEP) from None
    except ValueError as error:
        return error


def _describe(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return (
            f"planner output is not valid JSON: {error.msg} "
            f"at line {error.lineno} column {error.colno}"
        )
    # json raises a plain ValueError only for integers too long to convert.
    return f"planner output cannot be read: {error}"
