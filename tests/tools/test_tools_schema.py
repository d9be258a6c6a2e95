"""Deriving a tool's description and JSON schema from its signature and docstring."""

import json
from dataclasses import dataclass
from typing import Any, Literal, Optional, TypedDict

import pytest
from django.core.exceptions import ImproperlyConfigured

from plans.engine.argschema import check_args
from plans.llm.base import catalog_text, compact_schema
from plans.tools import ToolSpec, get_registry, tool, tool_catalog_for_prompt
from plans.tools.schema import output_schema, parse_docstring

type Colour = Literal["red", "green"]
type MaybeColour = Colour | None

# The JSON-schema subset the engine's argument checker understands.
ALLOWED_KEYS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "description",
}


def schema_of(fn) -> dict:
    return fn.tool_spec.schema


def property_of(fn, name: str) -> dict:
    prop = dict(schema_of(fn)["properties"][name])
    prop.pop("description", None)
    return prop


def test_scalar_hints_become_json_types():
    @tool
    def scalars(text: str, count: int, ratio: float, flag: bool) -> None:
        """Scalars."""

    assert property_of(scalars, "text") == {"type": "string"}
    assert property_of(scalars, "count") == {"type": "integer"}
    assert property_of(scalars, "ratio") == {"type": "number"}
    assert property_of(scalars, "flag") == {"type": "boolean"}


def test_list_hints_become_arrays_with_item_schemas():
    @tool
    def lists(numbers: list[int], grid: list[list[str]], anything: list) -> None:
        """Lists."""

    assert property_of(lists, "numbers") == {"type": "array", "items": {"type": "integer"}}
    assert property_of(lists, "grid") == {
        "type": "array",
        "items": {"type": "array", "items": {"type": "string"}},
    }
    assert property_of(lists, "anything") == {"type": "array"}


def test_dict_hints_become_objects():
    @tool
    def dicts(loose: dict, counts: dict[str, int]) -> None:
        """Dicts."""

    assert property_of(dicts, "loose") == {"type": "object"}
    assert property_of(dicts, "counts") == {"type": "object"}


def test_literal_hints_become_enums_of_their_type():
    @tool
    def literals(mode: Literal["fast", "slow"], level: Literal[1, 2, 3], colour: Colour) -> None:
        """Literals."""

    assert property_of(literals, "mode") == {"type": "string", "enum": ["fast", "slow"]}
    assert property_of(literals, "level") == {"type": "integer", "enum": [1, 2, 3]}
    assert property_of(literals, "colour") == {"type": "string", "enum": ["red", "green"]}


def test_optional_hints_accept_null_and_are_not_required_with_a_default():
    @tool
    def optionals(
        name: str | None = None,
        age: Optional[int] = None,  # noqa: UP045 - the typing spelling must work too
        tag: str | None = "x",
        must: int | None = None,
    ) -> None:
        """Optionals."""

    assert property_of(optionals, "name") == {"type": ["string", "null"]}
    assert property_of(optionals, "age") == {"type": ["integer", "null"]}
    assert property_of(optionals, "tag") == {"type": ["string", "null"]}
    assert property_of(optionals, "must") == {"type": ["integer", "null"]}
    assert schema_of(optionals)["required"] == []


def test_optional_hint_without_a_default_is_still_required_but_may_be_null():
    @tool
    def needs(value: str | None) -> None:
        """Needs a value."""

    assert schema_of(needs)["required"] == ["value"]
    assert property_of(needs, "value") == {"type": ["string", "null"]}
    assert check_args(schema_of(needs), {"value": None}) == []
    assert check_args(schema_of(needs), {}) == ["missing required argument 'value'"]


def test_a_plain_hint_stays_non_null():
    @tool
    def plain_count(count: int = 1) -> None:
        """Plain."""

    assert property_of(plain_count, "count") == {"type": "integer"}
    assert check_args(schema_of(plain_count), {"count": None}) == [
        "argument 'count' must be an integer, got null"
    ]


def test_an_explicit_null_passes_the_argument_checker_for_an_optional_argument():
    @tool
    def limited(query: str, limit: int | None = None) -> None:
        """Limited."""

    schema = schema_of(limited)
    assert check_args(schema, {"query": "q", "limit": None}) == []
    assert check_args(schema, {"query": "q", "limit": 3}) == []
    assert check_args(schema, {"query": "q", "limit": "3"}) == [
        "argument 'limit' must be an integer or null, got string"
    ]


