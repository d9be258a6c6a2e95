"""The tool layer: the ``@tool`` decorator, the registry and the built-in demo tools.

A tool is a typed function with a docstring, decorated with ``@tool`` in a module listed in
``settings.AGENTSITE_TOOL_MODULES``; see ``plans.tools.builtin`` for examples.
"""

from plans.engine import Preview
from plans.tools.errors import ToolError
from plans.tools.registry import (
    ToolSource,
    ToolSpec,
    add_tool_source,
    get_registry,
    reset_registry,
    tool,
    tool_catalog_for_prompt,
)
from plans.tools.schema import Between

__all__ = [
    "Between",
    "Preview",
    "ToolError",
    "ToolSource",
    "ToolSpec",
    "add_tool_source",
    "get_registry",
    "reset_registry",
    "tool",
    "tool_catalog_for_prompt",
]
