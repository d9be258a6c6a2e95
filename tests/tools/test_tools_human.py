"""ask_human is a core tool: apart from the demo shop, registered whatever is configured."""

import pytest

from plans.tools import ToolError, get_registry, reset_registry
from plans.tools.human import ASK_HUMAN, ask_human
from plans.tools.registry import tool_modules


def test_ask_human_is_registered_from_its_own_module_before_any_other(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    reset_registry()
    try:
        spec = get_registry()[ASK_HUMAN]
        assert tool_modules()[0] == "plans.tools.human"
    finally:
        reset_registry()

    assert spec.fn.__module__ == "plans.tools.human"
    assert not spec.pure and not spec.destructive


def test_calling_it_directly_says_a_person_answers_it():
    with pytest.raises(ToolError, match="answered by a person in the inbox"):
        ask_human("How much?")
