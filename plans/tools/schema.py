"""Derive a tool's description and JSON schema from its signature, type hints and docstring."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import json
import math
import re
import types
import typing
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, Union

IDEMPOTENCY_PARAM = "idempotency_key"

SUPPORTED_HINTS = (
    "str, int, float, bool, date, datetime, Decimal, UUID, an Enum of str or int values, "
    "a TypedDict or dataclass of these, list[X], dict, dict[str, X], Literal[...], X | None "
    "or Annotated[int | float, Between(low, high)]"
)

# A JSON value -> the Python value a parameter's type hint asks for.
Converter = Callable[[Any], Any]

# Google-style section headers; "Args:" and its synonyms hold the parameter descriptions.
_ARGS_HEADERS = frozenset({"args", "arguments", "parameters", "params"})
_OTHER_HEADERS = frozenset(
    {
        "returns",
        "return",
        "yields",
        "raises",
        "examples",
        "example",
        "note",
        "notes",
        "attributes",
        "see also",
        "warning",
        "warnings",
    }
)
_HEADER = re.compile(r"^\s*([A-Za-z][A-Za-z ]*):\s*$")
_ARG_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


@dataclass(frozen=True)
class DerivedSignature:
    """What a tool function's signature and docstring say about it."""

    description: str
    schema: dict[str, Any]
    takes_idempotency_key: bool
    # Parameters whose JSON value becomes another Python type (a date, a dataclass, ...).
    converters: dict[str, Converter] = dataclasses.field(default_factory=dict)
    # The result's JSON schema from the return annotation; None where it says nothing checkable.
    output_schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class Between:
    """A number's allowed range, both ends included: ``Annotated[int, Between(1, 10)]``.

    It goes into the schema, so a plan asking for a value outside it is invalid before it runs.
    """

    low: int | float | None = None
    high: int | float | None = None

    def __post_init__(self) -> None:
        for end in (self.low, self.high):
            if end is not None and (type(end) not in (int, float) or not math.isfinite(end)):
                raise ValueError(f"Between bounds must be finite numbers, got {end!r}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"Between({self.low}, {self.high}): low is above high")


class _Unsupported(Exception):
    """A type hint outside the supported subset; the message says which."""


def parse_docstring(
    doc: str | None, names: Collection[str] | None = None
) -> tuple[str, dict[str, str]]:
    """Return (first paragraph as one line, {parameter: description} from the Args section).

    With ``names`` (the function's parameters), only a line naming one of them starts an entry;
    any other ``word: text`` line, such as a URL, continues the entry before it.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _section_name(line) is not None:
            break
        summary.append(line.strip())

    params: dict[str, str] = {}
    for index, line in enumerate(lines):
        if _section_name(line) in _ARGS_HEADERS:
            params = _parse_args_section(lines, index, names)
            break
    return " ".join(summary), params


def _section_name(line: str) -> str | None:
    match = _HEADER.match(line)
    if match is None:
        return None
    name = match.group(1).strip().lower()
    return name if name in _ARGS_HEADERS or name in _OTHER_HEADERS else None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parse_args_section(
    lines: list[str], header_index: int, names: Collection[str] | None
) -> dict[str, str]:
    header_indent = _indent(lines[header_index])
    entry_indent: int | None = None
    params: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[header_index + 1 :]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= header_indent:
            break  # the next section (or dedented prose) ends the Args section
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_ENTRY.match(line.strip()) if indent <= entry_indent else None
        if match is not None and (names is None or match.group("name") in names):
            current = params.setdefault(match.group("name"), [])
            if match.group("text"):
                current.append(match.group("text").strip())
        elif current is not None:
            current.append(line.strip())
    return {name: " ".join(parts) for name, parts in params.items()}


def derive(fn: Callable[..., Any]) -> DerivedSignature:
    """Build the JSON schema of a tool's arguments; raises TypeError for unsupported signatures."""
    where = f"@tool {fn.__module__}.{fn.__qualname__}"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: cannot read the signature: {exc}") from exc
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError and friends from unresolvable string annotations
        raise TypeError(f"{where}: cannot resolve the type hints: {exc}") from exc

    description, arg_docs = parse_docstring(fn.__doc__, signature.parameters)
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: dict[str, Converter] = {}
    takes_key = False
    for param in signature.parameters.values():
        name = param.name
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"{where}: parameter {name!r} is positional-only; tools are called with keyword "
                "arguments"
            )
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{where}: parameter '*{name}' is not supported; name each argument")
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{where}: parameter '**{name}' is not supported; name each argument")
        if name not in hints:
            raise TypeError(f"{where}: parameter {name!r} has no type hint")
        if name == IDEMPOTENCY_PARAM:
            if hints[name] is not str:
                raise TypeError(f"{where}: parameter {name!r} must be annotated as str")
            takes_key = True  # filled by the executor, never by the model
            continue
        try:
            prop = schema_for_hint(hints[name])
            converter = converter_for_hint(hints[name])
        except _Unsupported as exc:
            raise TypeError(f"{where}: parameter {name!r}: {exc}") from None
        if converter is not None:
            converters[name] = converter
        text = _param_description(arg_docs.get(name, ""), param.default)
        if text:
            prop["description"] = text
        properties[name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(name)

    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return DerivedSignature(
        description, schema, takes_key, converters, output_schema(hints.get("return"))
    )


def output_schema(hint: Any) -> dict[str, Any] | None:
    """The JSON schema of a tool's result from its return annotation, or None when unknown.

    TypedDicts and dataclasses become closed objects whose fields placeholders may name;
    ``dict[str, X]`` an object of X values; hints outside the subset leave the result unchecked.
    """
    if hint is None:
        return None
    try:
        return _result_schema(hint)
    except _Unsupported:
        return None


def _result_schema(hint: Any) -> dict[str, Any]:
    if isinstance(hint, typing.TypeAliasType):
        return _result_schema(hint.__value__)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _result_schema(args[0])
    if typing.is_typeddict(hint):
        fields = typing.get_type_hints(hint)
        return {
            "type": "object",
            "properties": {name: _result_schema(field) for name, field in fields.items()},
            "required": sorted(hint.__required_keys__),
            "additionalProperties": False,
        }
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        fields = typing.get_type_hints(hint)
        return {
            "type": "object",
            "properties": {
                f.name: _result_schema(fields[f.name]) for f in dataclasses.fields(hint)
            },
            "required": [f.name for f in dataclasses.fields(hint)],
            "additionalProperties": False,
        }
    if (hint is dict or origin is dict) and len(args) == 2 and args[0] is str:
        return {"type": "object", "additionalProperties": _result_schema(args[1])}
    if origin is list and args:
        return {"type": "array", "items": _result_schema(args[0])}
    if origin is Union or origin is types.UnionType:
        # int | float and X | None: the union of the members' types, with no deeper shape.
        kinds: list[str] = []
        for member in args:
            member_type = _result_schema(member)["type"]
            for kind in [member_type] if isinstance(member_type, str) else member_type:
                if kind not in kinds:
                    kinds.append(kind)
        return {"type": kinds}
    if hint is types.NoneType:
        return {"type": "null"}
    return schema_for_hint(hint)


def _param_description(text: str, default: Any) -> str:
    # The schema subset has no "default" keyword, so the default is told in prose.
    if default is inspect.Parameter.empty or default is None:
        return text
    try:
        shown = json.dumps(default)
    except (TypeError, ValueError):
        return text
    return f"{text} (default: {shown})" if text else f"Default: {shown}."


def schema_for_hint(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint; raises _Unsupported outside the supported subset."""
    scalar = _SCALARS.get(hint) if isinstance(hint, type) else None
    if scalar is not None:
        return {"type": scalar}
    if isinstance(hint, type) and hint in _FORMATS:
        return dict(_FORMATS[hint])
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema(hint)
    if _is_record(hint):
        return _record_schema(hint)
    if isinstance(hint, typing.TypeAliasType):  # `type Currency = Literal[...]`
        return schema_for_hint(hint.__value__)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _annotated_schema(args[0], hint.__metadata__)
    if hint is list or origin is list:
        return {"type": "array", "items": schema_for_hint(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        if args:
            if args[0] is not str:
                raise _Unsupported(f"dict keys must be str, got {_show(args[0])}")
            schema_for_hint(args[1])  # the value type must be supported even though unchecked
        return {"type": "object"}
    if origin is Literal:
        return _literal_schema(args)
    if origin is Union or origin is types.UnionType:
        others = [arg for arg in args if arg is not types.NoneType]
        if len(others) == 1 and len(others) < len(args):
            return _nullable(schema_for_hint(others[0]))
        raise _Unsupported(f"union {_show(hint)} is not supported; only X | None is")
    raise _Unsupported(f"type hint {_show(hint)} is not supported (use {SUPPORTED_HINTS})")


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}
# Types written as JSON strings in a standard format (JSON Schema's "format"); a Decimal may
# also be given as a JSON number.
_FORMATS: dict[type, dict[str, Any]] = {
    datetime.datetime: {"type": "string", "format": "date-time"},  # before date: a subclass
    datetime.date: {"type": "string", "format": "date"},
    uuid.UUID: {"type": "string", "format": "uuid"},
    Decimal: {"type": ["string", "number"], "format": "decimal"},
}


def _enum_schema(hint: type[enum.Enum]) -> dict[str, Any]:
    values = [member.value for member in hint]
    kinds = {type(value) for value in values}
    if not values or len(kinds) != 1 or next(iter(kinds)) not in (str, int):
        raise _Unsupported(f"Enum {hint.__name__} must have all str or all int values")
    return {"type": _SCALARS[next(iter(kinds))], "enum": values}


def _is_record(hint: Any) -> bool:
    """A TypedDict or a dataclass: an object with named, typed fields."""
    return isinstance(hint, type) and (typing.is_typeddict(hint) or dataclasses.is_dataclass(hint))


def _record_fields(hint: type) -> tuple[dict[str, Any], set[str]]:
    """The record's field hints, and which fields are required."""
    try:
        hints = typing.get_type_hints(hint, include_extras=True)
    except Exception as exc:
        raise _Unsupported(f"cannot resolve the type hints of {hint.__name__}: {exc}") from None
    if typing.is_typeddict(hint):
        return hints, set(hint.__required_keys__)  # type: ignore[attr-defined]
    fields = {f.name: f for f in dataclasses.fields(hint) if f.init}
    required = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return {name: hints[name] for name in fields}, required


def _record_schema(hint: type) -> dict[str, Any]:
    hints, required = _record_fields(hint)
    properties = {}
    for name, field_hint in hints.items():
        try:
            properties[name] = schema_for_hint(field_hint)
        except _Unsupported as exc:
            raise _Unsupported(f"{hint.__name__}.{name}: {exc}") from None
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in hints if name in required],
        "additionalProperties": False,
    }


