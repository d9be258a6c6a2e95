import pytest
from engine_catalog import CATALOG, SEED_PLAN, step

from plans.engine import MAX_STEP_ID, Plan, PlanInvalid, PlanStep, Problem, rounds, validate_plan


def problems_of(data, *, catalog=CATALOG, max_steps=None) -> list[str]:
    with pytest.raises(PlanInvalid) as caught:
        validate_plan(data, catalog, max_steps=max_steps)
    return [str(problem) for problem in caught.value.problems]


def test_the_seed_plan_validates_and_runs_in_two_rounds():
    plan = validate_plan(SEED_PLAN, CATALOG, max_steps=5)

    assert rounds(plan) == [[1, 2], [3]]


def test_a_valid_plan_keeps_steps_in_the_order_given_and_round_trips_through_json():
    data = {"steps": [step(2, depends_on=[1]), step(1)]}

    plan = validate_plan(data, CATALOG, max_steps=None)

    assert plan.ids == (2, 1)
    assert plan.step(2) == PlanStep(id=2, tool="noop", args={}, depends_on=(1,))
    assert plan.to_json() == data
    assert validate_plan(plan.to_json(), CATALOG, max_steps=None) == plan


@pytest.mark.parametrize(
    ("data", "got"), [([], "array"), ("plan", "string"), (None, "null"), (3, "integer")]
)
def test_a_plan_that_is_not_an_object_is_refused(data, got):
    assert problems_of(data) == [f"the plan must be a JSON object, got {got}"]


def test_a_plan_without_a_steps_list_is_refused():
    assert problems_of({"plan": []}) == ['the plan must have a "steps" list']


def test_steps_that_are_not_a_list_are_refused():
    assert problems_of({"steps": {"1": {}}}) == ['"steps" must be a list, got object']


def test_a_plan_with_no_steps_is_refused():
    assert problems_of({"steps": []}) == ["the plan has no steps"]


def test_a_plan_with_no_steps_carries_the_planners_reason():
    data = {"steps": [], "reason": " I can only plan the demo goals. "}

    assert problems_of(data) == ["the plan has no steps: I can only plan the demo goals."]


def test_a_reason_without_any_steps_key_counts_as_no_steps():
    assert problems_of({"reason": "nothing to do"}) == ["the plan has no steps: nothing to do"]


def test_a_plan_with_more_steps_than_allowed_is_refused():
    data = {"steps": [step(n) for n in range(1, 5)]}

    assert problems_of(data, max_steps=3) == ["the plan has 4 steps; at most 3 are allowed"]
    assert validate_plan(data, CATALOG, max_steps=None).ids == (1, 2, 3, 4)


def test_a_step_that_is_not_an_object_is_named_by_its_position():
    data = {"steps": [step(1), "fetch the price"]}

    assert problems_of(data) == ["step at position 2: a step must be an object, got string"]


def test_a_step_without_an_id_is_named_by_its_position():
    data = {"steps": [{"tool": "price", "args": {"item": 7}}]}

    assert problems_of(data) == [
        "step at position 1: id is missing",
        "step at position 1: argument 'item' must be a string, got integer",
    ]


@pytest.mark.parametrize(
    ("step_id", "shown"),
    [
        (0, "0"),
        (-1, "-1"),
        ("1", "'1'"),
        (1.0, "1.0"),
        (1.5, "1.5"),
        (True, "true"),
        (None, "null"),
        ([1], "an array"),
        (MAX_STEP_ID + 1, str(MAX_STEP_ID + 1)),
        # Too long to print, so only its type is named.
        pytest.param(10**5000, "integer", id="5001-digit integer"),
    ],
)
def test_ids_must_be_integers_from_one_to_the_largest_storable_id(step_id, shown):
    assert problems_of({"steps": [step(step_id)]}) == [
        f"step at position 1: id must be an integer from 1 to {MAX_STEP_ID}, got {shown}"
    ]


def test_duplicate_ids_name_every_position_that_uses_them():
    data = {"steps": [step(1), step(2), step(1), step(1)]}

    assert problems_of(data) == ["step 1: the id is used by 3 steps (positions 1, 3 and 4)"]


def test_an_unknown_tool_lists_the_allowed_tools_sorted():
    data = {"steps": [step(3, tool="teleport")]}

    assert problems_of(data) == [
        "step 3: unknown tool 'teleport' (allowed: calculator, convert_currency, hotel_price, "
        "noop, price, send_email)"
    ]


def test_an_unknown_tool_with_an_empty_catalog_says_no_tools_are_registered():
    assert problems_of({"steps": [step(1)]}, catalog={}) == [
        "step 1: unknown tool 'noop' (no tools are registered)"
    ]


def test_a_missing_or_non_string_tool_is_refused():
    data = {"steps": [{"id": 1}, {"id": 2, "tool": ["price"]}]}

    assert problems_of(data) == [
        "step 1: tool is missing",
        "step 2: tool must be a string, got array",
    ]


