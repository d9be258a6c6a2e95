"""The one shape of the project's middleware: it runs in the chain's own mode, sync or async."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


class Middleware:
    """Serves a request within ``serving`` and hands back ``answer``'s response.

    Unlike Django's MiddlewareMixin it never hops to a thread: under ASGI the chain stays async.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        with self.serving(request):
            response = cast(HttpResponseBase, self.get_response(request))
        return self.answer(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        # What serving() sets in a context variable reaches sync views too: asgiref runs them
        # in a copy of the context.
        with self.serving(request):
            response = await cast(Awaitable[HttpResponseBase], self.get_response(request))
        return self.answer(request, response)

    def serving(self, request: HttpRequest) -> contextlib.AbstractContextManager[object]:
        """Held while the rest of the chain serves the request."""
        return contextlib.nullcontext()

    def answer(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        """The response handed back up the chain."""
        return response
