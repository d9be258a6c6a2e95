"""The calculator: exact arithmetic, and refusal of everything that is not arithmetic."""

import pytest

from plans.tools import ToolError
from plans.tools.builtin import calculator
from plans.tools.calculator import MAX_EXPRESSION_CHARS, evaluate


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("79900+12900", 92800),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("6 / 3", 2),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("2 ** 3 ** 2", 512),
        ("-3 ** 2", -9),
        ("+5 - -5", 10),
        ("1.5 * 4", 6),
        ("0.1 + 0.2", 0.1 + 0.2),
        ("  42  ", 42),
        ("1_000 + 1", 1001),
        ("10 ** 100", 10**100),
        ("((((1))))", 1),
    ],
)
def test_arithmetic_gives_the_exact_python_value(expression, expected):
    result = calculator(expression)
    assert result == expected
    assert type(result) is type(expected)


def test_integral_float_results_come_back_as_ints():
    assert calculator("2.5 * 2") == 5
    assert type(calculator("2.5 * 2")) is int
    assert type(calculator("9 / 3")) is int


def test_huge_integral_floats_stay_floats_rather_than_gaining_invented_digits():
    assert type(calculator("1e20 * 1.0")) is float


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "function calls"),
        ("abs(-1)", "function calls"),
        ("x + 1", "names ('x')"),
        ("(1).real", "attribute access"),
        ("[1][0]", "subscripts"),
        ("[1, 2]", "lists"),
        ("1, 2", "tuples"),
        ("{1: 2}", "dicts"),
        ("1 < 2", "comparisons"),
        ("1 and 2", "boolean operators"),
        ("1 if 1 else 2", "conditional expressions"),
        ("lambda: 1", "lambdas"),
        ("[i for i in range(3)]", "comprehensions"),
        ("f'{1}'", "f-strings"),
        ("(y := 1)", "assignments"),
        ("'a' * 3", "strings"),
        ("b'a'", "bytes"),
        ("True + 1", "booleans"),
        ("1j * 2", "complex numbers"),
        ("None", "constants"),
        ("1 << 3", "operator '<<'"),
        ("6 & 3", "operator '&'"),
        ("6 ^ 3", "operator '^'"),
        ("~1", "operator '~'"),
        ("not 1", "operator 'not'"),
    ],
)
def test_anything_but_numbers_and_arithmetic_operators_is_refused_by_name(expression, message):
    with pytest.raises(ToolError, match="not allowed in arithmetic") as caught:
        calculator(expression)
    assert message in str(caught.value)


def test_a_call_is_refused_before_anything_in_it_is_evaluated():
    with pytest.raises(ToolError, match="function calls"):
        calculator("__import__('os').system('true')")


def test_division_by_zero_is_a_tool_error():
    for expression in ("1 / 0", "1 // 0", "1 % 0", "1.5 / 0.0", "0 ** -1"):
        with pytest.raises(ToolError, match=r"^division by zero$"):
            calculator(expression)


def test_a_tower_of_powers_is_refused_without_being_computed():
    with pytest.raises(ToolError, match="exponent 10000000000 is too large"):
        calculator("2**10**10")


def test_exponents_beyond_the_bound_are_refused():
    with pytest.raises(ToolError, match="exponent 101 is too large"):
        calculator("1 ** 101")


def test_a_power_whose_result_would_be_enormous_is_refused():
    with pytest.raises(ToolError, match="result is too large"):
        calculator("99999 ** 99")


def test_results_beyond_the_magnitude_bound_are_refused():
    with pytest.raises(ToolError, match="result is too large"):
        calculator("10**100 * 10**100")
    with pytest.raises(ToolError, match="result is too large"):
        calculator("1e99 * 1e99")


def test_a_literal_too_large_for_a_float_is_refused():
    with pytest.raises(ToolError, match="the number 1e400 is too large"):
        calculator("1e400")


def test_an_integer_literal_beyond_the_bound_is_refused():
    with pytest.raises(ToolError, match="is too large"):
        calculator("1" + "0" * 101)


def test_a_negative_number_to_a_fractional_power_is_refused():
    with pytest.raises(ToolError, match="not a real number"):
        calculator("(-8) ** 0.5")


def test_long_expressions_are_refused():
    with pytest.raises(ToolError, match="too long"):
        calculator("1+" * (MAX_EXPRESSION_CHARS // 2) + "1")


def test_deep_nesting_within_the_length_bound_is_handled():
    assert calculator("-" * 400 + "1") == 1
    nested = "(" * 240 + "1" + ")" * 240
    try:
        assert calculator(nested) == 1
    except ToolError as exc:  # the parser's own nesting limit is fine too
        assert "not an arithmetic expression" in str(exc)


@pytest.mark.parametrize("expression", ["", "   ", "1 +", "(1", "1 2", "79,900 +", "import os"])
def test_malformed_or_empty_expressions_are_tool_errors(expression):
    with pytest.raises(ToolError):
        calculator(expression)


def test_non_text_input_is_a_tool_error():
    with pytest.raises(ToolError, match="must be text"):
        evaluate(12)  # type: ignore[arg-type]
