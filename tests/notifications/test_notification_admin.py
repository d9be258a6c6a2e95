"""Operators register endpoints in the admin: the URL is checked, the secret made if left out."""

from __future__ import annotations

import pytest

from plans.notifications.forms import WebhookEndpointForm

pytestmark = pytest.mark.django_db


def form(url: str, **extra: object) -> WebhookEndpointForm:
    return WebhookEndpointForm(
        data={"url": url, "events": ["run.finished"], "active": True, **extra}
    )


def test_an_endpoint_on_a_private_address_is_refused_at_registration(settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = False

    refused = form("http://127.0.0.1:9000/hook")

    assert not refused.is_valid()
    assert "loopback, private or reserved" in refused.errors["url"][0]


def test_an_endpoint_gets_a_generated_secret_when_none_is_given(settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = True

    saved = form("http://127.0.0.1:9000/hook")

    assert saved.is_valid(), saved.errors
    assert len(saved.save().secret) >= 32


def test_only_documented_event_types_may_be_chosen(settings):
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = True

    unknown = WebhookEndpointForm(
        data={"url": "http://127.0.0.1:9000/", "events": ["run.exploded"], "active": True}
    )

    assert not unknown.is_valid() and "events" in unknown.errors