def test_nested_optional_hints_put_null_where_the_none_is():
    @tool
    def nested(
        maybe_list: list[int] | None = None,
        list_of_maybes: list[int | None] | None = None,
        maybe_dict: dict[str, int] | None = None,
        maybe_alias: MaybeColour = None,
    ) -> None:
        """Nested."""

    assert property_of(nested, "maybe_list") == {
        "type": ["array", "null"],
        "items": {"type": "integer"},
    }
    assert property_of(nested, "list_of_maybes") == {
        "type": ["array", "null"],
        "items": {"type": ["integer", "null"]},
    }
    assert property_of(nested, "maybe_dict") == {"type": ["object", "null"]}
    assert property_of(nested, "maybe_alias") == {
        "type": ["string", "null"],
        "enum": ["red", "green", None],
    }
    schema = schema_of(nested)
    assert check_args(schema, {"maybe_list": None, "list_of_maybes": [1, None]}) == []
    assert check_args(schema, {"maybe_list": [None]}) == [
        "argument 'maybe_list[0]' must be an integer, got null"
    ]


def test_literal_with_none_accepts_null_in_its_enum_and_type():
    @tool
    def picks(
        mode: Literal["fast", None],
        level: Literal[1, 2] | None = None,
        both: Optional[Literal["a", None]] = None,  # noqa: UP045 - None given twice
    ) -> None:
        """Picks."""

    assert property_of(picks, "mode") == {"type": ["string", "null"], "enum": ["fast", None]}
    assert property_of(picks, "level") == {"type": ["integer", "null"], "enum": [1, 2, None]}
    assert property_of(picks, "both") == {"type": ["string", "null"], "enum": ["a", None]}
    schema = schema_of(picks)
    assert check_args(schema, {"mode": None, "level": None, "both": None}) == []
    assert check_args(schema, {"mode": "slow"}) == ["argument 'mode' must be one of 'fast', null"]


def test_nullable_schemas_stay_valid_json_in_the_prompt_catalog():
    @tool
    def catalogued(mode: Literal["a", None], count: list[int] | None = None) -> None:
        """Catalogued."""

    entry = tool_catalog_for_prompt({"catalogued": catalogued.tool_spec})[0]
    text = catalog_text([entry])
    line = text.splitlines()[1]
    assert {"type": "object", **json.loads(line)["args"]} == compact_schema(schema_of(catalogued))
    assert '"enum":["a",null]' in line
    assert '"type":["array","null"]' in line


def test_required_lists_exactly_the_parameters_without_defaults_in_order():
    @tool
    def mixed(b: str, a: int, c: int = 3, *, d: bool, e: float = 1.5) -> None:
        """Mixed."""

    schema = schema_of(mixed)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert list(schema["properties"]) == ["b", "a", "c", "d", "e"]
    assert schema["required"] == ["b", "a", "d"]


def test_string_annotations_are_resolved():
    @tool
    def stringy(count: "int", names: "list[str]") -> None:
        """Stringy."""

    assert property_of(stringy, "count") == {"type": "integer"}
    assert property_of(stringy, "names") == {"type": "array", "items": {"type": "string"}}


def test_the_first_docstring_paragraph_is_the_description_on_one_line():
    @tool
    def described(item: str) -> int:
        """Price of an item in INR,
        before any discount.

        More detail that the planner does not need.
        """
        return 0

    assert described.tool_spec.description == "Price of an item in INR, before any discount."


def test_the_args_section_gives_each_parameter_its_description():
    @tool
    def documented(item: str, quantity: int = 1, note: str = "") -> int:
        """Total for some items.

        Args:
            item: the product name,
                exactly as listed
            quantity (int): how many
            note: ignored

        Returns:
            The total in INR.
        """
        return 0

    properties = documented.tool_spec.schema["properties"]
    assert properties["item"]["description"] == "the product name, exactly as listed"
    assert properties["quantity"]["description"] == "how many (default: 1)"
    assert properties["note"]["description"] == 'ignored (default: "")'


def test_a_word_and_colon_on_a_continuation_line_does_not_start_a_parameter():
    @tool
    def fetch(url: str, timeout: int = 10) -> str:
        """Fetch a page.

        Args:
            url: the address to fetch, for example
            https://example.com/docs
            note: only http and https are allowed
            timeout: seconds to wait
        """
        return ""

    properties = fetch.tool_spec.schema["properties"]
    assert set(properties) == {"url", "timeout"}
    assert properties["url"]["description"] == (
        "the address to fetch, for example https://example.com/docs "
        "note: only http and https are allowed"
    )
    assert properties["timeout"]["description"] == "seconds to wait (default: 10)"


def test_docstring_parsing_with_parameter_names_only_starts_entries_for_them():
    doc = "Do.\nArgs:\n    a: see\n    http://x.test/a\n    b: second\n"
    assert parse_docstring(doc, ["a", "b"])[1] == {"a": "see http://x.test/a", "b": "second"}


