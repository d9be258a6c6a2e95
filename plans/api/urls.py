"""The API under /api/v1/: one NinjaAPI, its routers, its error shape, its schema and docs."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver
from ninja import NinjaAPI

from plans.api import approvals, questions, runs, webhooks
from plans.api.auth import SessionAuth, TokenAuth
from plans.api.errors import install_error_handlers

API_DESCRIPTION = """\
Hand the agent goals, follow runs, decide approvals and answer questions from your own systems.

Authenticate with a personal API token (`Authorization: Bearer <token>`, created on
/settings/tokens/) or, from the browser, with your session (unsafe methods then need the CSRF
token). A token acts with its roles' rights, never more than its owner's.

Errors are JSON: `{"code": "...", "detail": "..."}` with a stable code, never a traceback. A run
you may not see is a 404, exactly like one that does not exist. A request body over
AGENTSITE_MAX_BODY_BYTES (1 MiB by default) is a 413 `body_too_large`.
"""

api = NinjaAPI(
    title="agentsite API",
    version="1",
    description=API_DESCRIPTION,
    urls_namespace="api",
    auth=[TokenAuth(), SessionAuth()],
    openapi_url="/schema/",
    docs_url="/docs/",
)
install_error_handlers(api)
api.add_router("", runs.router)
api.add_router("", approvals.router)
api.add_router("", questions.router)
api.add_router("", webhooks.router)


def _public(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    """The API authenticates each request itself: the site's login redirect does not apply."""
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = login_not_required(pattern.callback)
        else:
            _public(pattern.url_patterns)
    return patterns


urlpatterns = _public(api.urls[0])
