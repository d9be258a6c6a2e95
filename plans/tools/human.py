"""ask_human: a person in the loop, a core capability the executor answers itself.

Registered always, whatever AGENTSITE_TOOL_MODULES lists (plans.tools.registry.tool_modules).
The executor answers this tool's steps itself (plans.runtime.steps): it parks the run until a
person answers in the inbox. Not pure, so an answer is never reused by another step.
"""

from __future__ import annotations

from typing import Literal

from plans.tools.errors import ToolError
from plans.tools.registry import tool

ASK_HUMAN = "ask_human"
Audience = Literal["author", "reviewers", "operators"]


@tool(name=ASK_HUMAN)
def ask_human(
    question: str, choices: list[str] | None = None, audience: Audience = "author"
) -> str | int | float:
    """Ask a person (the run's author, or anyone in a role) and wait: the answer, the chosen
    choice or the typed text (a number when it is one), is the step's result. Use it when a
    person must confirm a figure or a choice, e.g. a refund's amount.
    """
    raise ToolError("ask_human is answered by a person in the inbox; it cannot be called directly")
