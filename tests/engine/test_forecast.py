"""The forecast's arithmetic: which past answers count as similar, and tools' declared costs."""

from decimal import Decimal

from plans.engine.forecast import (
    DEFAULT_ANSWER_TOKENS,
    AnswerSample,
    answer_tokens,
    forecast_error,
    tools_cost,
)


def sample(tools, output, input_tokens=1000):
    return AnswerSample(
        tools=frozenset(tools), tokens={"input_tokens": input_tokens, "output_tokens": output}
    )


def test_the_median_of_runs_with_the_same_tool_set_is_taken_first():
    history = [
        sample({"price", "calculator"}, 100),
        sample({"price", "calculator"}, 300, input_tokens=2000),
        sample({"price", "calculator"}, 200),
        sample({"flight_price"}, 5000),
    ]

    expected = answer_tokens(["price", "price", "calculator"], history)

    assert expected.basis == "same tools"
    assert expected.samples == 3
    assert expected.tokens["output_tokens"] == 200
    assert expected.tokens["input_tokens"] == 1000
    assert expected.tokens["cache_read_tokens"] == 0


def test_without_a_similar_run_all_runs_count_then_the_default():
    history = [sample({"flight_price"}, 500), sample({"order_total"}, 700)]

    assert answer_tokens(["price"], history).basis == "all runs"
    assert answer_tokens(["price"], history).tokens["output_tokens"] == 600
    fallback = answer_tokens(["price"], [])
    assert (fallback.basis, fallback.samples) == ("default", 0)
    assert fallback.tokens == DEFAULT_ANSWER_TOKENS


def test_tools_cost_counts_each_call_and_names_the_undeclared_once():
    declared = {"flight_price": Decimal("0.002"), "book": Decimal(0), "price": None}

    total, undeclared = tools_cost(
        ["flight_price", "flight_price", "book", "price", "mcp"], declared
    )

    assert total == Decimal("0.004")
    assert undeclared == ["price", "mcp"]


def test_the_error_is_a_signed_fraction_of_the_actual_cost():
    assert forecast_error(Decimal("0.012"), Decimal("0.010")) == Decimal("0.2")
    assert forecast_error(Decimal("0.005"), Decimal("0.010")) == Decimal("-0.5")
    assert forecast_error(Decimal("0.005"), Decimal(0)) is None
