"""Webhook endpoints, people's notification preferences, and every delivery with its outcome."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class WebhookEndpoint(models.Model):
    """An operator's receiver: the events it wants, signed with its own secret."""

    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=200, help_text="Signs each delivery (HMAC-SHA256).")
    events = models.JSONField(default=list, help_text="Event types, e.g. approval.requested.")
    active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "plans"
        permissions = [
            ("manage_webhooks", "Can register webhook endpoints and re-send deliveries"),
        ]

    def __str__(self) -> str:
        return self.url


class NotificationPreference(models.Model):
    """Which emails one person gets; people without a row get the defaults."""

    class ApprovalEmails(models.TextChoices):
        EACH_ROUND = "each_round", "At once, one email per round waiting"
        DAILY = "daily", "A daily digest"
        NONE = "none", "None"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    approval_emails = models.CharField(
        max_length=12, choices=ApprovalEmails, default=ApprovalEmails.EACH_ROUND
    )
    run_finished_emails = models.BooleanField(default=True)

    class Meta:
        app_label = "plans"

    def __str__(self) -> str:
        return f"{self.user}: {self.approval_emails}"


class Delivery(models.Model):
    """One notification (a webhook call or an email) and how its attempts went."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook"
        EMAIL = "email"

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"
        SKIPPED = "skipped"  # nothing left to tell by the time it was due (e.g. all decided)

    channel = models.CharField(max_length=10, choices=Channel)
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    recipients = models.JSONField(default=list, blank=True)
    event_id = models.UUIDField(help_text="The id receivers see; a re-send keeps it.")
    event_type = models.CharField(max_length=40)
    # One notification per thing told: e.g. one approvals email per run round, not per step.
    dedupe_key = models.CharField(max_length=120, null=True, blank=True, unique=True)
    run = models.ForeignKey(
        "plans.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    # For a webhook, the JSON body; for an email, its subject and text and HTML parts.
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_latency_ms = models.PositiveIntegerField(null=True, blank=True)
    next_attempt_at = models.DateTimeField()
    # Claimed by a sender until then; another process may take it over after.
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "plans"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due_idx"),
            models.Index(fields=["endpoint", "-created_at"]),
        ]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.channel} {self.event_type}: {self.status}"


class DigestPeriod(models.Model):
    """The latest period whose digest a sweep claimed, one row per digest: each period's digest
    goes out once, from whichever process's conditional UPDATE changes this row first."""

    name = models.CharField(max_length=40, unique=True)
    period_start = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "plans"

    def __str__(self) -> str:
        return f"{self.name}: {self.period_start:%Y-%m-%d %H:%M}"