def test_a_default_is_mentioned_even_without_an_args_entry():
    @tool
    def defaulted(limit: int = 3) -> None:
        """Defaulted."""

    assert defaulted.tool_spec.schema["properties"]["limit"]["description"] == "Default: 3."


def test_a_missing_docstring_gives_an_empty_description():
    @tool
    def bare(x: int) -> int:
        return x

    assert bare.tool_spec.description == ""
    assert "description" not in bare.tool_spec.schema["properties"]["x"]


def test_docstring_parsing_stops_the_summary_at_a_section_header():
    summary, params = parse_docstring("Do a thing.\nArgs:\n    a: first\n    b: second\n")
    assert summary == "Do a thing."
    assert params == {"a": "first", "b": "second"}


def test_idempotency_key_is_excluded_from_the_schema_and_noted_on_the_spec():
    @tool(destructive=True)
    def refund(order_id: str, idempotency_key: str) -> dict:
        """Refund."""
        return {}

    spec = refund.tool_spec
    assert list(spec.schema["properties"]) == ["order_id"]
    assert spec.schema["required"] == ["order_id"]
    assert spec.takes_idempotency_key is True


def test_a_tool_without_idempotency_key_does_not_take_one():
    @tool
    def plain(x: int) -> int:
        """Plain."""
        return x

    assert plain.tool_spec.takes_idempotency_key is False


def test_an_idempotency_key_that_is_not_a_str_is_refused():
    with pytest.raises(TypeError, match=r"idempotency_key.*must be annotated as str"):

        @tool
        def keyed(idempotency_key: int) -> None:
            """Keyed."""


@pytest.mark.parametrize(
    ("source", "parameter", "reason"),
    [
        ("def f(x) -> int:\n    return 1", "'x'", "has no type hint"),
        ("def f(*items: int) -> int:\n    return 1", "'*items'", "not supported"),
        ("def f(**options: int) -> int:\n    return 1", "'**options'", "not supported"),
        ("def f(x: int, /) -> int:\n    return 1", "'x'", "positional-only"),
        ("def f(x: Any) -> int:\n    return 1", "'x'", "not supported"),
        ("def f(x: int | str) -> int:\n    return 1", "'x'", "only X | None"),
        ("def f(x: dict[int, str]) -> int:\n    return 1", "'x'", "dict keys must be str"),
        ("def f(x: list[set]) -> int:\n    return 1", "'x'", "set is not supported"),
        ("def f(x: Literal['a', 1]) -> int:\n    return 1", "'x'", "Literal values"),
        ("def f(x: tuple[int]) -> int:\n    return 1", "'x'", "not supported"),
    ],
)
def test_unsupported_signatures_raise_a_type_error_naming_the_function_and_parameter(
    source, parameter, reason
):
    namespace: dict = {"__name__": "generated_tools", "Any": Any, "Literal": Literal}
    exec(source, namespace)  # noqa: S102 - builds each bad signature from test data
    with pytest.raises(TypeError) as caught:
        tool(namespace["f"])
    message = str(caught.value)
    assert "@tool generated_tools.f:" in message
    assert parameter in message
    assert reason in message


def test_an_async_function_is_refused_naming_it():
    with pytest.raises(TypeError) as caught:

        @tool
        async def fetch_later(url: str) -> str:
            """Async."""
            return url

    message = str(caught.value)
    assert f"@tool {__name__}." in message
    assert "fetch_later" in message
    assert "async" in message


def test_an_async_generator_function_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"stream_later.*async generator"):

        @tool(timeout_s=5)
        async def stream_later(url: str):
            """Async generator."""
            yield url


def test_a_plain_function_returning_a_coroutine_fails_when_called():
    async def work(x: int) -> int:
        return x

    @tool
    def sneaky(x: int) -> int:
        """Returns a coroutine despite the plain def."""
        return work(x)  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"'sneaky'.*returned a coroutine"):
        sneaky.tool_spec.call({"x": 1}, idempotency_key="k")


def test_an_unresolvable_string_annotation_raises_a_type_error():
    with pytest.raises(TypeError, match="cannot resolve the type hints"):

        @tool
        def broken(x: "NoSuchType") -> None:  # noqa: F821 - the missing name is the point
            """Broken."""


def test_the_bare_decorator_keeps_the_function_callable_and_attaches_the_spec():
    @tool
    def double(x: int) -> int:
        """Double a number."""
        return 2 * x

    assert double(21) == 42
    spec = double.tool_spec
    assert isinstance(spec, ToolSpec)
    assert spec.name == "double"
    assert spec.fn is double
    assert spec.destructive is False
    assert spec.timeout_s is None
    assert spec.retryable == ()


