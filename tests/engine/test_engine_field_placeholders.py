"""Field placeholders: "{{n.field}}", "{{n.a.b}}" and "{{n[0]}}" select part of step n's result."""

from typing import Any

import pytest
from engine_catalog import CATALOG, FakeTool, object_schema, step
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plans.engine import (
    MissingPath,
    Placeholder,
    PlanInvalid,
    UnresolvedPlaceholder,
    placeholder_refs,
    placeholders,
    resolve,
    validate_plan,
)
from plans.engine.substitution import path_text

QUICK = settings(max_examples=200, deadline=None)

REFUND = {"status": "refunded", "reference": "RF-7", "order_id": "A-1001", "amount_inr": 2499}
RESULTS = {
    1: 2499,
    2: REFUND,
    3: [{"name": "Goa", "nights": [2, 3]}, {"name": "Pune", "nights": []}],
    4: {"hotel": {"price_inr": 9800, "tags": ["sea", None]}},
}


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("{{2.reference}}", "RF-7"),
        ("{{2.amount_inr}}", 2499),
        ("{{ 2.amount_inr }}", 2499),
        ("{{3[0]}}", {"name": "Goa", "nights": [2, 3]}),
        ("{{3[1].nights}}", []),
        ("{{3[0].nights[1]}}", 3),
        ("{{4.hotel.tags[1]}}", None),
    ],
)
def test_an_exact_field_placeholder_becomes_the_selected_value_with_its_own_type(text, resolved):
    assert resolve(text, RESULTS) == resolved


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("Reference: {{2.reference}}", "Reference: RF-7"),
        ("INR {{2.amount_inr}} for {{2.order_id}}", "INR 2499 for A-1001"),
        ("tags {{4.hotel.tags}}", 'tags ["sea",null]'),
        ("first: {{3[0]}}", 'first: {"name":"Goa","nights":[2,3]}'),
    ],
)
def test_a_field_placeholder_inside_text_becomes_the_selected_values_text(text, resolved):
    assert resolve(text, RESULTS) == resolved


def test_a_backslash_before_the_braces_writes_literal_braces():
    assert resolve(r"write \{{1}} to get {{1}}", RESULTS) == "write {{1}} to get 2499"
    assert resolve(r"\{{2.reference}}", RESULTS) == "{{2.reference}}"
    assert placeholder_refs({"a": r"\{{1}}"}) == set()


def test_a_missing_key_names_the_path_and_the_keys_that_exist():
    with pytest.raises(MissingPath) as caught:
        resolve({"body": "Reference: {{2.refrence}}"}, RESULTS)

    assert str(caught.value) == (
        "placeholder {{2.refrence}}: step 2's result has no key 'refrence' "
        "(its keys: amount_inr, order_id, reference, status)"
    )
    assert isinstance(caught.value, UnresolvedPlaceholder)  # the executor's one except clause
    assert caught.value.step_id == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{3[2]}}", "placeholder {{3[2]}}: step 3's result has no item [2] (it has 2 items)"),
        (
            "{{3[1].nights[0]}}",
            "placeholder {{3[1].nights[0]}}: step 3's result at [1].nights has no item [0] "
            "(it is empty)",
        ),
        ("{{1.total}}", "placeholder {{1.total}}: step 1's result is a number, not an object"),
        ("{{2[0]}}", "placeholder {{2[0]}}: step 2's result is an object, not an array"),
        (
            "{{2.reference.id}}",
            "placeholder {{2.reference.id}}: step 2's result at .reference is a string, "
            "not an object",
        ),
    ],
)
def test_a_path_the_result_does_not_have_says_where_it_stops(text, message):
    with pytest.raises(MissingPath) as caught:
        resolve(text, RESULTS)

    assert str(caught.value) == message


def test_placeholders_reports_each_step_and_path():
    args = {"a": "{{2.reference}} {{3[0].name}}", "b": ["{{1}}"]}

    assert set(placeholders(args)) == {
        Placeholder(2, ("reference",)),
        Placeholder(3, (0, "name")),
        Placeholder(1),
    }
    assert placeholder_refs(args) == {1, 2, 3}


