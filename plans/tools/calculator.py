"""A safe arithmetic evaluator: parses with ``ast`` and walks only numbers and operators."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from plans.tools.errors import ToolError

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 100
# Literals, intermediate values and results beyond this are refused, which bounds the work
# any expression of MAX_EXPRESSION_CHARS can cause.
MAX_MAGNITUDE = 1e100
_MAX_DIGITS = 100
# Floats are exact integers only up to 2**53; beyond that int() would invent digits.
_EXACT_FLOAT_INT = 2**53

type Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_REFUSED_OPERATORS = {
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.Invert: "~",
    ast.Not: "not",
}
_CONSTRUCTS = {
    ast.Name: "names",
    ast.Call: "function calls",
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions",
    ast.Lambda: "lambdas",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Set: "sets",
    ast.Dict: "dicts",
    ast.JoinedStr: "f-strings",
    ast.NamedExpr: "assignments",
    ast.Starred: "starred expressions",
    ast.Slice: "slices",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}
_CONSTANT_KINDS = {bool: "booleans", str: "strings", bytes: "bytes", complex: "complex numbers"}


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic expression; ToolError for anything else or anything too big."""
    if not isinstance(expression, str):
        raise ToolError(f"the expression must be text, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise ToolError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(
            f"the expression is too long ({len(text)} characters; the limit is "
            f"{MAX_EXPRESSION_CHARS})"
        )
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an arithmetic expression: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError):
        raise ToolError("not an arithmetic expression") from None
    _check_nodes(tree, text)
    try:
        value = _evaluate(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_FLOAT_INT:
        return int(value)
    return value


def _check_nodes(tree: ast.Expression, text: str) -> None:
    # Everything is checked before anything is computed; ast.walk goes outermost first, so
    # the message names the construct as written (a call, not the name it calls).
    for node in ast.walk(tree):
        if isinstance(node, ast.Expression | ast.BinOp | ast.UnaryOp):
            continue
        if type(node) in _BINARY or type(node) in _UNARY:
            continue
        if type(node) in _REFUSED_OPERATORS:
            raise ToolError(
                f"not allowed in arithmetic: the operator {_REFUSED_OPERATORS[type(node)]!r}"
            )
        if isinstance(node, ast.Constant):
            _check_constant(node, text)
            continue
        shown = ast.get_source_segment(text, node) or type(node).__name__
        what = _CONSTRUCTS.get(type(node), f"{type(node).__name__} expressions")
        raise ToolError(
            f"not allowed in arithmetic: {what} ({shown!r}); use numbers, + - * / // % ** "
            "and parentheses"
        )


def _check_constant(node: ast.Constant, text: str) -> None:
    value = node.value
    shown = ast.get_source_segment(text, node) or repr(value)
    if type(value) not in (int, float) or not isinstance(value, int | float):
        what = _CONSTANT_KINDS.get(type(value), "constants")
        raise ToolError(f"not allowed in arithmetic: {what} ({shown!r})")
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise ToolError(f"the number {shown} is too large (the limit is 1e{_MAX_DIGITS})")


def _evaluate(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)  # _check_constant refused everything else
        return node.value
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp):
        left = _evaluate(node.left)
        right = _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex):
            raise ToolError(
                "the result is not a real number (a negative number to a fractional power)"
            )
        if (isinstance(result, float) and not math.isfinite(result)) or abs(result) > MAX_MAGNITUDE:
            raise ToolError(f"the result is too large (the limit is 1e{_MAX_DIGITS})")
        return result
    raise AssertionError(f"unchecked node {type(node).__name__}")  # _check_nodes ran first


def _check_power(base: Number, exponent: Number) -> None:
    # Refuse before computing: 10**10**10 would otherwise build a ten-billion-digit integer.
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"the exponent {exponent} is too large (the limit is {MAX_EXPONENT})")
    if abs(base) > 1 and exponent > 0 and math.log10(abs(base)) * exponent > _MAX_DIGITS:
        raise ToolError(f"the result is too large (the limit is 1e{_MAX_DIGITS})")
