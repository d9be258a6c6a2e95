"""Between(low, high) puts a number's range into the tool's schema, checked before a run."""

from typing import Annotated

import pytest

from plans.engine.argschema import check_args
from plans.tools import Between, tool


def test_a_range_becomes_minimum_and_maximum_and_out_of_range_values_are_named():
    @tool
    def pick(count: Annotated[int, Between(1, 10)], share: Annotated[float, Between(high=1)] = 0.5):
        """Pick."""

    schema = pick.tool_spec.schema
    assert schema["properties"]["count"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert schema["properties"]["share"]["maximum"] == 1
    assert "minimum" not in schema["properties"]["share"]
    assert check_args(schema, {"count": 0, "share": 2}) == [
        "argument 'count' must be >= 1",
        "argument 'share' must be <= 1",
    ]
    assert check_args(schema, {"count": 10}) == []


def test_a_range_on_an_optional_number_still_accepts_null():
    @tool
    def maybe(count: Annotated[int, Between(1, 3)] | None = None):
        """Maybe."""

    schema = maybe.tool_spec.schema
    assert check_args(schema, {"count": None}) == []
    assert check_args(schema, {"count": 4}) == ["argument 'count' must be <= 3"]


def test_a_range_on_a_non_number_is_refused_when_the_tool_is_declared():
    with pytest.raises(TypeError, match="parameter 'name': Between applies to int or float"):

        @tool
        def named(name: Annotated[str, Between(1, 3)]):
            """Named."""


def test_a_range_whose_ends_are_swapped_is_refused():
    with pytest.raises(ValueError, match=r"Between\(5, 1\): low is above high"):
        Between(5, 1)


@pytest.mark.django_db
def test_a_built_in_tool_asked_for_a_value_outside_its_range_makes_the_plan_invalid(author):
    from plans.services.runs import run_create

    steps = [
        {"id": 1, "tool": "search", "args": {"query": "agents", "limit": 0}, "depends_on": []},
        {"id": 2, "tool": "hotel_price", "args": {"city": "Goa", "nights": 31}, "depends_on": []},
        {
            "id": 3,
            "tool": "issue_refund",
            "args": {"order_id": "A-1001", "amount_inr": -5, "reason": "damaged"},
            "depends_on": [],
        },
    ]
    run = run_create(author=author, goal_text="ranges", plan_data={"steps": steps})

    assert run.status == "invalid_plan"
    assert run.plans.get().problems == [
        "step 1: argument 'limit' must be >= 1",
        "step 2: argument 'nights' must be <= 30",
        "step 3: argument 'amount_inr' must be >= 1",
    ]


@pytest.mark.parametrize("end", ["1", float("nan"), float("inf"), True])
def test_range_ends_must_be_finite_numbers(end):
    with pytest.raises(ValueError, match="Between bounds must be finite numbers"):
        Between(end, 10)
