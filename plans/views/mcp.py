"""Operators' MCP servers page: each server's transport, state, last error and (re)start, and
each tool's gating and time limit. It never waits for a server to start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.decorators import permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from plans.views.params import SignedInRequest

if TYPE_CHECKING:
    from plans.mcp.tools import ListedTool

# The operators' integration pages (webhooks, MCP servers) share one permission.
OPERATE = "plans.manage_webhooks"
# A server's state drawn with the run statuses' colours.
STATE_CLASSES = {
    "running": "succeeded",
    "starting": "running",
    "failed": "failed",
    "not started": "pending",
}


@require_GET
@permission_required(OPERATE, raise_exception=True)
def mcp_servers(request: SignedInRequest) -> HttpResponse:
    servers: list[dict[str, Any]] = []
    if getattr(settings, "AGENTSITE_MCP_SERVERS", None):
        # Why here: the MCP SDK loads only when servers are configured (plans/mcp/__init__.py).
        from plans.mcp.tools import server_listings

        for listing in server_listings():  # a server not up is started in the background
            state = listing.state
            servers.append(
                {
                    "config": listing.config,
                    "state": state,
                    "state_class": STATE_CLASSES.get(state.label, "pending"),
                    "tools": [_tool_row(tool) for tool in sorted(listing.tools, key=_by_name)],
                    "unmatched": (
                        listing.config.unmatched_overrides([t.name for t in listing.tools])
                        if state.label == "running"
                        else []
                    ),
                }
            )
    return render(request, "plans/mcp_servers.html", {"servers": servers})


def _by_name(tool: ListedTool) -> str:
    return tool.name


def _tool_row(tool: ListedTool) -> dict[str, Any]:
    """One tool as the page shows it: its gating as mcp_tools prints it (tools.gating)."""
    spec = tool.spec
    return {
        "name": tool.registry_name,
        "problem": tool.problem if spec is None else "",
        "destructive": spec.destructive if spec else True,
        "gated_by": tool.gated_by,
        # The operator's "tools" setting decided it, over what the server says.
        "overridden": tool.gated_by.startswith(("override ", "pattern ")),
        "timeout_s": spec.timeout_s if spec else None,
        "description": spec.description if spec else "",
    }
