"""date, datetime, Decimal, UUID, Enum, TypedDict and dataclass parameters in @tool signatures."""

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from uuid import UUID

import pytest

from plans.engine import check_args
from plans.models import Step
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests import bank_tools

ARGS = {
    "day": "2026-12-24",
    "arrival": "2026-12-24T18:30:00+05:30",
    "deposit": "1250.50",
    "reference": "6f1c8e1a-9d3b-4f5e-8a2c-1b2c3d4e5f60",
    "room": "double",
    "guest": {"name": "Asha", "born": "1990-02-03"},
    "stay": {"check_in": "2026-12-24", "nights": 2},
    "extra_days": ["2026-12-26"],
}


def spec():
    return bank_tools.book_room.tool_spec


def test_each_type_has_its_json_schema_form():
    props = spec().schema["properties"]

    assert props["day"] == {"type": "string", "format": "date"}
    assert props["arrival"] == {"type": "string", "format": "date-time"}
    assert props["deposit"] == {"type": ["string", "number"], "format": "decimal"}
    assert props["reference"] == {"type": "string", "format": "uuid"}
    assert props["room"] == {"type": "string", "enum": ["single", "double"]}
    assert props["guest"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "born": {"type": "string", "format": "date"}},
        "required": ["name", "born"],
        "additionalProperties": False,
    }
    assert props["stay"]["required"] == ["check_in"]  # nights has a default
    assert props["extra_days"] == {
        "type": ["array", "null"],
        "items": {"type": "string", "format": "date"},
    }


def test_valid_arguments_pass_and_the_tool_receives_python_values():
    assert check_args(spec().schema, ARGS) == []
    bank_tools.received.clear()

    spec().call(ARGS, idempotency_key="k")

    got = bank_tools.received[-1]
    assert got["day"] == date(2026, 12, 24)
    assert got["arrival"] == datetime(2026, 12, 24, 18, 30, tzinfo=timezone(timedelta(hours=5.5)))
    assert got["deposit"] == Decimal("1250.50")
    assert got["reference"] == UUID(ARGS["reference"])
    assert got["room"] is bank_tools.Room.DOUBLE
    assert got["guest"] == {"name": "Asha", "born": date(1990, 2, 3)}
    assert got["stay"] == bank_tools.Stay(check_in=date(2026, 12, 24), nights=2)
    assert got["extra_days"] == [date(2026, 12, 26)]


def test_a_decimal_given_as_a_json_number_keeps_its_written_value():
    spec().call({**ARGS, "deposit": 0.1}, idempotency_key="k")
    assert bank_tools.received[-1]["deposit"] == Decimal("0.1")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("day", "24/12/2026", "'day' must be a date written YYYY-MM-DD"),
        ("day", "2026-02-30", "'day' must be a date written YYYY-MM-DD"),
        ("arrival", "2026-12-24T18:30:00", "with its UTC offset"),
        ("deposit", "12,50", "'deposit' must be a decimal number"),
        ("reference", "not-a-uuid", "'reference' must be a UUID"),
        ("room", "suite", "'room' must be one of 'single', 'double'"),
        ("guest", {"name": "Asha"}, "missing required argument 'guest.born'"),
        ("stay", {"check_in": "2026-12-24", "pets": 1}, "unexpected argument 'stay.pets'"),
    ],
)
def test_invalid_values_are_refused_naming_the_argument(name, value, message):
    problems = check_args(spec().schema, {**ARGS, name: value})
    assert any(message in problem for problem in problems), problems


@pytest.mark.django_db(transaction=True)
def test_a_plan_with_typed_arguments_runs_and_a_bad_date_is_invalid_before_anything_runs(
    author, settings
):
    settings.AGENTSITE_TOOL_MODULES = ["tests.bank_tools"]
    good = run_create(
        author=author,
        goal_text="book",
        plan_data={"steps": [{"id": 1, "tool": "book_room", "args": ARGS}]},
    )
    advance_run(good.pk)
    step = Step.objects.get(plan__run=good)
    assert step.status == "succeeded"
    assert step.result == {"booked": "2026-12-24", "room": "double", "deposit": "1250.50"}

    bad = run_create(
        author=author,
        goal_text="book",
        plan_data={"steps": [{"id": 1, "tool": "book_room", "args": {**ARGS, "day": "soon"}}]},
    )
    bad.refresh_from_db()
    assert bad.status == "invalid_plan"
    assert "'day' must be a date written YYYY-MM-DD" in " ".join(bad.plans.get().problems)


def test_an_enum_of_mixed_or_float_values_is_refused_at_declaration():
    import enum

    from plans.tools import tool

    class Mixed(enum.Enum):
        A = "a"
        B = 2

    with pytest.raises(TypeError, match="Enum Mixed must have all str or all int values"):

        @tool
        def odd(choice: Mixed) -> str:
            """Odd."""
            return ""


def test_timezones_of_datetimes_are_kept():
    spec().call({**ARGS, "arrival": "2026-12-24T13:00:00Z"}, idempotency_key="k")
    assert bank_tools.received[-1]["arrival"] == datetime(2026, 12, 24, 13, tzinfo=UTC)
