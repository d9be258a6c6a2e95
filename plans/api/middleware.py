"""Errors Django answers itself under /api/ (before or around the API's views) become JSON."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from plans.api.errors import body_too_large_detail

API_PREFIX = "/api/"
CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    500: "server_error",
}


class ApiErrorsAsJson:
    """Outermost middleware: an API client never gets an HTML page or a debug traceback.

    The API's own handlers answer JSON; this covers what Django answers before a view runs or
    after it returns (a bad Host, a POST without its slash in debug, an unknown path).
    """

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
        return as_json(request, cast(HttpResponseBase, self.get_response(request)))

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        response = await cast(Awaitable[HttpResponseBase], self.get_response(request))
        return as_json(request, response)


def as_json(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """The response, or for an API request's non-JSON error the JSON error shape instead."""
    if (
        response.status_code < 400
        or not request.path.startswith(API_PREFIX)
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    status = response.status_code
    if status == 413:
        detail = body_too_large_detail()
    elif status == 404:
        detail = "No such path in the API (its paths end in a slash, as in /api/v1/runs/)."
    else:
        detail = (HTTPStatus(status).phrase if status in HTTPStatus else "Error") + "."
    code = CODES.get(status, "server_error" if status >= 500 else "error")
    replaced = HttpResponse(
        json.dumps({"code": code, "detail": detail}), status=status, content_type="application/json"
    )
    for header, value in response.items():
        # Everything but the body's own headers: the security headers stay, as does Allow.
        if header.lower() not in {"content-type", "content-length"}:
            replaced[header] = value
    return replaced
