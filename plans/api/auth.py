"""Who is calling: a bearer token (no CSRF: it is not a cookie) or the browser's session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.security import SessionAuth as NinjaSessionAuth

from plans.api.errors import TokenInvalid
from plans.api.tokens import token_holds, token_user
from plans.sessions import session_signs_in


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
        if not request.user.is_authenticated:
            # No session to ride on, so nothing for CSRF to protect: the answer is the 401 a
            # request without credentials gets, not a 403 csrf_failed.
            return None
        return super()._get_key(request)


@dataclass(frozen=True)
class Credential:
    """What a request authenticated with, to re-check while a response it opened streams."""

    user: User
    token_id: int | None
    session_key: str | None

    @classmethod
    def of(cls, request: HttpRequest) -> Credential:
        user: User = request.user  # type: ignore[assignment]
        token = getattr(request, "api_token", None)
        if token is not None:
            return cls(user=user, token_id=token.pk, session_key=None)
        return cls(user=user, token_id=None, session_key=request.session.session_key)

    def holds(self) -> bool:
        """Read the token (or the session) again: False once revoked, expired or signed out."""
        if self.token_id is not None:
            return token_holds(self.token_id)
        return session_signs_in(self.session_key, self.user)

    def ended(self) -> tuple[str, str]:
        """The error code and detail for a stream ended because the credential no longer holds."""
        if self.token_id is not None:
            return "token_invalid", "The bearer token is unknown, revoked or expired."
        return "not_authenticated", "The session has ended: sign in again."
