"""Reading the notifications' records for their pages: preferences, endpoints, deliveries."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet

from plans.notifications.models import Delivery, NotificationPreference, WebhookEndpoint


def preference_of(user: User) -> NotificationPreference | None:
    """The user's email settings, None while they keep the defaults."""
    return NotificationPreference.objects.filter(user=user).first()


def endpoints_newest_first() -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.order_by("-created_at")


def endpoint_get(endpoint_id: int) -> WebhookEndpoint | None:
    return WebhookEndpoint.objects.filter(pk=endpoint_id).first()


def webhook_deliveries_recent(limit: int) -> QuerySet[Delivery]:
    """The latest webhook deliveries, their endpoints joined."""
    deliveries = Delivery.objects.filter(channel=Delivery.Channel.WEBHOOK)
    return deliveries.select_related("endpoint").order_by("-created_at", "-pk")[:limit]


def webhook_delivery_get(delivery_id: int) -> Delivery | None:
    return Delivery.objects.filter(pk=delivery_id, channel=Delivery.Channel.WEBHOOK).first()
