"""Tools for the hand-off benchmark: a destructive step that does nothing but needs approval."""

from plans.tools import tool


@tool(destructive=True)
def handoff_mark(label: str, idempotency_key: str) -> str:
    """Return the label (destructive only so that it waits for a reviewer)."""
    return label
