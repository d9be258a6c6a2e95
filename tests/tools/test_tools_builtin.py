"""The read-only demo tools: catalog prices, currency, fares, hotels, orders and search."""

import json
import math
import re

import pytest

from plans.tools import ToolError
from plans.tools.builtin import (
    DATA_DIR,
    convert_currency,
    flight_price,
    hotel_price,
    order_total,
    price,
    search,
)


def test_the_catalog_has_at_least_twelve_items_including_the_demo_ones():
    items = json.loads((DATA_DIR / "catalog.json").read_text())["items"]
    assert len(items) >= 12
    prices = {item["name"]: item["price_inr"] for item in items}
    assert prices["iPhone 16"] == 79900
    assert prices["AirPods 4"] == 12900
    assert all(isinstance(p, int) and p > 0 for p in prices.values())


@pytest.mark.parametrize(
    "name", ["iPhone 16", "iphone 16", "IPHONE 16", "  iPhone   16 ", "iphone16"]
)
def test_price_lookup_ignores_case_and_spacing(name):
    assert price(name) == 79900


def test_every_catalog_item_has_its_listed_price():
    items = json.loads((DATA_DIR / "catalog.json").read_text())["items"]
    for item in items:
        assert price(item["name"]) == item["price_inr"]


def test_an_unknown_item_names_the_close_matches():
    with pytest.raises(ToolError) as caught:
        price("iPhone 15")
    message = str(caught.value)
    assert message.startswith("unknown item 'iPhone 15'; did you mean:")
    assert "iPhone 16" in message


def test_an_unknown_item_with_no_close_match_lists_the_catalog():
    with pytest.raises(ToolError) as caught:
        price("toaster")
    message = str(caught.value)
    assert "unknown item 'toaster'; known items:" in message
    assert "AirPods 4" in message
    assert "MacBook Air M4" in message


@pytest.mark.parametrize(
    ("amount", "source", "target", "expected"),
    [
        (88, "INR", "USD", 1.0),
        (1, "USD", "INR", 88.0),
        (100, "USD", "EUR", 86.27),
        (1000, "INR", "GBP", 8.55),
        (12.5, "GBP", "GBP", 12.5),
        (0, "EUR", "INR", 0.0),
    ],
)
def test_currency_conversion_uses_fixed_rates_rounded_to_two_places(
    amount, source, target, expected
):
    result = convert_currency(amount, source, target)
    assert result == expected
    assert isinstance(result, float)


def test_an_unknown_currency_is_a_tool_error():
    with pytest.raises(ToolError, match="unknown currency 'JPY'"):
        convert_currency(1, "JPY", "INR")  # type: ignore[arg-type]


