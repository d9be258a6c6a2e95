"""A tool module whose tool name clashes with a built-in (used by the tests)."""

from plans.tools import tool


@tool
def price(item: str) -> int:
    """A second price tool, which the registry must refuse."""
    return 0
