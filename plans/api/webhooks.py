"""/api/v1/webhooks/: operators manage webhook endpoints and re-send deliveries, by the same
rules as the /webhooks/ page (its form: URL checks, the event catalog, a generated secret)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from plans.api.errors import ApiError, ErrorOut, not_found
from plans.api.schemas import (
    DeliveryOut,
    WebhookEndpointCreatedOut,
    WebhookEndpointIn,
    WebhookEndpointOut,
    WebhookEndpointPatch,
)
from plans.notifications.deliveries import delivery_resend
from plans.notifications.dispatch import notifier
from plans.notifications.forms import WebhookEndpointForm
from plans.notifications.models import Delivery, WebhookEndpoint
from plans.notifications.reads import endpoint_get, endpoints_newest_first, webhook_delivery_get

router = Router(tags=["webhooks"])

MANAGE = "plans.manage_webhooks"
DELIVERIES_LISTED = 50
ERRORS: dict[int, type[ErrorOut]] = {401: ErrorOut, 403: ErrorOut, 413: ErrorOut, 422: ErrorOut}
# An operation with a body also answers 400 bad_request to one that is not JSON.
BODY_ERRORS: dict[int, type[ErrorOut]] = {400: ErrorOut, **ERRORS}


def _operator_check(request: HttpRequest) -> None:
    if not request.user.has_perm(MANAGE):
        raise ApiError(
            403,
            "not_an_operator",
            "Only operators may manage webhooks (token role: operators).",
        )


def _endpoint(request: HttpRequest, endpoint_id: int) -> WebhookEndpoint:
    _operator_check(request)
    endpoint = endpoint_get(endpoint_id)
    if endpoint is None:
        raise not_found("webhook endpoint")
    return endpoint


def endpoint_out(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint as listed: never its secret, which is shown once when set."""
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "events": endpoint.events,
        "active": endpoint.active,
        "description": endpoint.description,
        "created_by": endpoint.created_by.get_username() if endpoint.created_by else None,
        "created_at": endpoint.created_at,
    }


def _saved(form: WebhookEndpointForm, *, created_by: Any = None) -> WebhookEndpoint:
    if not form.is_valid():
        problems = [
            f"{name}: {' '.join(str(message) for message in messages)}"
            for name, messages in form.errors.items()
        ]
        # Its own code: whether a URL resolves to public addresses is beyond any JSON schema.
        raise ApiError(
            422,
            "endpoint_invalid",
            "The endpoint is not valid: " + "; ".join(problems),
            problems=problems,
        )
    endpoint = form.save(commit=False)
    if created_by is not None:
        endpoint.created_by = created_by
    endpoint.save()
    return endpoint


@router.get(
    "/webhooks/endpoints/",
    response={200: list[WebhookEndpointOut], **ERRORS},
    summary="Webhook endpoints, newest first (their secrets are never listed)",
)
def list_endpoints(request: HttpRequest) -> list[dict[str, Any]]:
    _operator_check(request)
    return [endpoint_out(e) for e in endpoints_newest_first().select_related("created_by")]


@router.post(
    "/webhooks/endpoints/",
    response={201: WebhookEndpointCreatedOut, **BODY_ERRORS},
    summary="Register an endpoint; its secret (given or generated) is in this answer only",
    description="The URL must be http(s), without credentials, and resolve to public addresses "
    "(unless AGENTSITE_WEBHOOK_ALLOW_PRIVATE); events are the documented types.",
)
def create_endpoint(request: HttpRequest, body: WebhookEndpointIn) -> Status[dict[str, Any]]:
    _operator_check(request)
    endpoint = _saved(WebhookEndpointForm(body.model_dump()), created_by=request.user)
    return Status(201, {**endpoint_out(endpoint), "secret": endpoint.secret})


@router.get(
    "/webhooks/endpoints/{int:endpoint_id}/",
    response={200: WebhookEndpointOut, 404: ErrorOut, **ERRORS},
    summary="One endpoint",
)
def get_endpoint(request: HttpRequest, endpoint_id: int) -> dict[str, Any]:
    return endpoint_out(_endpoint(request, endpoint_id))


@router.patch(
    "/webhooks/endpoints/{int:endpoint_id}/",
    response={200: WebhookEndpointCreatedOut, 404: ErrorOut, **BODY_ERRORS},
    summary="Change an endpoint (pause it with active=false); a new secret is shown once",
)
def update_endpoint(
    request: HttpRequest, endpoint_id: int, body: WebhookEndpointPatch
) -> dict[str, Any]:
    endpoint = _endpoint(request, endpoint_id)
    changes = body.model_dump(exclude_unset=True)
    data = {
        "url": endpoint.url,
        "events": endpoint.events,
        "secret": endpoint.secret,
        "active": endpoint.active,
        "description": endpoint.description,
    }
    data.update({name: value for name, value in changes.items() if value is not None})
    saved = _saved(WebhookEndpointForm(data, instance=endpoint))
    return {**endpoint_out(saved), "secret": saved.secret if "secret" in changes else None}


@router.delete(
    "/webhooks/endpoints/{int:endpoint_id}/",
    response={204: None, 404: ErrorOut, **ERRORS},
    summary="Delete an endpoint and its deliveries' records",
)
def delete_endpoint(request: HttpRequest, endpoint_id: int) -> Status[None]:
    _endpoint(request, endpoint_id).delete()
    return Status(204, None)


@router.get(
    "/webhooks/endpoints/{int:endpoint_id}/deliveries/",
    response={200: list[DeliveryOut], 404: ErrorOut, **ERRORS},
    summary=f"An endpoint's latest {DELIVERIES_LISTED} deliveries and how each went",
)
def list_deliveries(request: HttpRequest, endpoint_id: int) -> list[dict[str, Any]]:
    endpoint = _endpoint(request, endpoint_id)
    latest = endpoint.deliveries.order_by("-created_at", "-pk")[:DELIVERIES_LISTED]
    return [delivery_out(d) for d in latest]


@router.post(
    "/webhooks/deliveries/{int:delivery_id}/resend/",
    response={201: DeliveryOut, 404: ErrorOut, **ERRORS},
    summary="Send a delivery again (same event id), as a new delivery",
)
def resend_delivery(request: HttpRequest, delivery_id: int) -> Status[dict[str, Any]]:
    _operator_check(request)
    delivery = webhook_delivery_get(delivery_id)
    if delivery is None:
        raise not_found("delivery")
    again = delivery_resend(delivery=delivery)
    notifier.wake()
    return Status(201, delivery_out(again))


def delivery_out(delivery: Delivery) -> dict[str, Any]:
    return {
        "id": delivery.pk,
        "endpoint": delivery.endpoint_id,
        "event_id": str(delivery.event_id),
        "event_type": delivery.event_type,
        "run": delivery.run_id,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "last_latency_ms": delivery.last_latency_ms,
        "created_at": delivery.created_at,
        "finished_at": delivery.finished_at,
    }
