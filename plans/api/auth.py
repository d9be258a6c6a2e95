"""Who is calling: a bearer token (no CSRF: it is not a cookie) or the browser's session."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.security import SessionAuth as NinjaSessionAuth

from plans.api.errors import TokenInvalid
from plans.api.tokens import token_user


class TokenAuth(HttpBearer):
    """Authorization: Bearer <token>; the request then acts with the token's scoped rights."""

    def authenticate(self, request: HttpRequest, token: str) -> User:
        found = token_user(token.strip())
        if found is None:
            # Not None: a wrong token must never fall back to a session sent alongside it.
            raise TokenInvalid()
        api_token, user = found
        request.user = user
        request.api_token = api_token  # type: ignore[attr-defined]
        return user


class SessionAuth(NinjaSessionAuth):
    """The browser's signed-in session; unsafe methods need the CSRF token, as the pages do."""

    def _get_key(self, request: HttpRequest) -> Any:
        if request.headers.get("Authorization"):
            return None  # a request bringing credentials of its own is never a session request
        return super()._get_key(request)
