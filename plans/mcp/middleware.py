"""A web request never waits for an MCP server to start: its registry reads take what is up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from plans.mcp.connection import reads_never_wait


class RequestsNeverWaitForServers:
    """A server still starting (or restarting) is started in the background meanwhile, and the
    MCP servers page says so; its tools join the registry once it is up."""

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        with reads_never_wait():
            return cast(HttpResponseBase, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        # The flag is a context variable: sync views run by asgiref get a copy of the context.
        with reads_never_wait():
            return await cast(Awaitable[HttpResponseBase], self.get_response(request))