def test_args_must_be_an_object():
    data = {"steps": [step(1, tool="price", args=["iPhone 16"])]}

    assert problems_of(data) == ["step 1: args must be an object, got array"]


def test_missing_args_and_depends_on_default_to_empty():
    plan = validate_plan({"steps": [{"id": 1, "tool": "noop"}]}, CATALOG, max_steps=None)

    assert plan.steps == (PlanStep(id=1, tool="noop", args={}, depends_on=()),)


def test_missing_args_are_still_checked_against_the_schema():
    data = {"steps": [{"id": 1, "tool": "price"}]}

    assert problems_of(data) == ["step 1: missing required argument 'item'"]


def test_args_failing_the_tool_schema_are_reported_argument_by_argument():
    data = {
        "steps": [
            step(1, tool="convert_currency", args={"amount": -5, "currency": "JPY", "fee": 1}),
            step(2, tool="hotel_price", args={"city": "Goa", "nights": 2.0}),
        ]
    }

    assert problems_of(data) == [
        "step 1: argument 'amount' must be >= 0",
        "step 1: argument 'currency' must be one of 'INR', 'USD'",
        "step 1: unexpected argument 'fee'",
        "step 2: argument 'nights' must be an integer, got number",
    ]


def test_depends_on_must_be_a_list_of_step_ids():
    data = {"steps": [step(1), step(2, depends_on=1), step(3, depends_on=[1, "2", True, 2.0])]}

    assert problems_of(data) == [
        "step 2: depends_on must be a list of step ids, got integer",
        "step 3: depends_on must hold step ids, got '2'",
        "step 3: depends_on must hold step ids, got true",
        "step 3: depends_on must hold step ids, got 2.0",
    ]


def test_repeated_dependencies_are_kept_once_in_their_first_order():
    data = {"steps": [step(1), step(2), step(3, depends_on=[2, 1, 2])]}

    assert validate_plan(data, CATALOG, max_steps=None).step(3).depends_on == (2, 1)


def test_an_unknown_dependency_is_reported_as_unknown_and_not_as_a_cycle():
    data = {"steps": [step(1, depends_on=[2]), step(3, depends_on=[1])]}

    assert problems_of(data) == ["step 1: depends on step 2, which does not exist"]


def test_a_step_that_depends_on_itself_is_reported_once_and_not_as_a_cycle():
    assert problems_of({"steps": [step(1, depends_on=[1])]}) == ["step 1: depends on itself"]


def test_the_cyclic_example_names_its_cycle():
    data = {"steps": [step(1, depends_on=[2]), step(2, depends_on=[1])]}

    assert problems_of(data) == ["cycle: 1 -> 2 -> 1"]


def test_a_cycle_starts_at_its_smallest_id_and_follows_the_dependencies():
    # 1 depends on 3, 3 on 2, 2 on 1: read "x -> y" as "x depends on y".
    data = {"steps": [step(2, depends_on=[1]), step(3, depends_on=[2]), step(1, depends_on=[3])]}

    assert problems_of(data) == ["cycle: 1 -> 3 -> 2 -> 1"]


def test_independent_cycles_are_each_reported():
    data = {
        "steps": [
            step(5, depends_on=[4]),
            step(4, depends_on=[5]),
            step(1, depends_on=[2]),
            step(2, depends_on=[1]),
            step(3, depends_on=[1]),
        ]
    }

    assert problems_of(data) == ["cycle: 1 -> 2 -> 1", "cycle: 4 -> 5 -> 4"]


def test_a_placeholder_for_a_step_not_depended_on_is_reported():
    data = {
        "steps": [
            step(1, tool="price", args={"item": "iPhone 16"}),
            step(4, tool="price", args={"item": "AirPods 4"}),
            step(3, tool="calculator", args={"expression": "{{1}}+{{4}}"}, depends_on=[1]),
        ]
    }

    assert problems_of(data) == [
        "step 3: placeholder {{4}} refers to step 4, which step 3 does not depend on"
    ]


def test_a_placeholder_for_a_transitive_dependency_is_accepted():
    data = {
        "steps": [
            step(1, tool="price", args={"item": "iPhone 16"}),
            step(2, depends_on=[1]),
            step(3, tool="calculator", args={"expression": "{{ 1 }} * 2"}, depends_on=[2]),
        ]
    }

    assert validate_plan(data, CATALOG, max_steps=None).step(3).depends_on == (2,)


def test_placeholders_for_unknown_steps_or_the_step_itself_are_reported():
    data = {"steps": [step(1, args={"a": ["{{1}}", {"b": "{{9}}"}]})]}

    assert problems_of(data) == [
        "step 1: placeholder {{1}} refers to step 1, which is this step itself",
        "step 1: placeholder {{9}} refers to step 9, which does not exist",
    ]


