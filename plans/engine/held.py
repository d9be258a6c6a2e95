"""Large results by reference: the extract a prompt shows of a result held whole, and slices.

A result over the prompt limit is stored whole on its step; prompts show its first part, its
shape and a reference ("v1.step3": plan version 1, step 3 of the same run) that the
result_slice tool reads more of.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# The most a result_slice call returns at once: well under the prompt limit, so a slice is
# never itself held by reference.
SLICE_MAX_CHARS = 4000

_REF = re.compile(r"^v(\d{1,6})\.step(\d{1,9})$")
_PATH_PART = re.compile(r"\[(-?\d+)\]|\.?([^.\[\]]+)")
_SHAPE_KEYS = 12


def held_ref(version: int, step_id: int) -> str:
    """The reference a prompt gives a held result: plan version and step id, within its run."""
    return f"v{version}.step{step_id}"


def held_ref_parts(ref: str) -> tuple[int, int]:
    """(plan version, step id) of a reference; ValueError naming the expected form if not one."""
    match = _REF.match(ref.strip()) if isinstance(ref, str) else None
    if match is None:
        raise ValueError(f'{ref!r} is not a held result\'s reference such as "v1.step3"')
    return int(match[1]), int(match[2])


def result_shape(value: Any) -> str:
    """A short description of a value's shape: its kind, lengths and (first) keys."""
    if isinstance(value, str):
        return f"text of {len(value):,} chars, {value.count(chr(10)) + 1:,} lines"
    if isinstance(value, Mapping):
        keys = list(value)
        parts = [f"{key} ({_brief(value[key])})" for key in keys[:_SHAPE_KEYS]]
        more = f", and {len(keys) - _SHAPE_KEYS:,} more keys" if len(keys) > _SHAPE_KEYS else ""
        return f"object with {len(keys):,} keys: {', '.join(parts)}{more}"
    if isinstance(value, list):
        return _brief(value)
    return type(value).__name__


def _brief(value: Any) -> str:
    if isinstance(value, str):
        return f"text of {len(value):,} chars"
    if isinstance(value, Mapping):
        return f"object with {len(value):,} keys"
    if not isinstance(value, list):
        return "null" if value is None else type(value).__name__
    if value and all(isinstance(item, Mapping) for item in value):
        keys = list(dict.fromkeys(key for item in value[:50] for key in item))
        shown = ", ".join(str(key) for key in keys[:_SHAPE_KEYS])
        more = ", ..." if len(keys) > _SHAPE_KEYS else ""
        return f"list of {len(value):,} objects with keys {shown}{more}"
    kinds = sorted({_brief(item).split(" ")[0] for item in value[:50]})
    return f"list of {len(value):,} items ({', '.join(kinds) or 'empty'})"


def result_extract(value: Any, *, text: str, step_id: Any, ref: str, head_chars: int) -> str:
    """What a prompt shows of a result too large to paste: size, reference, shape, first part."""
    return (
        f"result of step {step_id}: {len(text):,} chars, held whole as ref {ref} (read more "
        f'with the result_slice tool: {{"ref": "{ref}", "offset": {head_chars}}}, or a "path" '
        f'such as "[0]" or "rows[2].name"); shape: {result_shape(value)}; '
        f"first {min(head_chars, len(text)):,} chars:\n{text[:head_chars]}"
    )


def result_part(value: Any, *, path: str = "", offset: int = 0, length: int) -> dict[str, Any]:
    """A bounded part of a held result: the value at path (as text), from offset, length chars.

    ValueError naming the part of the path that does not exist.
    """
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, got {offset}")
    if not 1 <= length <= SLICE_MAX_CHARS:
        raise ValueError(f"length must be from 1 to {SLICE_MAX_CHARS:,}, got {length}")
    selected = _at_path(value, path)
    text = (
        selected
        if isinstance(selected, str)
        else json.dumps(selected, ensure_ascii=False, default=str)
    )
    part = text[offset : offset + length]
    end = offset + len(part)
    return {
        "path": path,
        "total_chars": len(text),
        "offset": offset,
        "text": part,
        "shape": result_shape(selected),
        "next_offset": end if end < len(text) else None,
    }


def _at_path(value: Any, path: str) -> Any:
    where = ""
    rest = path.strip()
    while rest:
        match = _PATH_PART.match(rest)
        if match is None or not match[0]:
            raise ValueError(f"cannot read the path {path!r} at {rest!r}")
        rest = rest[match.end() :]
        index, key = match[1], match[2]
        if index is not None:
            if not isinstance(value, list):
                raise ValueError(f"{where or 'the result'} is not a list: no [{index}]")
            if not -len(value) <= int(index) < len(value):
                raise ValueError(f"{where or 'the result'} has {len(value):,} items: no [{index}]")
            value = value[int(index)]
            where += f"[{index}]"
        elif isinstance(value, Mapping) and key in value:
            value = value[key]
            where += f".{key}" if where else key
        elif isinstance(value, list) and key.lstrip("-").isdigit():
            if not -len(value) <= int(key) < len(value):
                raise ValueError(f"{where or 'the result'} has {len(value):,} items: no {key}")
            value = value[int(key)]
            where += f"[{key}]"
        else:
            raise ValueError(f"{where or 'the result'} has no key {key!r}")
    return value
