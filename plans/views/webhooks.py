"""Operators' webhooks page: register endpoints, see every delivery's outcome, re-send one."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from plans.notifications.catalog import WEBHOOK_EVENTS
from plans.notifications.deliveries import delivery_resend
from plans.notifications.dispatch import notifier
from plans.notifications.forms import WebhookEndpointForm
from plans.notifications.reads import (
    endpoint_get,
    endpoints_newest_first,
    webhook_deliveries_recent,
    webhook_delivery_get,
)
from plans.views.params import SignedInRequest

MANAGE = "plans.manage_webhooks"
DELIVERIES_SHOWN = 100


def _page(request: SignedInRequest, form: WebhookEndpointForm, status: int = 200) -> HttpResponse:
    context = {
        "endpoints": endpoints_newest_first(),
        "deliveries": webhook_deliveries_recent(DELIVERIES_SHOWN),
        "form": form,
        "event_types": WEBHOOK_EVENTS,
    }
    return render(request, "plans/webhooks.html", context, status=status)


@require_GET
@permission_required(MANAGE, raise_exception=True)
def webhooks(request: SignedInRequest) -> HttpResponse:
    return _page(request, WebhookEndpointForm())


@require_POST
@permission_required(MANAGE, raise_exception=True)
def endpoint_create(request: SignedInRequest) -> HttpResponse:
    form = WebhookEndpointForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=422)
    endpoint = form.save(commit=False)
    endpoint.created_by = request.user
    endpoint.save()
    messages.success(request, f"Endpoint {endpoint.url} registered; its secret: {endpoint.secret}")
    return redirect("plans:webhooks")


@require_POST
@permission_required(MANAGE, raise_exception=True)
def endpoint_toggle(request: SignedInRequest, endpoint_id: int) -> HttpResponse:
    endpoint = endpoint_get(endpoint_id)
    if endpoint is None:
        raise Http404("No such endpoint.")
    endpoint.active = not endpoint.active
    endpoint.save(update_fields=["active"])
    messages.success(request, f"{endpoint.url} {'resumed' if endpoint.active else 'paused'}.")
    return redirect("plans:webhooks")


@require_POST
@permission_required(MANAGE, raise_exception=True)
def delivery_resend_view(request: SignedInRequest, delivery_id: int) -> HttpResponse:
    delivery = webhook_delivery_get(delivery_id)
    if delivery is None:
        raise Http404("No such delivery.")
    delivery_resend(delivery=delivery)
    notifier.wake()
    messages.success(request, f"Delivery {delivery.pk} ({delivery.event_type}) re-sent.")
    return redirect("plans:webhooks")
