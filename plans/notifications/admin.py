"""Operators register webhook endpoints and watch (and re-send) deliveries in the admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from plans.notifications.deliveries import delivery_resend
from plans.notifications.dispatch import notifier
from plans.notifications.forms import WebhookEndpointForm
from plans.notifications.models import Delivery, NotificationPreference, WebhookEndpoint


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ["url", "active", "event_list", "created_at"]
    list_filter = ["active"]

    @admin.display(description="events")
    def event_list(self, endpoint: WebhookEndpoint) -> str:
        return ", ".join(endpoint.events)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "channel",
        "event_type",
        "endpoint",
        "run",
        "status",
        "attempts",
        "last_status_code",
        "last_latency_ms",
        "last_error",
        "created_at",
    ]
    list_filter = ["status", "channel", "event_type"]
    list_select_related = ["endpoint", "run"]
    actions = ["resend"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Re-send the selected deliveries")
    def resend(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        for delivery in queryset:
            delivery_resend(delivery=delivery)
        notifier.wake()
        messages.success(request, f"Re-sending {queryset.count()} deliveries.")


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", "approval_emails", "run_finished_emails"]
