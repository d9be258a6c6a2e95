"""Your settings: personal API tokens (created, shown once, revoked) and which emails you get."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from plans.api.tokens import (
    TokenRefused,
    roles_grantable,
    token_create,
    token_of,
    token_revoke,
    tokens_of,
)
from plans.notifications.models import NotificationPreference
from plans.notifications.reads import preference_of
from plans.views.params import SignedInRequest


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    roles = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    expires_in_days = forms.IntegerField(
        required=False, min_value=1, max_value=3650, label="Expires in (days)"
    )

    def __init__(self, *args: object, user: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        roles = self.fields["roles"]
        assert isinstance(roles, forms.MultipleChoiceField)
        roles.choices = [(r, r) for r in roles_grantable(user)]  # type: ignore[arg-type]


class PreferenceForm(forms.ModelForm):
    # The account's own address (User.email), kept with the choices of what is sent to it.
    email = forms.EmailField(
        required=False,
        max_length=254,
        label="Your email address",
        help_text="Left empty: no emails at all. Approval emails go to you alone.",
    )
    field_order = ["email", "approval_emails", "run_finished_emails"]

    class Meta:
        model = NotificationPreference
        fields = ["approval_emails", "run_finished_emails"]
        labels = {
            "approval_emails": "Emails when steps or plans wait for your decision",
            "run_finished_emails": "Email me when my runs end",
        }


def _page(
    request: SignedInRequest,
    *,
    token_form: TokenForm | None = None,
    new_token: str = "",
    status: int = 200,
) -> HttpResponse:
    preference = preference_of(request.user)
    context = {
        "tokens": tokens_of(request.user),
        "token_form": token_form or TokenForm(user=request.user),
        "preference_form": PreferenceForm(
            instance=preference, initial={"email": request.user.email}
        ),
        "new_token": new_token,
        "now": timezone.now(),
    }
    return render(request, "plans/settings.html", context, status=status)


@require_GET
def settings_page(request: SignedInRequest) -> HttpResponse:
    return _page(request)


@require_POST
def token_create_view(request: SignedInRequest) -> HttpResponse:
    form = TokenForm(request.POST, user=request.user)
    if not form.is_valid():
        return _page(request, token_form=form, status=422)
    days = form.cleaned_data["expires_in_days"]
    try:
        _, raw = token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            roles=form.cleaned_data["roles"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
    except TokenRefused as refused:
        form.add_error(None, str(refused))
        return _page(request, token_form=form, status=422)
    # Shown on this response only: the page is not cached and the token is never stored.
    response = _page(request, new_token=raw)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
def token_revoke_view(request: SignedInRequest, token_id: int) -> HttpResponse:
    token = token_of(request.user, token_id)
    if token is None:
        raise Http404("No such token.")
    token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("plans:settings")


@require_POST
def preferences_view(request: SignedInRequest) -> HttpResponse:
    preference = preference_of(request.user)
    form = PreferenceForm(request.POST, instance=preference)
    if not form.is_valid():
        errors = "; ".join(
            f"{form[name].label}: {' '.join(str(m) for m in e)}" for name, e in form.errors.items()
        )
        messages.error(request, f"Nothing was saved. {errors}")
        return redirect("plans:settings")
    with transaction.atomic():
        saved = form.save(commit=False)
        saved.user = request.user
        saved.save()
        request.user.email = form.cleaned_data["email"]
        request.user.save(update_fields=["email"])
    messages.success(request, "Email settings saved.")
    return redirect("plans:settings")
