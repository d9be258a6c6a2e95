"""A small JSON-schema subset for checking tool arguments, with messages that name the argument.

Supported keywords: type (one name or a list of them), properties, required,
additionalProperties (false only), items, enum, minimum, maximum, minLength, maxLength and
format (date, date-time, uuid and decimal strings).
Other keywords are ignored. A schema naming its dialect with "$schema" is checked in full by
``jsonschema_args`` instead. Booleans are not integers or numbers, and an integral float such
as 3.0 is a number but not an integer: tools are Python functions that receive the value as is.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from plans.engine.jsonschema_args import check_json_schema_args
from plans.engine.substitution import PLACEHOLDER, PathPart, path_text

_ARTICLED = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def json_type_name(value: Any) -> str:
    """The JSON type of a Python value ("object", "array", "integer", ...), or its class name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_args(
    schema: Mapping[str, Any], args: Any, *, allow_placeholders: bool = False
) -> list[str]:
    """Every way args breaks the tool's schema, as sentences; empty when they conform.

    With allow_placeholders, an exact "{{n}}" matches any type (its result is not known yet) and
    a string containing placeholders matches type string.
    """
    if not isinstance(args, dict):
        return [f"arguments must be an object, got {json_type_name(args)}"]
    if "$schema" in schema:
        # A schema naming its dialect is full JSON Schema (an MCP tool's): checked in full.
        return check_json_schema_args(schema, args, allow_placeholders=allow_placeholders)
    return _ArgChecker(allow_placeholders).object_problems(schema, args, path="")


class _ArgChecker:
    def __init__(self, allow_placeholders: bool) -> None:
        self.allow_placeholders = allow_placeholders

    def object_problems(self, schema: Mapping[str, Any], value: dict, *, path: str) -> list[str]:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        problems = [
            f"missing required argument {_quote(_join(path, name))}"
            for name in schema.get("required") or ()
            if name not in value
        ]
        for name, item in value.items():
            item_path = _join(path, str(name))
            if name in properties:
                problems += self.value_problems(properties[name], item, path=item_path)
            elif schema.get("additionalProperties") is False:
                problems.append(f"unexpected argument {_quote(item_path)}")
        return problems

    def value_problems(self, schema: Mapping[str, Any], value: Any, *, path: str) -> list[str]:
        if self.allow_placeholders and isinstance(value, str) and PLACEHOLDER.search(value):
            return self._placeholder_problems(schema, value, path=path)
        types = _schema_types(schema)
        if types and not any(_IS_TYPE[name](value) for name in types):
            expected = " or ".join(_ARTICLED.get(name, name) for name in types)
            return [f"argument {_quote(path)} must be {expected}, got {_got(value)}"]
        if "enum" in schema and not any(_same_json(value, option) for option in schema["enum"]):
            options = ", ".join(_literal(option) for option in schema["enum"])
            return [f"argument {_quote(path)} must be one of {options}"]
        return self._constraint_problems(schema, value, path=path)

    def _placeholder_problems(
        self, schema: Mapping[str, Any], value: str, *, path: str
    ) -> list[str]:
        if PLACEHOLDER.fullmatch(value):
            return []  # the result may have any type; it is checked again once substituted
        types = _schema_types(schema)
        if types and "string" not in types:
            expected = " or ".join(_ARTICLED.get(name, name) for name in types)
            return [f"argument {_quote(path)} must be {expected}, got string"]
        return []  # the text is not known until its placeholders are filled

    def _constraint_problems(
        self, schema: Mapping[str, Any], value: Any, *, path: str
    ) -> list[str]:
        if isinstance(value, dict):
            return self.object_problems(schema, value, path=path)
        if isinstance(value, list):
            item_schema = schema.get("items")
            if not isinstance(item_schema, Mapping):
                return []
            problems: list[str] = []
            for index, item in enumerate(value):
                problems += self.value_problems(item_schema, item, path=f"{path}[{index}]")
            return problems
        if isinstance(value, str):
            problems = _length_problems(schema, value, path=path)
            if "format" in schema:
                problems += _format_problems(schema["format"], value, path=path)
            return problems
        if _is_number(value):
            return _range_problems(schema, value, path=path)
        return []