def test_a_placeholder_with_a_non_ascii_digit_is_plain_text_and_not_a_dependency():
    data = {
        "steps": [
            step(1, tool="price", args={"item": "Goa hotel"}),
            # "{{\u0661}}" (ARABIC-INDIC DIGIT ONE) is not "{{1}}": no reference, no type pass.
            step(2, tool="hotel_price", args={"city": "Goa", "nights": "{{\u0661}}"}),
            step(3, tool="calculator", args={"expression": "{{\uff11}}+1"}),
        ]
    }

    assert problems_of(data) == ["step 2: argument 'nights' must be an integer, got string"]


def test_a_non_ascii_digit_placeholder_names_no_step_so_it_needs_no_dependency():
    data = {"steps": [step(1), step(2, tool="calculator", args={"expression": "{{\u0661}}"})]}

    plan = validate_plan(data, CATALOG, max_steps=None)

    assert plan.step(2).depends_on == ()
    assert plan.step(2).args == {"expression": "{{\u0661}}"}


def test_a_placeholder_number_too_long_to_convert_is_reported_rather_than_raised():
    data = {"steps": [step(1, args={"a": "{{" + "9" * 5000 + "}}"})]}

    assert problems_of(data) == ["step 1: args hold a placeholder number too long to be a step id"]


def test_a_whole_value_placeholder_passes_any_type_check():
    data = {
        "steps": [
            step(1, tool="price", args={"item": "Goa hotel"}),
            step(2, tool="hotel_price", args={"city": "Goa", "nights": "{{1}}"}, depends_on=[1]),
        ]
    }

    assert validate_plan(data, CATALOG, max_steps=None).step(2).args["nights"] == "{{1}}"


def test_a_placeholder_inside_text_makes_the_value_a_string():
    data = {
        "steps": [
            step(1, tool="price", args={"item": "Goa hotel"}),
            step(
                2,
                tool="hotel_price",
                args={"city": "{{1}}", "nights": "{{1}} nights"},
                depends_on=[1],
            ),
        ]
    }

    assert problems_of(data) == ["step 2: argument 'nights' must be an integer, got string"]


def test_extra_step_keys_such_as_a_description_are_ignored():
    data = {"steps": [{**step(1), "description": "does nothing"}], "notes": "fine"}

    assert validate_plan(data, CATALOG, max_steps=1).ids == (1,)


def test_every_problem_is_reported_at_once_each_naming_its_step():
    data = {
        "steps": [
            step(1, tool="price", args={"item": ""}),
            step(1, tool="teleport"),
            step("two", tool="price", args={"item": "x"}, depends_on=[7]),
            step(4, tool="calculator", args={"expression": "{{1}}"}, depends_on=[5]),
            step(5, depends_on=[4]),
        ]
    }

    assert problems_of(data, max_steps=4) == [
        "the plan has 5 steps; at most 4 are allowed",
        "step 1: argument 'item' must be at least 1 character long",
        "step 1: unknown tool 'teleport' (allowed: calculator, convert_currency, hotel_price, "
        "noop, price, send_email)",
        "step at position 3: id must be an integer from 1 to 2147483647, got 'two'",
        "step 1: the id is used by 2 steps (positions 1 and 2)",
        "step at position 3: depends on step 7, which does not exist",
        "cycle: 4 -> 5 -> 4",
        "step 4: placeholder {{1}} refers to step 1, which step 4 does not depend on",
    ]


def test_a_long_unknown_tool_name_is_shortened_in_the_message():
    (message,) = problems_of({"steps": [step(1, tool="x" * 1000)]}, catalog={})

    assert message == f"step 1: unknown tool '{'x' * 36}... (no tools are registered)"


def test_a_problem_reads_as_its_step_then_its_message():
    assert str(Problem(3, "unknown tool 'x' (allowed: a, b)")) == (
        "step 3: unknown tool 'x' (allowed: a, b)"
    )
    assert str(Problem(None, "cycle: 1 -> 2 -> 1")) == "cycle: 1 -> 2 -> 1"


def test_plan_invalid_keeps_its_problems_and_joins_them_in_its_message():
    error = PlanInvalid([Problem(1, "depends on itself"), Problem(None, "cycle: 2 -> 3 -> 2")])

    assert [p.step_id for p in error.problems] == [1, None]
    assert str(error) == "step 1: depends on itself; cycle: 2 -> 3 -> 2"
    assert isinstance(error, ValueError)


def test_a_plan_refuses_duplicate_step_ids_and_names_a_missing_step():
    with pytest.raises(ValueError, match="unique"):
        Plan(steps=(PlanStep(1, "noop", {}, ()), PlanStep(1, "noop", {}, ())))
    with pytest.raises(KeyError, match="no step 9"):
        Plan(steps=(PlanStep(1, "noop", {}, ()),)).step(9)


def test_a_step_holding_an_unpaired_surrogate_is_refused_naming_it():
    data = {"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone \udc80"}}]}

    with pytest.raises(PlanInvalid) as invalid:
        validate_plan(data, CATALOG, max_steps=None)

    assert [str(p) for p in invalid.value.problems] == [
        "step 1: holds text that cannot be stored: an unpaired surrogate ('\\udc80')"
    ]
