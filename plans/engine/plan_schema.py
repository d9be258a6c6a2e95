"""The plan as a JSON Schema, built from what validation checks, for binding a planner's reply.

One step schema per tool: its name as a constant, its arguments as the tool's own schema (an
argument that is not text may also be a "{{n}}" placeholder, whose value is not known yet),
integer ids and dependencies, and "repeat" only on destructive tools. What a schema cannot say
(ids unique, dependencies that exist, no cycles, placeholders reaching only upstream steps,
at most max_steps steps) is still checked by validate_plan, which also checks every reply.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from plans.engine.plan import MAX_STEP_ID
from plans.engine.substitution import PLACEHOLDER
from plans.engine.validation import ToolSignature

# A whole "{{n}}" (with a path, perhaps), as substitution reads one (its pattern, anchored).
PLACEHOLDER_TEXT = {
    "type": "string",
    "pattern": "^" + PLACEHOLDER.pattern.removeprefix(r"(?<!\\)") + "$",
    "description": 'a placeholder for an earlier step\'s result, such as "{{1}}" or "{{2.total}}"',
}
_STEP_ID = {"type": "integer", "minimum": 1, "maximum": MAX_STEP_ID}


def plan_json_schema(
    catalog: Mapping[str, ToolSignature], *, max_steps: int | None, direct_answer: bool = False
) -> dict:
    """The JSON Schema every valid plan for this catalog satisfies (tools sorted by name); with
    direct_answer, a reply of no steps may carry an answer instead of a plan (the router)."""
    steps: dict[str, Any] = {
        "type": "array",
        "items": {"anyOf": [_step_schema(catalog[name]) for name in sorted(catalog)]},
    }
    if max_steps is not None:
        steps["maxItems"] = max_steps
    properties: dict[str, Any] = {
        "steps": steps,
        "reason": {
            "type": "string",
            "description": "why no plan is possible, given only with no steps",
        },
    }
    if direct_answer:
        properties["answer"] = {
            "type": "string",
            "description": "the answer to a goal that needs no tool, given only with no steps",
        }
    return {
        "type": "object",
        "properties": properties,
        "required": ["steps"],
        "additionalProperties": False,
    }


def _step_schema(tool: ToolSignature) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "id": dict(_STEP_ID),
        "tool": {"type": "string", "enum": [tool.name]},
        "args": args_schema(tool.schema),
        "depends_on": {"type": "array", "items": dict(_STEP_ID)},
    }
    if tool.destructive:
        properties["repeat"] = {"type": "boolean"}
    return {
        "type": "object",
        "properties": properties,
        "required": ["id", "tool", "args", "depends_on"],
        "additionalProperties": False,
    }


def args_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's argument schema with a placeholder allowed wherever a value is not text."""
    full = copy.deepcopy(dict(schema))
    properties = full.get("properties")
    if isinstance(properties, dict):
        full["properties"] = {
            name: _or_placeholder(sub) for name, sub in properties.items() if isinstance(sub, dict)
        }
    full.setdefault("type", "object")
    return full


def _or_placeholder(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "string" and not ({"enum", "format", "pattern"} & set(schema)):
        return schema  # any text already takes a placeholder, whole or inside it
    return {"anyOf": [schema, dict(PLACEHOLDER_TEXT)]}
