"""Checking arguments against a full JSON Schema (an MCP tool's inputSchema), via ``jsonschema``.

A schema that names its dialect with ``$schema`` is checked here; the signature-derived schemas
of our own tools use the small subset in ``argschema``. Messages keep that module's wording:
each names the argument, and every problem is reported at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema import ValidationError
from jsonschema.protocols import Validator

from plans.engine.substitution import PLACEHOLDER

# The dialect assumed when a server's schema does not say (the MCP specification's default).
DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why the schema itself is not a usable JSON Schema, or None when it is."""
    try:
        _validator(_frozen(schema))
    except jsonschema.SchemaError as exc:
        return f"its input schema is not valid JSON Schema: {exc.message}"
    except (TypeError, ValueError) as exc:
        return f"its input schema cannot be read: {exc}"
    return None


def check_json_schema_args(
    schema: Mapping[str, Any], args: dict[str, Any], *, allow_placeholders: bool = False
) -> list[str]:
    """Every way args breaks the schema, as sentences naming the argument; empty if they conform.

    With allow_placeholders, an exact "{{n}}" may stand for any value, and a string holding
    placeholders only has to be allowed to be a string: both are checked again once resolved.
    """
    validator = _validator(_frozen(schema))
    errors = sorted(validator.iter_errors(args), key=lambda error: _path(error.absolute_path))
    return [
        _message(error)
        for error in errors
        if not (allow_placeholders and _stands_for_a_later_result(error))
    ]


@lru_cache(maxsize=256)
def _validator(frozen: str) -> Validator:
    schema = json.loads(frozen)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _frozen(schema: Mapping[str, Any]) -> str:
    # A canonical text is the cache key: schemas are dicts, re-read on every catalog refresh.
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _stands_for_a_later_result(error: ValidationError) -> bool:
    value = error.instance
    if not (isinstance(value, str) and PLACEHOLDER.search(value)):
        return False
    if PLACEHOLDER.fullmatch(value):
        return True  # the result may have any type
    return not (error.validator == "type" and "string" not in _types(error.validator_value))


def _types(declared: Any) -> list[str]:
    return [declared] if isinstance(declared, str) else list(declared or [])


def _message(error: ValidationError) -> str:
    path = _path(error.absolute_path)
    if error.validator == "required":
        missing = _missing_name(error)
        if missing is not None:
            return f"missing required argument '{_join(path, missing)}'"
    if error.validator == "additionalProperties" and error.validator_value is False:
        extra = _extra_names(error)
        if extra:
            return "; ".join(f"unexpected argument '{_join(path, name)}'" for name in extra)
    where = f"argument '{path}'" if path else "arguments"
    return f"{where}: {error.message}"


def _missing_name(error: ValidationError) -> str | None:
    # jsonschema says "'name' is a required property"; the name is the first repr in it.
    names = error.validator_value
    for name in names if isinstance(names, list) else ():
        absent = isinstance(error.instance, dict) and name not in error.instance
        if absent and error.message.startswith(repr(name)):
            return str(name)
    return None


def _extra_names(error: ValidationError) -> list[str]:
    properties = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
    patterns = error.schema.get("patternProperties", {}) if isinstance(error.schema, dict) else {}
    if patterns or not isinstance(error.instance, dict):
        return []
    return [str(name) for name in error.instance if name not in properties]


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text = f"{text}[{part}]" if isinstance(part, int) else _join(text, str(part))
    return text


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
