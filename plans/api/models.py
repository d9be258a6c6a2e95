"""The API's records: personal tokens and the keys that make run creation idempotent."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A personal API token: only its SHA-256 is stored; its roles narrow its owner's rights."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    # The first characters of the token, shown in lists so people can tell tokens apart.
    prefix = models.CharField(max_length=16)
    token_sha256 = models.CharField(max_length=64, unique=True)
    roles = models.JSONField(default=list, help_text="Role names (authors, reviewers, operators).")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "plans"
        indexes = [models.Index(fields=["user", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_usable(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class IdempotencyKey(models.Model):
    """An Idempotency-Key a user sent with POST /runs/, the body it came with, and its run."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    request_sha256 = models.CharField(max_length=64)
    run = models.ForeignKey("plans.Run", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "plans"
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.key} -> run {self.run_id}"