def _format_problems(name: Any, value: str, *, path: str) -> list[str]:
    check = _FORMATS.get(name) if isinstance(name, str) else None
    if check is None or check[0](value):
        return []  # an unknown format is not checked
    return [f"argument {_quote(path)} must be {check[1]}, got {value!r}"]


def _is_date(text: str) -> bool:
    if not _DATE.fullmatch(text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_date_time(text: str) -> bool:
    if not _DATE_TIME.fullmatch(text):
        return False
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return bool(_UUID.fullmatch(text))


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# RFC 3339: a date, "T", a time, and an offset (Z or +hh:mm), so the instant is unambiguous.
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_FORMATS: dict[str, tuple[Callable[[str], bool], str]] = {
    "date": (_is_date, "a date written YYYY-MM-DD"),
    "date-time": (
        _is_date_time,
        "a date and time with its UTC offset, written YYYY-MM-DDThh:mm:ss+hh:mm (or Z)",
    ),
    "uuid": (_is_uuid, "a UUID"),
    "decimal": (lambda text: bool(_DECIMAL.fullmatch(text)), "a decimal number"),
}


def path_problem(
    schema: Mapping[str, Any], path: tuple[PathPart, ...], *, subject: str = "the result"
) -> str | None:
    """Why path cannot exist in a value of schema, or None when it may (or cannot be known).

    An object without "additionalProperties": false may hold any key, so only closed objects
    and values declared as something other than an object or array can refuse a path.
    """
    for depth, part in enumerate(path):
        where = subject + (f" at {path_text(path[:depth])}" if depth else "")
        types = _schema_types(schema)
        wanted = "object" if isinstance(part, str) else "array"
        if types and wanted not in types:
            declared = " or ".join(_ARTICLED.get(name, name) for name in types)
            return f"{where} is {declared}, not {_ARTICLED[wanted]}"
        if isinstance(part, int):
            items = schema.get("items")
            if not isinstance(items, Mapping):
                return None
            schema = items
            continue
        properties: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if part in properties:
            schema = properties[part]
        elif isinstance(extra, Mapping):
            schema = extra
        elif extra is False:
            keys = ", ".join(sorted(properties)) or "none"
            return f"{where} has no key {part!r} (its keys: {keys})"
        else:
            return None
    return None


def _length_problems(schema: Mapping[str, Any], value: str, *, path: str) -> list[str]:
    problems = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        problems.append(
            f"argument {_quote(path)} must be at least {_characters(schema['minLength'])} long"
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        problems.append(
            f"argument {_quote(path)} must be at most {_characters(schema['maxLength'])} long"
        )
    return problems


def _range_problems(schema: Mapping[str, Any], value: float, *, path: str) -> list[str]:
    problems = []
    if "minimum" in schema and value < schema["minimum"]:
        problems.append(f"argument {_quote(path)} must be >= {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        problems.append(f"argument {_quote(path)} must be <= {schema['maximum']}")
    return problems


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list):
        return []
    # An unknown type name is ignored rather than refusing every value.
    return [name for name in names if isinstance(name, str) and name in _IS_TYPE]


def _is_number(value: Any) -> bool:
    # NaN and infinities parse from JSON text in Python but are not JSON numbers.
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


_IS_TYPE: dict[str, Callable[[Any], bool]] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
}


def _got(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # NaN, Infinity or -Infinity
    return json_type_name(value)


def _same_json(value: Any, option: Any) -> bool:
    # Python calls True == 1 and 1 == 1.0; JSON agrees only with the second.
    if _is_number(value) and _is_number(option):
        return value == option
    return json_type_name(value) == json_type_name(option) and value == option


def _literal(value: Any) -> str:
    return repr(value) if isinstance(value, str) else json.dumps(value)


def _quote(path: str) -> str:
    return f"'{path}'"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _characters(count: int) -> str:
    return f"{count} character" if count == 1 else f"{count} characters"
