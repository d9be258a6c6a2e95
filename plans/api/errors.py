"""Every API error as JSON: a stable code a program can test and a detail a person can read."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError

from plans.api.schemas import PreviewOut
from plans.services.approvals import PreviewUnseen, StaleArgs
from plans.services.refusals import Refused

logger = logging.getLogger("django.request")


class CurrentArgsOut(Schema):
    id: int
    tool: str
    args: dict[str, Any]
    args_sha256: str


class UnseenPreviewOut(Schema):
    id: int
    tool: str
    args: dict[str, Any] = Field(..., description="The arguments it is the preview of.")
    edited: bool = Field(..., description="True: of your edited arguments.")
    preview: PreviewOut
    preview_token: str = Field(..., description="Send it back with the decision.")


class ErrorOut(Schema):
    code: str
    detail: str
    problems: list[str] | None = None
    current: list[CurrentArgsOut] | None = Field(
        None,
        description="With 409 stale_hash: each approval's arguments as they are now, with their "
        "hash. Show them to the reviewer before deciding again.",
    )
    previews: list[UnseenPreviewOut] | None = Field(
        None,
        description="With 409 preview_unseen: the preview of each edit (or approval) the call "
        "would be held to, taken just now. Show it, then send the same decision again with its "
        "preview_token.",
    )


class ApiError(Exception):
    """An error response: status, code, detail, and optional problems (e.g. a plan's)."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        problems: list[str] | None = None,
        current: list[dict[str, Any]] | None = None,
        previews: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail
        self.problems, self.current, self.headers = problems, current, headers or {}
        self.previews = previews


class TokenInvalid(AuthenticationError):
    """A bearer token was sent but is unknown, revoked or expired (no fallback to the session)."""


# A service's refusal as the API answers it, by the refusal's code: the status, the API's code,
# and, for a few, a detail in the API's own words (it names the token role needed). A code not
# listed is a 409 decision_refused: the request was sound, the moment is not.
REFUSALS: dict[str, tuple[int, str, str | None]] = {
    "not_a_reviewer": (403, "not_a_reviewer", "Only reviewers may decide (token role: reviewers)."),
    "not_an_author": (
        403,
        "not_an_author",
        "Only authors may hand the agent goals (token role: authors).",
    ),
    "four_eyes": (403, "four_eyes", None),
    "not_in_group": (403, "not_in_group", None),
    "claimed": (409, "claimed", None),
    "not_found": (404, "not_found", None),
    "stale_hash": (409, "stale_hash", None),
    "preview_unseen": (409, "preview_unseen", None),
    "stale_plan": (409, "stale_plan", None),
    "reason_required": (422, "reason_required", None),
    "listed_twice": (422, "listed_twice", None),
    "edit_with_reject": (422, "invalid_request", None),
    "text_invalid": (422, "decision_invalid", None),
    "not_in_audience": (403, "not_in_audience", None),
    "already_answered": (409, "already_answered", None),
    "question_expired": (409, "question_expired", None),
    "not_a_choice": (422, "not_a_choice", None),
    "answer_invalid": (422, "answer_invalid", None),
    "goal_invalid": (422, "goal_rejected", None),
}
REFUSED = (409, "decision_refused", None)


def refusal_error(refused: Refused) -> ApiError:
    status, code, detail = REFUSALS.get(refused.code, REFUSED)
    current = None
    if isinstance(refused, StaleArgs):
        # The arguments with their hash, never the hash alone: a client cannot re-approve
        # without having been handed what it approves.
        current = [
            {"id": a.pk, "tool": a.tool, "args": a.args, "args_sha256": a.args_sha256}
            for a in refused.approvals
        ]
    previews = None
    if isinstance(refused, PreviewUnseen):
        # Why here, not at the top: plans.api.approvals imports this module.
        from plans.api.approvals import preview_out

        # Likewise the preview with its token, never the token alone.
        previews = [
            {
                "id": shown.approval.pk,
                "tool": shown.approval.tool,
                "args": shown.args,
                "edited": shown.edited,
                "preview": preview_out(shown.preview),
                "preview_token": shown.token,
            }
            for shown in refused.previews
        ]
    return ApiError(status, code, detail or str(refused), current=current, previews=previews)


def not_found(what: str = "run") -> ApiError:
    # A run someone may not see is reported exactly like one that does not exist.
    return ApiError(404, "not_found", f"No such {what}.")


def error_response(
    api: NinjaAPI,
    request: HttpRequest,
    status: int,
    code: str,
    detail: str,
    *,
    problems: list[str] | None = None,
    current: list[dict[str, Any]] | None = None,
    previews: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    body: dict[str, Any] = {"code": code, "detail": detail}
    if problems is not None:
        body["problems"] = problems
    if current is not None:
        body["current"] = current
    if previews is not None:
        body["previews"] = previews
    response = api.create_response(request, body, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def body_too_large_detail() -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return f"The request body is over the limit of {limit} bytes (AGENTSITE_MAX_BODY_BYTES)."


def install_error_handlers(api: NinjaAPI) -> None:
    """Map every exception the API raises (or Ninja raises for it) to the JSON error shape."""

    @api.exception_handler(ApiError)
    def api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
        return error_response(
            api,
            request,
            exc.status,
            exc.code,
            exc.detail,
            problems=exc.problems,
            current=exc.current,
            previews=exc.previews,
            headers=exc.headers,
        )

    @api.exception_handler(Refused)
    def refused(request: HttpRequest, exc: Refused) -> HttpResponse:
        return api_error(request, refusal_error(exc))

    @api.exception_handler(TokenInvalid)
    def token_invalid(request: HttpRequest, exc: TokenInvalid) -> HttpResponse:
        detail = "The bearer token is unknown, revoked or expired."
        return error_response(
            api, request, 401, "token_invalid", detail, headers={"WWW-Authenticate": "Bearer"}
        )

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        detail = "Send a personal API token as 'Authorization: Bearer <token>', or sign in."
        return error_response(
            api, request, 401, "not_authenticated", detail, headers={"WWW-Authenticate": "Bearer"}
        )

    @api.exception_handler(ValidationError)
    def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        problems = [_problem_text(error) for error in exc.errors]
        return error_response(
            api,
            request,
            422,
            "invalid_request",
            "The request is not valid: " + "; ".join(problems),
            problems=problems,
        )

    @api.exception_handler(Http404)
    def missing(request: HttpRequest, exc: Http404) -> HttpResponse:
        return error_response(api, request, 404, "not_found", str(exc) or "Not found.")

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        code = {400: "bad_request", 403: "csrf_failed", 405: "method_not_allowed"}.get(
            exc.status_code, "error"
        )
        return error_response(api, request, exc.status_code, code, str(exc))

    @api.exception_handler(RequestDataTooBig)
    def body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        return error_response(api, request, 413, "body_too_large", body_too_large_detail())

    @api.exception_handler(SuspiciousOperation)
    def suspicious(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
        return error_response(api, request, 400, "bad_request", "The request is malformed.")

    @api.exception_handler(Exception)
    def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
        # Ninja's default answers a text/plain traceback in debug: a client never sees one.
        logger.error(
            "Internal Server Error: %s",
            request.path,
            exc_info=exc,
            extra={"status_code": 500, "request": request},
        )
        detail = "The server failed to answer this request; it has been logged."
        return error_response(api, request, 500, "server_error", detail)


def _problem_text(error: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()) if part not in ("body", "payload"))
    message = str(error.get("msg", "invalid"))
    return f"{where}: {message}" if where else message
