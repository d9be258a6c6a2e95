"""The registry: built-ins plus settings.AGENTSITE_TOOL_MODULES, loaded once."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from plans.tools import (
    ToolSpec,
    get_registry,
    reset_registry,
    tool,
    tool_catalog_for_prompt,
)

BUILT_INS = {
    "ask_human",
    "book_flight",
    "book_hotel",
    "calculator",
    "convert_currency",
    "flight_price",
    "hotel_price",
    "issue_refund",
    "order_total",
    "result_slice",
    "price",
    "search",
    "send_email",
}
DESTRUCTIVE = {"send_email", "issue_refund", "book_flight", "book_hotel"}


@pytest.fixture
def fresh_registry(settings):
    """Start from an unloaded registry and leave one behind for the next test."""
    reset_registry()
    yield settings
    reset_registry()


def test_the_registry_holds_exactly_the_built_in_tools_by_default(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = []
    registry = get_registry()
    assert set(registry) == BUILT_INS
    assert all(isinstance(spec, ToolSpec) and spec.name == name for name, spec in registry.items())
    assert {name for name, spec in registry.items() if spec.destructive} == DESTRUCTIVE
    assert {name for name, spec in registry.items() if spec.takes_idempotency_key} == DESTRUCTIVE


def test_the_built_in_signatures_match_the_contract():
    registry = get_registry()
    expected = {
        "price": ["item"],
        "calculator": ["expression"],
        "convert_currency": ["amount", "from_currency", "to_currency"],
        "search": ["query", "limit"],
        "flight_price": ["origin", "destination", "date"],
        "hotel_price": ["city", "nights"],
        "order_total": ["order_id"],
        "send_email": ["to", "subject", "body"],
        "issue_refund": ["order_id", "amount_inr", "reason"],
        "book_flight": ["origin", "destination", "date", "passenger", "price_inr"],
        "book_hotel": ["city", "check_in", "nights", "guest", "price_inr"],
    }
    for name, params in expected.items():
        assert list(registry[name].schema["properties"]) == params, name
    assert registry["search"].schema["required"] == ["query"]
    currency = registry["convert_currency"].schema["properties"]["to_currency"]
    assert currency["enum"] == ["INR", "USD", "EUR", "GBP"]


def test_configured_modules_add_their_tools(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = ["tests.tools.sample_tools"]
    registry = get_registry()
    assert set(registry) == BUILT_INS | {"word_count", "shout"}
    assert registry["word_count"].fn(text="two words") == 2
    assert registry["shout"].timeout_s == 5.0
    assert registry["word_count"].schema["properties"]["text"]["description"] == "the text to count"


def test_the_registry_is_loaded_once_until_reset(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = []
    first = get_registry()
    fresh_registry.AGENTSITE_TOOL_MODULES = ["tests.tools.sample_tools"]
    assert set(get_registry()) == set(first)
    assert get_registry()["price"] is first["price"]
    reset_registry()
    assert "word_count" in get_registry()


def test_get_registry_returns_a_copy_that_callers_cannot_corrupt(fresh_registry):
    registry = get_registry()
    del registry["price"]
    registry["bogus"] = registry["search"]
    assert "price" in get_registry()
    assert "bogus" not in get_registry()


def test_an_unimportable_module_is_improperly_configured_naming_it(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = ["tests.tools.no_such_tools"]
    with pytest.raises(ImproperlyConfigured, match=r"'tests\.tools\.no_such_tools'"):
        get_registry()
    # The failure is not cached: fixing the setting is enough.
    fresh_registry.AGENTSITE_TOOL_MODULES = []
    assert set(get_registry()) == BUILT_INS


def test_a_string_instead_of_a_list_of_modules_is_improperly_configured(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = "tests.tools.sample_tools"
    with pytest.raises(ImproperlyConfigured, match="must be a list of module names"):
        get_registry()


def test_a_name_registered_by_two_modules_is_an_error_naming_both_functions(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = ["tests.tools.sample_clashing_tools"]
    with pytest.raises(ImproperlyConfigured) as caught:
        get_registry()
    message = str(caught.value)
    assert "'price' is registered twice" in message
    assert "plans.tools.builtin.price" in message
    assert "tests.tools.sample_clashing_tools.price" in message


def test_a_module_listed_twice_is_loaded_once(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = ["tests.tools.sample_tools", "tests.tools.sample_tools"]
    assert "word_count" in get_registry()


def test_tools_decorated_outside_the_configured_modules_stay_out_of_the_registry(fresh_registry):
    @tool
    def local_only_tool(x: int) -> int:
        """Declared in a test, not in a configured module."""
        return x

    assert "local_only_tool" not in get_registry()


def test_call_passes_the_idempotency_key_only_to_tools_that_take_one():
    seen = {}

    @tool(destructive=True)
    def keyed_tool(x: int, idempotency_key: str) -> int:
        """Keyed."""
        seen["key"] = idempotency_key
        return x

    @tool
    def unkeyed_tool(x: int) -> int:
        """Unkeyed."""
        return x + 1

    assert keyed_tool.tool_spec.call({"x": 1}, idempotency_key="k-1") == 1
    assert seen == {"key": "k-1"}
    assert unkeyed_tool.tool_spec.call({"x": 1}, idempotency_key="k-2") == 2


def test_call_uses_the_executors_key_over_one_smuggled_into_the_arguments():
    @tool(destructive=True)
    def smuggled_tool(idempotency_key: str) -> str:
        """Returns its key."""
        return idempotency_key

    spec = smuggled_tool.tool_spec
    assert spec.call({"idempotency_key": "from-the-model"}, idempotency_key="real") == "real"


def test_the_prompt_catalog_is_sorted_by_name_and_shaped_for_the_planner():
    registry = get_registry()
    catalog = tool_catalog_for_prompt(registry)
    assert [entry["name"] for entry in catalog] == sorted(registry)
    for entry in catalog:
        assert set(entry) - {"output_schema"} == {
            "name",
            "description",
            "input_schema",
            "destructive",
        }
        assert entry["description"]
        assert entry["input_schema"] == registry[entry["name"]].schema
    by_name = {entry["name"]: entry for entry in catalog}
    assert by_name["send_email"]["destructive"] is True
    assert by_name["price"]["destructive"] is False
    assert "idempotency_key" not in by_name["issue_refund"]["input_schema"]["properties"]
    assert "reference" in by_name["issue_refund"]["output_schema"]["properties"]


def test_editing_the_prompt_catalog_does_not_change_the_tool_schemas():
    registry = get_registry()
    catalog = tool_catalog_for_prompt(registry)
    catalog[0]["input_schema"]["properties"].clear()
    assert registry[catalog[0]["name"]].schema["properties"]


def test_a_tool_module_that_reads_the_registry_while_importing_gets_a_clear_error(fresh_registry):
    fresh_registry.AGENTSITE_TOOL_MODULES = ["tests.tools.sample_eager_tools"]
    with pytest.raises(ImproperlyConfigured, match="while the tool modules were being imported"):
        get_registry()


def test_a_preview_is_a_plain_function_of_a_destructive_tool():
    from plans.tools import Preview, tool

    def preview(x: int) -> Preview:
        return Preview(summary=str(x))

    async def async_preview(x: int) -> Preview:
        return Preview(summary=str(x))

    with pytest.raises(TypeError, match="must be a function, for a destructive tool"):
        tool(preview=preview)
    with pytest.raises(TypeError, match="must be a plain function"):
        tool(destructive=True, preview=async_preview)
    with pytest.raises(TypeError, match=r"preview_timeout_s=\.\.\.\) must be a positive"):
        tool(destructive=True, preview_timeout_s=0, preview=preview)
    with pytest.raises(TypeError, match="with a preview"):
        tool(destructive=True, preview_timeout_s=2)


def test_a_declared_per_call_cost_is_kept_exactly_and_a_bad_one_refused():
    from decimal import Decimal

    from plans.tools import tool

    def fare(city: str) -> int:
        """A fare."""
        return 1

    assert tool(cost_usd=0.002)(fare).tool_spec.cost_usd == Decimal("0.002")
    assert tool(cost_usd="0")(fare).tool_spec.cost_usd == Decimal(0)
    assert tool(fare).tool_spec.cost_usd is None  # not declared: the forecast says so
    for bad in (-1, "a dollar", True, float("nan"), [1]):
        with pytest.raises(TypeError, match=r"cost_usd=\.\.\.\) must be a number of USD"):
            tool(cost_usd=bad)
    assert get_registry()["flight_price"].cost_usd == Decimal("0.002")
