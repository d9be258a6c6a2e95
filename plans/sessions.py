"""Whether a stored session still signs its user in: for connections that outlive a request."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
from django.utils.crypto import constant_time_compare


def session_signs_in(session_key: str | None, user: Any) -> bool:
    """Whether the stored session still signs this user in: the check auth.get_user makes.

    Read-only, unlike get_user (it may flush the session or cycle its key): a socket cannot give
    the browser the new session cookie either would need (nor can an open event stream).
    """
    if not session_key:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    backend_path = session.get(BACKEND_SESSION_KEY)
    if session.get(SESSION_KEY) != user._meta.pk.value_to_string(user) or (
        backend_path not in settings.AUTHENTICATION_BACKENDS
    ):
        return False
    current = load_backend(backend_path).get_user(user.pk)  # None once deactivated
    session_hash = session.get(HASH_SESSION_KEY)
    if current is None or not session_hash:
        return False
    return any(
        constant_time_compare(session_hash, valid_hash)
        for valid_hash in [
            current.get_session_auth_hash(),
            *current.get_session_auth_fallback_hash(),
        ]
    )
