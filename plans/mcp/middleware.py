"""A web request never waits for an MCP server to start: its registry reads take what is up."""

from __future__ import annotations

import contextlib

from django.http import HttpRequest

from plans.mcp.connection import reads_never_wait
from plans.middleware import Middleware


class RequestsNeverWaitForServers(Middleware):
    """A server still starting (or restarting) is started in the background meanwhile, and the
    MCP servers page says so; its tools join the registry once it is up."""

    def serving(self, request: HttpRequest) -> contextlib.AbstractContextManager[object]:
        return reads_never_wait()
