"""The form that registers a webhook endpoint (the operators' page and the admin share it)."""

from __future__ import annotations

import secrets

from django import forms

from plans.notifications.catalog import WEBHOOK_EVENTS
from plans.notifications.http import UrlRefused, url_check
from plans.notifications.models import WebhookEndpoint


class WebhookEndpointForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=[(name, f"{name}: {about}") for name, about in WEBHOOK_EVENTS.items()],
        widget=forms.CheckboxSelectMultiple,
    )
    secret = forms.CharField(
        required=False,
        help_text="Signs each delivery (HMAC-SHA256 of timestamp.body). Left empty: generated.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["url", "events", "secret", "active", "description"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            url_check(url)
        except UrlRefused as refused:
            raise forms.ValidationError(str(refused)) from refused
        return url

    def clean_secret(self) -> str:
        return self.cleaned_data["secret"] or secrets.token_urlsafe(32)
