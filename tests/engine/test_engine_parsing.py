import json

import pytest
from engine_catalog import SEED_PLAN

from plans.engine import MAX_PLANNER_OUTPUT_CHARS, PlanParseError, parse_planner_output
from plans.engine.parsing import JSONUnreadable, read_json

SEED_TEXT = json.dumps(SEED_PLAN, indent=2)


def parse_error(text) -> str:
    with pytest.raises(PlanParseError) as caught:
        parse_planner_output(text)
    return str(caught.value)


def test_a_bare_json_object_is_read():
    assert parse_planner_output(SEED_TEXT) == SEED_PLAN


def test_an_object_in_a_json_fence_is_read():
    text = f"Here is the plan:\n```json\n{SEED_TEXT}\n```\nIt runs in two rounds."

    assert parse_planner_output(text) == SEED_PLAN


def test_an_object_in_a_fence_without_a_language_is_read():
    assert parse_planner_output(f"```\n{SEED_TEXT}\n```") == SEED_PLAN


def test_an_object_inside_prose_is_read():
    text = f"I will price both items, then add them. {SEED_TEXT} Let me know."

    assert parse_planner_output(text) == SEED_PLAN


def test_braces_in_prose_that_are_not_json_do_not_hide_the_object():
    text = 'Use {curly} braces {like this} and {"steps": []} then stop.'

    assert parse_planner_output(text) == {"steps": []}


def test_a_single_fence_is_preferred_over_an_example_object_in_the_prose():
    text = f'An example looks like {{"steps": []}}.\n```json\n{SEED_TEXT}\n```'

    assert parse_planner_output(text) == SEED_PLAN


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_output_is_refused(text):
    assert parse_error(text) == "planner output is empty"


def test_prose_without_any_object_is_refused():
    assert parse_error("I cannot plan that, sorry.") == "planner output has no JSON object"


def test_invalid_json_names_the_error_and_where_it_is_in_the_whole_output():
    text = 'Plan below.\n\n{"steps": [\n  {"id": 1,}\n]}'

    assert parse_error(text) == (
        "planner output is not valid JSON: Expecting property name enclosed in double quotes "
        "at line 4 column 12"
    )


def test_object_like_text_without_quoted_keys_is_reported_as_invalid_json():
    assert parse_error("plan: {steps: []}") == (
        "planner output is not valid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 8"
    )


@pytest.mark.parametrize(
    ("text", "got"),
    [("[1, 2]", "array"), ('"a plan"', "string"), ("42", "integer"), ("null", "null")],
)
def test_json_that_is_not_an_object_is_refused(text, got):
    assert parse_error(text) == f"planner output must be a JSON object, got {got}"


def test_a_list_of_steps_is_not_mistaken_for_its_first_step():
    assert parse_error('[{"id": 1}]') == "planner output must be a JSON object, got array"


def test_two_objects_are_refused_as_ambiguous():
    text = '{"steps": []} or perhaps {"steps": [1]}'

    assert parse_error(text) == "planner output has 2 JSON objects; expected one"


def test_output_over_the_size_cap_is_refused_before_parsing():
    text = " " * (MAX_PLANNER_OUTPUT_CHARS + 1)

    assert parse_error(text) == "planner output is too long: 200,001 characters (at most 200,000)"


def test_output_nested_too_deeply_is_refused():
    assert parse_error('{"a":' * 30_000) == "planner output is nested too deeply to read"


def test_an_integer_too_long_to_read_is_refused():
    assert parse_error('{"id": ' + "9" * 5000 + "}") == (
        "planner output cannot be read: an integer has more than 4,300 digits"
    )


def test_output_that_is_not_text_is_refused():
    assert parse_error(b"{}") == "planner output must be text, got bytes"


def test_many_stray_braces_are_refused_quickly():
    # Each failed decode scans to its error position; the number of attempts is bounded.
    text = ('{"k":' * 900 + "x") * 40

    assert parse_error(text).startswith("planner output is not valid JSON: Expecting value")


STEP_1 = '{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}}'
STEP_2 = '{"id": 2, "tool": "price", "args": {"item": "AirPods 4"}}'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        # Truncated after one whole step: not "the plan must have a steps list".
        (
            f'{{"steps": [{STEP_1}, {{"id": 2, "tool": "price", "args": {{"item": "Air',
            "Unterminated string starting at line 1 column 115",
        ),
        # A trailing comma after the last step.
        (f'{{"steps": [{STEP_1},]}}', "Expecting value at line 1 column 70"),
        # Truncated after two whole steps: not "2 JSON objects; expected one".
        (
            f'{{"steps": [{STEP_1}, {STEP_2}, {{"id": 3',
            "Expecting ',' delimiter at line 1 column 138",
        ),
        # A trailing comma inside the first step; the second step is whole.
        (
            f'{{"steps": [{{"id": 1, "args": {{"item": "x",}}}}, {STEP_2}]}}',
            "Expecting property name enclosed in double quotes at line 1 column 43",
        ),
        # The same, inside prose and inside a fence.
        (
            f'Here is the plan: {{"steps": [{STEP_1},]}} Done.',
            "Expecting value at line 1 column 88",
        ),
        (f'```json\n{{"steps": [{STEP_1},\n]}}\n```', "Expecting value at line 3 column 1"),
        # Brackets inside the broken object's strings do not end it early.
        (
            f'{{"steps": [{{"id": 1, "args": {{"item": "]}}]}}"}},}}, {STEP_2}]}}',
            "Expecting property name enclosed in double quotes at line 1 column 47",
        ),
    ],
)
def test_a_broken_object_is_reported_as_invalid_json_and_not_by_the_steps_inside_it(text, error):
    message = parse_error(text)

    assert message.startswith("planner output is not valid JSON: ")
    assert message.endswith(error)


@pytest.mark.parametrize(
    "text",
    [
        f'The shape is {{"steps": [...]}}; here it is: {{"steps": [{STEP_1}]}}',
        # A stray '{"' in the prose, or an example cut short, that never closes.
        f'I first tried {{"steps": [ but then: {{"steps": [{STEP_1}]}}',
        f'Format: {{"steps": [{{"id": ... \nPlan: {{"steps": [{STEP_1}]}}',
        # A wrapper the model broke, around a whole plan.
        f'{{"note": \'x\', "plan": {{"steps": [{STEP_1}]}}}}',
    ],
)
def test_a_broken_object_does_not_hide_a_whole_plan_after_or_inside_it(text):
    assert parse_planner_output(text) == {"steps": [json.loads(STEP_1)]}


@pytest.mark.parametrize(
    ("text", "singular", "plural"),
    [
        (
            '{"a": }',
            "is not valid JSON: Expecting value at line 1 column 7",
            "are not valid JSON: Expecting value at line 1 column 7",
        ),
        (
            '\n"abc',
            "is not valid JSON: Unterminated string starting at line 2 column 1",
            "are not valid JSON: Unterminated string starting at line 2 column 1",
        ),
        ("[" * 100_000, "is nested too deeply to read", "are nested too deeply to read"),
        (
            '{"n": ' + "9" * 5000 + "}",
            "cannot be read: an integer has more than 4,300 digits",
            "cannot be read: an integer has more than 4,300 digits",
        ),
    ],
)
def test_read_json_says_why_text_cannot_be_read(text, singular, plural):
    with pytest.raises(JSONUnreadable) as caught:
        read_json(text)

    assert str(caught.value) == singular
    assert caught.value.plural == plural


def test_read_json_reads_what_json_loads_reads():
    assert read_json(' {"a": [1, 2.5, null, true, "x"]} ') == {"a": [1, 2.5, None, True, "x"]}
