"""Tools from Model Context Protocol servers, through the official ``mcp`` SDK.

Servers are configured in settings.AGENTSITE_MCP_SERVERS (see ``plans.mcp.config``); their
tools join the registry as ``<server>.<tool>``. The SDK is imported only when a server is
configured, so a site without MCP servers pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from plans.tools import ToolSpec


def mcp_servers_start() -> None:
    """Start the configured servers in the background, at the start of a process that serves
    pages or runs steps; returns at once (a no-op without servers)."""
    if not getattr(settings, "AGENTSITE_MCP_SERVERS", None):
        return
    from plans.mcp.tools import servers_start  # why here: as in McpToolSource.specs()

    servers_start()


class McpToolSource:
    """The configured MCP servers as a source of registry tools (plans.tools.add_tool_source)."""

    def specs(self) -> Mapping[str, ToolSpec]:
        if not getattr(settings, "AGENTSITE_MCP_SERVERS", None):
            return {}
        # Why here: the MCP SDK loads only when servers are configured.
        from plans.mcp.tools import mcp_tool_specs

        return mcp_tool_specs()

    def refresh(self, names: Collection[str], *, since: float) -> None:
        if not getattr(settings, "AGENTSITE_MCP_SERVERS", None):
            return
        from plans.mcp.tools import refresh_servers_of  # why: as in specs()

        refresh_servers_of(names, since=since)
