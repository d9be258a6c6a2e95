"""Tools a project might add through settings.AGENTSITE_TOOL_MODULES (used by the tests)."""

from plans.tools import tool


@tool
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count
    """
    return len(text.split())


@tool(name="shout", timeout_s=5)
def make_loud(text: str, times: int = 1) -> str:
    """Upper-case a text and add exclamation marks."""
    return text.upper() + "!" * times
