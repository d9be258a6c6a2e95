"""Where cost is computed: USD per million tokens, with cache reads and writes priced apart."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings

from plans.llm.base import ModelRequest, Usage

PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
# Columns a table may leave out: one-hour cache writes (USD per million tokens; the API charges
# twice the input price) and web searches (USD per thousand requests).
OPTIONAL_PRICES = {
    "cache_write_1h": lambda prices: 2 * prices["input"],
    "web_search": lambda _: 10.0,
}
COST_QUANTUM = Decimal("1e-8")  # matches the 8 decimal places of ModelCall.cost_usd
_PER_MILLION = Decimal(1_000_000)


def prices_for(model: str) -> dict[str, float]:
    """The prices configured for a model in settings.AGENTSITE_MODEL_PRICES (a copy)."""
    table = settings.AGENTSITE_MODEL_PRICES
    if model not in table:
        known = ", ".join(sorted(table)) or "none"
        raise ValueError(
            f"no prices configured for model {model!r} in AGENTSITE_MODEL_PRICES "
            f"(known models: {known})"
        )
    prices = dict(table[model])
    missing = [key for key in PRICE_KEYS if key not in prices]
    if missing:
        raise ValueError(f"AGENTSITE_MODEL_PRICES[{model!r}] lacks {', '.join(missing)}")
    for key, default in OPTIONAL_PRICES.items():
        prices.setdefault(key, default(prices))
    return prices


def _price(prices: Mapping[str, float], key: str) -> Decimal:
    if key not in prices:
        raise ValueError(f"prices lack {key!r} (need {', '.join(PRICE_KEYS)})")
    # str() first so 0.30 stays 0.30 rather than its binary approximation.
    return Decimal(str(prices[key]))


def cost_usd(usage: Usage, prices: Mapping[str, float]) -> Decimal:
    """What the usage costs in USD, exact to 1e-8."""
    five_minute_writes = usage.cache_write_tokens - usage.cache_write_1h_tokens
    total = (
        _price(prices, "input") * usage.input_tokens
        + _price(prices, "output") * usage.output_tokens
        + _price(prices, "cache_read") * usage.cache_read_tokens
        + _price(prices, "cache_write") * five_minute_writes
    )
    if usage.cache_write_1h_tokens:
        total += _price(prices, "cache_write_1h") * usage.cache_write_1h_tokens
    if usage.web_search_requests:
        total += _price(prices, "web_search") * 1000 * usage.web_search_requests
    return (total / _PER_MILLION).quantize(COST_QUANTUM, rounding=ROUND_HALF_UP)


def estimate_cost_usd(request: ModelRequest, prices: Mapping[str, float]) -> Decimal:
    """A pessimistic estimate before the call: max_tokens of output, and the estimated input
    at the dearer of the input and cache-write prices (a cold cache writes the prefix)."""
    tokens = request.estimated_input_tokens()
    if _price(prices, "cache_write") > _price(prices, "input"):
        usage = Usage(cache_write_tokens=tokens, output_tokens=request.max_tokens)
    else:
        usage = Usage(input_tokens=tokens, output_tokens=request.max_tokens)
    return cost_usd(usage, prices)
