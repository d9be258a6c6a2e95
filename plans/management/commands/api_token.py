"""Create, list and revoke personal API tokens from the command line (as on the settings page)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from plans.api.models import ApiToken
from plans.api.tokens import TokenRefused, roles_grantable, token_create, token_revoke


class Command(BaseCommand):
    help = "Personal API tokens: create USER (prints the token once), list USER, revoke ID."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a token and print it (only now)")
        create.add_argument("username")
        create.add_argument("--name", default="command line")
        create.add_argument(
            "--roles",
            default="",
            help="comma-separated roles (authors, reviewers, operators); default: all the "
            "user holds",
        )
        create.add_argument("--expires-days", type=float, default=None)
        listing = actions.add_parser("list", help="a user's tokens")
        listing.add_argument("username")
        revoke = actions.add_parser("revoke", help="revoke a token at once")
        revoke.add_argument("token_id", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "revoke":
            token = ApiToken.objects.filter(pk=options["token_id"]).first()
            if token is None:
                raise CommandError(f"There is no token {options['token_id']}.")
            token_revoke(token=token)
            self.stdout.write(f"token {token.pk} ({token.prefix}…) revoked")
            return
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"There is no user {options['username']!r}.")
        if action == "list":
            for token in ApiToken.objects.filter(user=user).order_by("-created_at"):
                state = "revoked" if token.revoked_at else "active"
                self.stdout.write(
                    f"{token.pk}\t{token.prefix}…\t{token.name}\t{','.join(token.roles)}\t{state}"
                    f"\tlast used {token.last_used_at or 'never'}"
                )
            return
        roles = [r.strip() for r in options["roles"].split(",") if r.strip()]
        expires = options["expires_days"]
        try:
            _, raw = token_create(
                user=user,
                name=options["name"],
                roles=roles or roles_grantable(user),
                expires_at=timezone.now() + timedelta(days=expires) if expires else None,
            )
        except TokenRefused as refused:
            raise CommandError(str(refused)) from refused
        self.stdout.write(raw)
