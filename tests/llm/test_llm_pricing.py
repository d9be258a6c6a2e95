from decimal import Decimal

import pytest

from plans.llm.base import ModelRequest, Usage
from plans.llm.pricing import cost_usd, estimate_cost_usd, prices_for

SONNET = {"input": 3.00, "output": 15.00, "cache_read": 0.30, "cache_write": 3.75}


def test_each_token_class_is_charged_its_own_price_per_million():
    usage = Usage(
        input_tokens=1234, output_tokens=567, cache_read_tokens=10000, cache_write_tokens=2000
    )
    # 1234*3 + 567*15 + 10000*0.30 + 2000*3.75 = 22707 micro-dollars
    assert cost_usd(usage, SONNET) == Decimal("0.02270700")


def test_cost_is_a_decimal_quantized_to_eight_places():
    cost = cost_usd(Usage(input_tokens=1), SONNET)
    assert isinstance(cost, Decimal)
    assert cost == Decimal("0.00000300")
    assert cost.as_tuple().exponent == -8


def test_a_million_output_tokens_cost_exactly_the_output_price():
    assert cost_usd(Usage(output_tokens=1_000_000), SONNET) == Decimal("15")


def test_cache_reads_are_not_priced_as_fresh_input():
    fresh = cost_usd(Usage(input_tokens=100_000), SONNET)
    cached = cost_usd(Usage(cache_read_tokens=100_000), SONNET)
    assert (fresh, cached) == (Decimal("0.3"), Decimal("0.03"))


def test_prices_come_from_settings_and_unknown_models_are_named(settings):
    settings.AGENTSITE_MODEL_PRICES = {"m-1": SONNET, "offline": dict.fromkeys(SONNET, 0.0)}
    assert prices_for("m-1") == {**SONNET, "cache_write_1h": 6.0, "web_search": 10.0}
    with pytest.raises(ValueError, match=r"'gpt-x'.*known models: m-1, offline"):
        prices_for("gpt-x")


def test_prices_lacking_a_token_class_are_refused():
    with pytest.raises(ValueError, match="cache_write"):
        cost_usd(Usage(input_tokens=1), {"input": 1, "output": 1, "cache_read": 1})


def test_the_estimate_charges_estimated_input_at_the_cache_write_price_and_all_of_max_tokens():
    request = ModelRequest(
        model="m",
        system="s" * 400,
        tools_catalog=[],
        messages=[{"role": "user", "content": "u" * 398}],
        max_tokens=1000,
        purpose="plan",
    )
    # 400 + 2 (separator) + 398 characters = 200 tokens of input.
    assert request.estimated_input_tokens() == 200
    # 200 * 3.75 (a cache write costs more than plain input) + 1000 * 15 = 15750 micro-dollars.
    assert estimate_cost_usd(request, SONNET) == Decimal("0.01575000")
    without_cache_premium = {**SONNET, "cache_write": 3.00}
    assert estimate_cost_usd(request, without_cache_premium) == Decimal("0.01560000")


def test_usages_add_up_class_by_class():
    total = Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40)
    assert total == Usage(11, 22, 33, 44)
    assert total.total_tokens == 110
    assert sum([Usage(1, 2, 3, 4), Usage(10, 20, 30, 40)]) == total


def test_one_hour_cache_writes_are_priced_at_their_own_rate(settings):
    prices = prices_for("claude-sonnet-5-5")
    usage = Usage(cache_write_tokens=3000, cache_write_1h_tokens=1000)

    # 2000 five-minute writes at 3.75 and 1000 one-hour writes at 6.00 per million.
    assert cost_usd(usage, prices) == Decimal("0.01350000")


def test_a_price_table_without_the_new_columns_gets_the_apis_multipliers(settings):
    settings.AGENTSITE_MODEL_PRICES = {"m": SONNET}

    prices = prices_for("m")

    assert prices["cache_write_1h"] == 6.00  # twice the input price
    assert prices["web_search"] == 10.00  # per thousand searches


def test_server_web_searches_are_priced_per_request():
    prices = {**SONNET, "cache_write_1h": 6.0, "web_search": 10.0}

    assert cost_usd(Usage(web_search_requests=3), prices) == Decimal("0.03000000")
    assert cost_usd(Usage(web_fetch_requests=3), prices) == 0  # fetches cost only tokens