def converter_for_hint(hint: Any) -> Converter | None:
    """How a checked JSON value becomes what the hint asks for; None when it already is."""
    if isinstance(hint, type):
        if hint in _SCALARS:
            return None
        if hint is datetime.datetime:
            return datetime.datetime.fromisoformat
        if hint is datetime.date:
            return datetime.date.fromisoformat
        if hint is uuid.UUID:
            return uuid.UUID
        if hint is Decimal:
            return _decimal
        if issubclass(hint, enum.Enum):
            return hint
        if _is_record(hint):
            return _record_converter(hint)
    if isinstance(hint, typing.TypeAliasType):
        return converter_for_hint(hint.__value__)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return converter_for_hint(args[0])
    if origin is list and args:
        item = converter_for_hint(args[0])
        return None if item is None else lambda values: [item(value) for value in values]
    if origin is dict and len(args) == 2:
        found = converter_for_hint(args[1])
        if found is None:
            return None
        each: Converter = found
        return lambda values: {key: each(value) for key, value in values.items()}
    if origin is Union or origin is types.UnionType:
        others = [arg for arg in args if arg is not types.NoneType]
        found = converter_for_hint(others[0]) if len(others) == 1 else None
        if found is None:
            return None
        present: Converter = found
        return lambda value: None if value is None else present(value)
    return None