REFUND_OUTPUT = object_schema(
    {
        "status": {"type": "string"},
        "reference": {"type": "string"},
        "amount_inr": {"type": "integer"},
    }
)


def catalog_with_outputs() -> dict[str, Any]:
    return {
        **CATALOG,
        "refund": FakeTool(
            "refund", {"type": "object"}, destructive=True, output_schema=REFUND_OUTPUT
        ),
        "hits": FakeTool(
            "hits",
            {"type": "object"},
            output_schema={"type": "array", "items": {"type": "object"}},
        ),
    }


def problems_of(body: str, tool: str = "refund") -> list[str]:
    data = {"steps": [step(1, tool), step(2, "noop", {"body": body}, [1])]}
    try:
        validate_plan(data, catalog_with_outputs(), max_steps=None)
    except PlanInvalid as invalid:
        return [str(problem) for problem in invalid.problems]
    return []


def test_validation_accepts_a_path_the_tool_declares():
    assert problems_of("Reference: {{1.reference}}, INR {{1.amount_inr}}") == []


def test_validation_refuses_a_key_the_tool_does_not_return_naming_the_keys_it_does():
    assert problems_of("Reference: {{1.ref}}") == [
        "step 2: placeholder {{1.ref}}: step 1's result (refund) has no key 'ref' "
        "(its keys: amount_inr, reference, status)"
    ]


def test_validation_refuses_a_path_through_a_scalar_field():
    assert problems_of("{{1.amount_inr.paise}}") == [
        "step 2: placeholder {{1.amount_inr.paise}}: step 1's result (refund) at .amount_inr "
        "is an integer, not an object"
    ]


def test_validation_does_not_guess_inside_an_open_object_or_a_tool_without_an_output_schema():
    assert problems_of("{{1[0].anything}}", tool="hits") == []
    assert problems_of("{{1.anything}}", tool="noop") == []
    assert problems_of("{{1[0]}}", tool="hits") == []
    assert problems_of("{{1.x}}", tool="hits") == [
        "step 2: placeholder {{1.x}}: step 1's result (hits) is an array, not an object"
    ]


# --- properties ---------------------------------------------------------------------------

KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True)
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def value_and_existing_path(draw) -> tuple[Any, tuple[str | int, ...], Any]:
    """A random result, a path that exists in it, and the value found by indexing directly."""
    value = draw(JSON)
    path: list[str | int] = []
    here = value
    while isinstance(here, dict | list) and here and draw(st.booleans()):
        if isinstance(here, dict):
            key = draw(st.sampled_from(sorted(here)))
        else:
            key = draw(st.integers(0, len(here) - 1))
        path.append(key)
        here = here[key]
    return value, tuple(path), here


@QUICK
@given(value_and_existing_path(), st.integers(1, 10_000))
def test_an_existing_path_resolves_to_what_direct_indexing_gives(case, step_id):
    value, path, expected = case
    placeholder = "{{" + f"{step_id}{path_text(path)}" + "}}"

    assert resolve(placeholder, {step_id: value}) == expected
    assert resolve({"nested": [placeholder]}, {step_id: value}) == {"nested": [expected]}
    assert set(placeholders(placeholder)) == {Placeholder(step_id, path)}


@QUICK
@given(value_and_existing_path(), st.one_of(KEYS, st.integers(0, 6)))
def test_a_path_that_does_not_exist_always_fails_naming_the_placeholder(case, extra):
    value, path, found = case
    missing = (*path, extra)
    exists = (isinstance(extra, str) and isinstance(found, dict) and extra in found) or (
        isinstance(extra, int) and isinstance(found, list) and extra < len(found)
    )
    assume(not exists)
    placeholder = "{{5" + path_text(missing) + "}}"

    with pytest.raises(MissingPath) as caught:
        resolve(f"text around {placeholder}", {5: value})

    assert str(caught.value).startswith(f"placeholder {placeholder}: step 5's result")
