"""The plan's JSON Schema agrees with validate_plan on every step's shape."""

import jsonschema
import pytest

from plans import engine
from plans.demo import shapes
from plans.engine.plan_schema import plan_json_schema
from plans.tools import get_registry


def conforms(schema, plan):
    return jsonschema.Draft202012Validator(schema).is_valid(plan)


def validates(registry, plan):
    try:
        engine.validate_plan(plan, registry, max_steps=5)
    except engine.PlanInvalid:
        return False
    return True


DEMO_PLANS = [
    shapes.price_plan(["iPhone 16", "AirPods 4"]),
    shapes.trip_plan(
        origin="Bengaluru", destination="Goa", day="2026-12-19", nights=2, traveller="A B"
    ),
    shapes.refund_plan(order_id="A-1001", reason="damaged", customer="c@example.com"),
    shapes.confirmed_refund_plan(order_id="A-1002", reason="late", customer="c@example.com"),
    shapes.research_plan(["plan-and-execute agent cost", "ReAct agent model calls"]),
]


@pytest.mark.parametrize(
    "plan", DEMO_PLANS, ids=["price", "trip", "refund", "confirmed", "research"]
)
def test_every_demo_plan_satisfies_the_schema_and_the_validator(plan):
    registry = get_registry()
    assert validates(registry, plan)
    assert conforms(plan_json_schema(registry, max_steps=5), plan)


def step(**fields):
    return {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": [], **fields}


@pytest.mark.parametrize(
    "plan",
    [
        {"steps": [step(tool="teleport")]},
        {"steps": [step(id=0)]},
        {"steps": [step(id="1")]},
        {"steps": [step(id=True)]},
        {"steps": [step(args="iPhone 16")]},
        {"steps": [step(args={})]},
        {"steps": [step(args={"item": 16})]},
        {"steps": [step(args={"item": "x", "colour": "red"})]},
        {"steps": [step(depends_on="1")]},
        {"steps": [step(depends_on=[0])]},
        {"steps": [step(repeat=True)]},  # repeat applies to destructive tools only
        {"steps": [step(tool="hotel_price", args={"city": "Goa", "nights": "two"})]},
        {
            "steps": [
                step(
                    tool="convert_currency",
                    args={"amount": 1, "from_currency": "YEN", "to_currency": "INR"},
                )
            ]
        },
        {"steps": [step()] * 6},
        {"steps": "none"},
        {"plan": []},
    ],
)
def test_a_plan_the_schema_refuses_is_one_the_validator_refuses_too(plan):
    registry = get_registry()
    assert not conforms(plan_json_schema(registry, max_steps=5), plan)
    assert not validates(registry, plan)


def test_placeholders_stand_in_for_values_of_any_type_as_the_validator_allows():
    registry = get_registry()
    plan = {
        "steps": [
            step(tool="order_total", args={"order_id": "A-1001"}),
            {
                "id": 2,
                "tool": "issue_refund",
                "args": {"order_id": "A-1001", "amount_inr": "{{1}}", "reason": "Refund of {{1}}"},
                "depends_on": [1],
                "repeat": True,
            },
        ]
    }
    assert validates(registry, plan)
    assert conforms(plan_json_schema(registry, max_steps=5), plan)


def test_a_refusal_with_no_steps_and_a_reason_satisfies_the_schema():
    schema = plan_json_schema(get_registry(), max_steps=5)
    assert conforms(schema, {"steps": [], "reason": "no tool can do that"})