def _decimal(value: Any) -> Decimal:
    # str() first: a JSON number 0.1 means the decimal 0.1, not its binary approximation.
    return Decimal(str(value)) if not isinstance(value, str) else Decimal(value)


def _record_converter(hint: type) -> Converter:
    hints, _ = _record_fields(hint)
    found = {name: converter_for_hint(field_hint) for name, field_hint in hints.items()}
    inner = {name: convert for name, convert in found.items() if convert is not None}
    build: Callable[..., Any] = dict if typing.is_typeddict(hint) else hint

    def convert(value: dict[str, Any]) -> Any:
        fields = {
            name: inner[name](item) if name in inner else item for name, item in value.items()
        }
        return build(**fields)

    return convert


def _literal_schema(values: tuple[Any, ...]) -> dict[str, Any]:
    # Literal[..., None] is a nullable enum; the other values must share one scalar type.
    given = tuple(value for value in values if value is not None)
    kinds = {type(value) for value in given}
    if len(kinds) != 1 or next(iter(kinds)) not in _SCALARS or float in kinds:
        raise _Unsupported(
            "Literal values must all be str, all int or all bool, got "
            + ", ".join(repr(value) for value in values)
        )
    schema = {"type": _SCALARS[next(iter(kinds))], "enum": list(given)}
    return _nullable(schema) if len(given) < len(values) else schema


def _annotated_schema(hint: Any, metadata: tuple[Any, ...]) -> dict[str, Any]:
    """The schema of the hint, narrowed by the Between markers among metadata (others ignored)."""
    schema = schema_for_hint(hint)
    for marker in metadata:
        if not isinstance(marker, Between):
            continue
        kinds = {schema["type"]} if isinstance(schema["type"], str) else set(schema["type"])
        if not kinds & {"integer", "number"} or kinds - {"integer", "number", "null"}:
            raise _Unsupported(f"Between applies to int or float, not {_show(hint)}")
        if marker.low is not None:
            schema["minimum"] = marker.low
        if marker.high is not None:
            schema["maximum"] = marker.high
    return schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema also accepting null: "null" joins its type (and its enum, if it has one)."""
    schema = dict(schema)
    declared = schema["type"]
    names = [declared] if isinstance(declared, str) else list(declared)
    if "null" not in names:
        names.append("null")
    schema["type"] = names
    if "enum" in schema and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    return schema


def _show(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else repr(hint)
