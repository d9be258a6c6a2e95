"""Errors Django answers itself under /api/ (before or around the API's views) become JSON."""

from __future__ import annotations

import json
from http import HTTPStatus

from django.http import HttpRequest, HttpResponse, HttpResponseBase

from plans.api.errors import body_too_large_detail
from plans.middleware import Middleware

API_PREFIX = "/api/"
CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    500: "server_error",
}


class ApiErrorsAsJson(Middleware):
    """Outermost middleware: an API client never gets an HTML page or a debug traceback.

    The API's own handlers answer JSON; this covers what Django answers before a view runs or
    after it returns (a bad Host, a POST without its slash in debug, an unknown path).
    """

    def answer(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
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
