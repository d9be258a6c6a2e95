"""A tiny tool catalog for engine tests: anything with name, schema and destructive will do."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FakeTool:
    name: str
    schema: dict[str, Any]
    destructive: bool = False
    output_schema: dict[str, Any] | None = None


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


CURRENCIES = ["INR", "USD"]

CATALOG = {
    tool.name: tool
    for tool in [
        FakeTool("price", object_schema({"item": {"type": "string", "minLength": 1}})),
        FakeTool("calculator", object_schema({"expression": {"type": "string"}})),
        FakeTool(
            "convert_currency",
            object_schema(
                {
                    "amount": {"type": "number", "minimum": 0},
                    "currency": {"type": "string", "enum": CURRENCIES},
                }
            ),
        ),
        FakeTool(
            "hotel_price",
            object_schema(
                {
                    "city": {"type": "string"},
                    "nights": {"type": "integer", "minimum": 1, "maximum": 30},
                }
            ),
        ),
        FakeTool(
            "send_email",
            object_schema({"to": {"type": "string"}, "body": {"type": "string"}}),
            destructive=True,
        ),
        # No declared arguments and no additionalProperties: anything goes.
        FakeTool("noop", {"type": "object"}),
    ]
}

SEED_PLAN = {
    "steps": [
        {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []},
        {"id": 2, "tool": "price", "args": {"item": "AirPods 4"}, "depends_on": []},
        {
            "id": 3,
            "tool": "calculator",
            "args": {"expression": "{{1}}+{{2}}"},
            "depends_on": [1, 2],
        },
    ]
}


def step(step_id: Any, tool: str = "noop", args: Any = None, depends_on: Any = None) -> dict:
    """A planner step; args and depends_on default to empty."""
    return {
        "id": step_id,
        "tool": tool,
        "args": {} if args is None else args,
        "depends_on": [] if depends_on is None else depends_on,
    }
