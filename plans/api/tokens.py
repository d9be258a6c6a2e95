"""Personal API tokens: created (shown once), stored hashed, scoped to roles, revoked."""

from __future__ import annotations

import hashlib
import secrets
import types
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from plans.api.models import ApiToken
from plans.roles import ROLE_PERMISSIONS, may_submit_goals

TOKEN_PREFIX = "ags_"  # noqa: S105 - marks our tokens (secret scanners), not a secret
# last_used_at is written at most this often per token: a busy script must not write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenRefused(ValueError):
    """A token that may not be created; the message says why."""


def token_sha256(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def roles_grantable(user: User) -> list[str]:
    """The roles a user may put on a token: those whose every right the user holds."""
    grantable = []
    for role, perms in ROLE_PERMISSIONS.items():
        if role == "authors":
            if may_submit_goals(user):
                grantable.append(role)
        elif all(user.has_perm(perm) for perm in perms):
            grantable.append(role)
    return grantable


def token_create(
    *,
    user: User,
    name: str,
    roles: Iterable[str],
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """A new token for the user; returns the row and the token itself (shown only now)."""
    name, roles = token_check(user=user, name=name, roles=roles, expires_at=expires_at)
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=raw[: len(TOKEN_PREFIX) + 6],
        token_sha256=token_sha256(raw),
        roles=roles,
        expires_at=expires_at,
    )
    return token, raw


def token_check(
    *, user: User, name: str, roles: Iterable[str], expires_at: datetime | None
) -> tuple[str, list[str]]:
    """The cleaned name and roles of a token that may be created; TokenRefused says why not."""
    name = name.strip()
    if not name:
        raise TokenRefused("Give the token a name, so you can tell it apart later.")
    if len(name) > 100:
        raise TokenRefused(f"The name is {len(name)} characters long; the limit is 100.")
    roles = sorted(set(roles))
    if not roles:
        raise TokenRefused("Choose at least one role for the token.")
    unknown = [role for role in roles if role not in ROLE_PERMISSIONS]
    if unknown:
        raise TokenRefused(f"Unknown role(s): {', '.join(unknown)}.")
    wider = [role for role in roles if role not in roles_grantable(user)]
    if wider:
        raise TokenRefused(
            f"A token may not do more than its owner: you do not hold the {', '.join(wider)} role."
        )
    if expires_at is not None and expires_at <= timezone.now():
        raise TokenRefused("The expiry must be in the future.")
    return name, roles


def token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token at once; a revoked token stays listed, marked revoked."""
    with transaction.atomic():
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
    token.refresh_from_db()
    return token


def token_user(raw: str) -> tuple[ApiToken, User] | None:
    """The token and its owner narrowed to its roles; None if unknown, revoked or expired."""
    token = ApiToken.objects.select_related("user").filter(token_sha256=token_sha256(raw)).first()
    if token is None or not token.is_usable or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token, scoped_user(token.user, token.roles)


def token_holds(token_id: int) -> bool:
    """Whether the token still authenticates (not revoked, not expired, its owner active)."""
    token = ApiToken.objects.select_related("user").filter(pk=token_id).first()
    return token is not None and token.is_usable and token.user.is_active


def scoped_user(user: User, roles: Iterable[str]) -> User:
    """The user, holding only the rights of these roles that the user also holds."""
    allowed = {perm for role in roles for perm in ROLE_PERMISSIONS.get(role, [])}
    owner_has_perm = user.has_perm
    submits = "authors" in roles and may_submit_goals(user)

    def has_perm(self: User, perm: str, obj: Any = None) -> bool:
        if perm == "plans.add_goal":
            return submits
        return perm in allowed and owner_has_perm(perm, obj)

    # An instance attribute: services that ask user.has_perm(...) see the token's rights.
    user.has_perm = types.MethodType(has_perm, user)  # type: ignore[method-assign]
    user.api_roles = frozenset(roles)  # type: ignore[attr-defined]
    return user


def tokens_of(user: User) -> QuerySet[ApiToken]:
    """The user's tokens, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created_at")


def token_of(user: User, token_id: int) -> ApiToken | None:
    """The user's token of that id (another's is not found)."""
    return ApiToken.objects.filter(pk=token_id, user=user).first()