def test_the_decorator_with_options_stores_them_on_the_spec():
    class Flaky(Exception):
        pass

    @tool(destructive=True, timeout_s=30, name="renamed_tool", retryable=(Flaky, TimeoutError))
    def original(x: int) -> int:
        """Renamed."""
        return x

    spec = original.tool_spec
    assert original(3) == 3
    assert spec.name == "renamed_tool"
    assert spec.destructive is True
    assert spec.timeout_s == 30.0
    assert spec.retryable == (Flaky, TimeoutError)


def test_the_decorator_with_empty_parentheses_works():
    @tool()
    def empty_parens(x: int) -> int:
        """Empty parentheses."""
        return x

    assert empty_parens.tool_spec.name == "empty_parens"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"destructive": "yes"}, "destructive"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": True}, "timeout_s"),
        ({"name": "has space"}, "must be 1-64"),
        ({"name": ""}, "must be 1-64"),
        ({"retryable": (ValueError, "oops")}, "exception types"),
    ],
)
def test_bad_decorator_options_raise_a_type_error(options, message):
    with pytest.raises(TypeError, match=message):

        @tool(**options)
        def optioned(x: int) -> int:
            """Optioned."""
            return x


def test_two_functions_with_one_tool_name_in_a_module_are_an_error_naming_both():
    @tool(name="twice_named_tool")
    def first(x: int) -> int:
        """First."""
        return x

    with pytest.raises(ImproperlyConfigured) as caught:

        @tool(name="twice_named_tool")
        def second(x: int) -> int:
            """Second."""
            return x

    message = str(caught.value)
    assert "'twice_named_tool'" in message
    assert "first" in message
    assert "second" in message


def test_redecorating_the_same_function_replaces_its_spec():
    def again(x: int) -> int:
        """Again."""
        return x

    tool(again)
    tool(timeout_s=3)(again)
    assert again.tool_spec.timeout_s == 3.0


def test_every_built_in_schema_uses_only_the_supported_json_schema_subset():
    def walk(schema: dict) -> None:
        assert set(schema) <= ALLOWED_KEYS, set(schema) - ALLOWED_KEYS
        for prop in schema.get("properties", {}).values():
            walk(prop)
        if "items" in schema:
            walk(schema["items"])

    for spec in get_registry().values():
        walk(spec.schema)
        assert spec.schema["additionalProperties"] is False


def test_built_in_schemas_agree_with_the_engine_argument_checker():
    argschema = pytest.importorskip("plans.engine.argschema")
    registry = get_registry()
    good = {
        "price": {"item": "iPhone 16"},
        "convert_currency": {"amount": 10, "from_currency": "USD", "to_currency": "INR"},
        "search": {"query": "ReAct"},
        "book_hotel": {
            "city": "Goa",
            "check_in": "2026-12-19",
            "nights": 2,
            "guest": "Asha Rao",
            "price_inr": 10800,
        },
    }
    for name, args in good.items():
        assert argschema.check_args(registry[name].schema, args) == [], name
    assert argschema.check_args(registry["price"].schema, {}) != []
    assert argschema.check_args(registry["price"].schema, {"item": "x", "idempotency_key": "k"})
    currency = {"amount": 1, "from_currency": "JPY", "to_currency": "INR"}
    assert argschema.check_args(registry["convert_currency"].schema, currency) != []


class _Refund(TypedDict):
    reference: str
    amount_inr: int


@dataclass
class _Quote:
    price_inr: int
    tags: list[str]


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (
            _Refund,
            {
                "type": "object",
                "properties": {"reference": {"type": "string"}, "amount_inr": {"type": "integer"}},
                "required": ["amount_inr", "reference"],
                "additionalProperties": False,
            },
        ),
        (
            _Quote,
            {
                "type": "object",
                "properties": {
                    "price_inr": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["price_inr", "tags"],
                "additionalProperties": False,
            },
        ),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (list[_Refund], {"type": "array", "items": output_schema(_Refund)}),
        (int | float, {"type": ["integer", "number"]}),
        (dict, {"type": "object"}),
        (object, None),  # outside the subset: the result is not checked
        (None, None),
    ],
)
def test_a_return_annotation_becomes_the_tools_output_schema(hint, expected):
    assert output_schema(hint) == expected


def test_the_refund_tool_declares_the_reference_a_plan_may_name():
    refund = get_registry()["issue_refund"].output_schema

    assert refund is not None
    assert set(refund["properties"]) == {"status", "reference", "order_id", "amount_inr"}
