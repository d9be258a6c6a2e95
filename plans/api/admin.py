"""API tokens in the admin: created (the token shown once) and revoked, never edited."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest

from plans.api.models import ApiToken
from plans.api.tokens import TokenRefused, token_check, token_create, token_revoke
from plans.roles import ROLE_PERMISSIONS


class ApiTokenForm(forms.ModelForm):
    user = forms.ModelChoiceField(queryset=get_user_model().objects.order_by("username"))
    roles = forms.MultipleChoiceField(
        choices=[(role, role) for role in ROLE_PERMISSIONS], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = ApiToken
        fields = ["user", "name", "roles", "expires_at"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "user" in data and "roles" in data:
            try:
                token_check(
                    user=data["user"],
                    name=data.get("name", ""),
                    roles=data["roles"],
                    expires_at=data.get("expires_at"),
                )
            except TokenRefused as refused:
                raise forms.ValidationError(str(refused)) from refused
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ["name", "user", "prefix", "roles", "created_at", "last_used_at", "expires_at"]
    list_filter = ["revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        token, raw = token_create(
            user=form.cleaned_data["user"],
            name=form.cleaned_data["name"],
            roles=form.cleaned_data["roles"],
            expires_at=form.cleaned_data.get("expires_at"),
        )
        obj.pk = token.pk
        messages.warning(request, f"The new token (shown only now): {raw}")

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token_revoke(token=token)
        messages.success(request, f"Revoked {queryset.count()} tokens.")