@pytest.mark.parametrize("amount", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_amount_is_a_tool_error(amount):
    with pytest.raises(ToolError, match="finite"):
        convert_currency(amount, "USD", "INR")


@pytest.mark.parametrize("amount", [1e25, 1e26, 1e30, 1e308, -1e25, 100_000_000_001])
def test_an_amount_beyond_the_limit_is_a_tool_error_naming_it(amount):
    with pytest.raises(ToolError, match="too large to convert; the limit is 100,000,000,000 "):
        convert_currency(amount, "USD", "INR")


@pytest.mark.parametrize(
    ("amount", "source", "target", "expected"),
    [
        (100_000_000_000, "GBP", "INR", 11_700_000_000_000.0),
        (-100_000_000_000, "INR", "GBP", -854_700_854.7),
        (-5, "USD", "INR", -440.0),
        (-0.001, "USD", "INR", -0.09),
    ],
)
def test_amounts_up_to_the_limit_either_side_of_zero_convert_to_the_cent(
    amount, source, target, expected
):
    assert convert_currency(amount, source, target) == expected


@pytest.mark.parametrize("amount", [-0.0, -0.00001])
def test_an_amount_that_rounds_to_zero_converts_to_zero_not_minus_zero(amount):
    result = convert_currency(amount, "USD", "INR")
    assert result == 0.0
    assert math.copysign(1, result) == 1


def test_flight_fares_are_deterministic_plausible_and_vary_by_date_and_direction():
    fare = flight_price("Bengaluru", "Goa", "2026-12-19")
    assert fare == flight_price("bangalore", "GOI", "2026-12-19")
    assert isinstance(fare, int)
    assert 2000 <= fare <= 8000
    by_date = {flight_price("Bengaluru", "Goa", f"2026-12-{day:02d}") for day in range(1, 29)}
    assert len(by_date) > 20
    assert flight_price("Goa", "Bengaluru", "2026-12-19") != fare


def test_longer_flights_cost_more_on_the_whole():
    days = [f"2026-11-{day:02d}" for day in range(1, 29)]
    short = sum(flight_price("Bengaluru", "Chennai", day) for day in days)
    long = sum(flight_price("Bengaluru", "Delhi", day) for day in days)
    assert long > 2 * short


@pytest.mark.parametrize("bad", ["19-12-2026", "2026-13-01", "2026-02-30", "tomorrow", "20261219"])
def test_a_flight_date_that_is_not_yyyy_mm_dd_is_a_tool_error(bad):
    with pytest.raises(ToolError, match="YYYY-MM-DD"):
        flight_price("Bengaluru", "Goa", bad)


def test_an_unknown_city_is_a_tool_error_suggesting_close_names():
    with pytest.raises(ToolError, match="unknown city 'Bengalooru'; did you mean: Bengaluru"):
        flight_price("Bengalooru", "Goa", "2026-12-19")


def test_a_flight_to_the_same_city_is_a_tool_error():
    with pytest.raises(ToolError, match="both Goa"):
        flight_price("Goa", "GOI", "2026-12-19")


def test_hotel_prices_are_the_nightly_rate_times_nights():
    assert hotel_price("Goa", 2) == 10800
    assert hotel_price("goa", 1) * 30 == hotel_price("Goa", 30)


@pytest.mark.parametrize("nights", [0, -1, 31])
def test_hotel_nights_outside_one_to_thirty_are_a_tool_error(nights):
    with pytest.raises(ToolError, match="between 1 and 30"):
        hotel_price("Goa", nights)


def test_order_totals_come_from_the_demo_orders():
    assert order_total("A-1001") == 2499
    assert order_total(" a-1002 ") == 92800


def test_an_unknown_order_is_a_tool_error():
    with pytest.raises(ToolError, match="unknown order 'B-9'"):
        order_total("B-9")


def test_the_library_has_a_dozen_documents_with_unique_ids():
    docs = json.loads((DATA_DIR / "docs.json").read_text())["documents"]
    assert len(docs) >= 12
    assert len({doc["id"] for doc in docs}) == len(docs)


def test_search_returns_cited_snippets():
    hits = search("What makes plan-and-execute agents cheaper than ReAct?")
    assert 1 <= len(hits) <= 3
    for hit in hits:
        assert set(hit) == {"doc", "title", "snippet", "cite"}
        assert hit["cite"] == f"[{hit['doc']}]"
        assert hit["snippet"]
    assert hits[0]["doc"] == "plan-and-execute"
    assert "react-loop" in [hit["doc"] for hit in hits]
    assert "cheaper" in hits[0]["snippet"]


def test_search_snippets_come_from_the_document_around_a_query_word():
    docs = {
        doc["id"]: doc["text"]
        for doc in json.loads((DATA_DIR / "docs.json").read_text())["documents"]
    }
    for hit in search("jitter backoff", limit=5):
        text = hit["snippet"].strip("…")
        assert text in docs[hit["doc"]]
        assert re.search(r"jitter|backoff", text, re.IGNORECASE)


def test_search_ranks_title_matches_first():
    assert search("circuit breakers")[0]["doc"] == "circuit-breakers"
    assert search("refund policy")[0]["doc"] == "refund-policy"
    assert search("prompt injection")[0]["doc"] == "prompt-injection"


def test_search_honours_the_limit_and_returns_nothing_for_unknown_words():
    assert len(search("agent", limit=1)) == 1
    assert len(search("agent", limit=10)) > 3
    assert search("xylophone") == []


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_search_query_is_a_tool_error(query):
    with pytest.raises(ToolError, match="empty"):
        search(query)


def test_a_search_query_of_only_common_words_is_a_tool_error():
    with pytest.raises(ToolError, match="only common words"):
        search("what is the")


@pytest.mark.parametrize("limit", [0, 11])
def test_a_search_limit_outside_one_to_ten_is_a_tool_error(limit):
    with pytest.raises(ToolError, match="between 1 and 10"):
        search("agent", limit=limit)
