import pytest
from engine_catalog import object_schema

from plans.engine import check_args, json_type_name

SCHEMA = object_schema(
    {
        "item": {"type": "string", "minLength": 1, "maxLength": 5},
        "amount": {"type": "number", "minimum": 0, "maximum": 100},
        "count": {"type": "integer"},
        "currency": {"type": "string", "enum": ["INR", "USD"]},
        "express": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", **object_schema({"city": {"type": "string"}})},
        "note": {"type": ["string", "null"]},
    },
    required=["item"],
)


def test_conforming_arguments_have_no_problems():
    args = {
        "item": "pen",
        "amount": 2.5,
        "count": 3,
        "currency": "INR",
        "express": False,
        "tags": ["a", "b"],
        "address": {"city": "Goa"},
        "note": None,
    }

    assert check_args(SCHEMA, args) == []


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "missing required argument 'item'"),
        ({"item": "pen", "amount": "ten"}, "argument 'amount' must be a number, got string"),
        ({"item": "pen", "foo": 1}, "unexpected argument 'foo'"),
        ({"item": "pen", "currency": "EUR"}, "argument 'currency' must be one of 'INR', 'USD'"),
        ({"item": "pen", "amount": -1}, "argument 'amount' must be >= 0"),
        ({"item": "pen", "amount": 101}, "argument 'amount' must be <= 100"),
        ({"item": ""}, "argument 'item' must be at least 1 character long"),
        ({"item": "pencil"}, "argument 'item' must be at most 5 characters long"),
        ({"item": "pen", "express": "yes"}, "argument 'express' must be a boolean, got string"),
        ({"item": "pen", "tags": "a"}, "argument 'tags' must be an array, got string"),
        ({"item": "pen", "tags": ["a", 2]}, "argument 'tags[1]' must be a string, got integer"),
        ({"item": "pen", "address": {}}, "missing required argument 'address.city'"),
        ({"item": "pen", "note": 3}, "argument 'note' must be a string or null, got integer"),
    ],
)
def test_each_broken_rule_is_named_with_its_argument(args, problem):
    assert check_args(SCHEMA, args) == [problem]


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_neither_an_integer_nor_a_number(value):
    assert check_args(SCHEMA, {"item": "pen", "amount": value, "count": value}) == [
        "argument 'amount' must be a number, got boolean",
        "argument 'count' must be an integer, got boolean",
    ]


def test_an_integral_float_is_a_number_but_not_an_integer():
    assert check_args(SCHEMA, {"item": "pen", "amount": 3.0, "count": 3.0}) == [
        "argument 'count' must be an integer, got number"
    ]


@pytest.mark.parametrize(("value", "shown"), [(float("nan"), "NaN"), (float("-inf"), "-Infinity")])
def test_nan_and_infinity_are_not_numbers(value, shown):
    assert check_args(SCHEMA, {"item": "pen", "amount": value}) == [
        f"argument 'amount' must be a number, got {shown}"
    ]


def test_an_enum_of_integers_does_not_accept_true():
    schema = object_schema({"level": {"type": "integer", "enum": [1, 2]}})

    assert check_args(schema, {"level": True}) == [
        "argument 'level' must be an integer, got boolean"
    ]
    assert check_args(
        {"type": "object", "properties": {"level": {"enum": [1, 2]}}}, {"level": True}
    ) == ["argument 'level' must be one of 1, 2"]


def test_every_problem_is_reported_not_just_the_first():
    assert check_args(SCHEMA, {"amount": "x", "bogus": 1}) == [
        "missing required argument 'item'",
        "argument 'amount' must be a number, got string",
        "unexpected argument 'bogus'",
    ]


def test_arguments_that_are_not_an_object_are_refused():
    assert check_args(SCHEMA, ["pen"]) == ["arguments must be an object, got array"]


def test_placeholders_are_plain_strings_unless_allowed():
    args = {"item": "pen", "amount": "{{1}}"}

    assert check_args(SCHEMA, args) == ["argument 'amount' must be a number, got string"]
    assert check_args(SCHEMA, args, allow_placeholders=True) == []


def test_an_exact_placeholder_skips_every_check_because_its_value_is_unknown():
    args = {"item": "{{1}}", "currency": "{{ 2 }}", "tags": "{{3}}", "count": "{{4}}"}

    assert check_args(SCHEMA, args, allow_placeholders=True) == []


def test_text_with_placeholders_must_be_allowed_to_be_a_string():
    args = {"item": "{{1}} and {{2}}", "count": "{{1}} items", "tags": ["x {{1}}"]}

    assert check_args(SCHEMA, args, allow_placeholders=True) == [
        "argument 'count' must be an integer, got string"
    ]


def test_unknown_keywords_and_type_names_are_ignored():
    schema = {"type": "object", "properties": {"x": {"type": "decimal", "format": "money"}}}

    assert check_args(schema, {"x": 1, "y": 2}) == []


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "boolean"),
        (1, "integer"),
        (1.0, "number"),
        ("", "string"),
        ([], "array"),
        ({}, "object"),
        ((), "tuple"),
    ],
)
def test_json_type_names(value, name):
    assert json_type_name(value) == name
