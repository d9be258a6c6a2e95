"""The settings page: tokens created (shown once), listed, revoked; email preferences saved."""

from __future__ import annotations

import pytest

from plans.api.models import ApiToken
from plans.notifications.models import NotificationPreference
from plans.roles import roles_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, author):
    author.groups.add(roles_ensure()["authors"])
    client.force_login(author)
    return author


def test_a_new_token_is_shown_once_and_then_only_its_prefix(client, signed_in):
    created = client.post("/settings/tokens/", {"name": "ci", "roles": ["authors"]})

    assert created.status_code == 200 and created["Cache-Control"] == "no-store"
    raw = created.context["new_token"]
    assert raw in created.content.decode()
    token = ApiToken.objects.get(user=signed_in)
    assert token.roles == ["authors"]
    later = client.get("/settings/").content.decode()
    assert raw not in later and token.prefix in later
    assert (
        client.get("/api/v1/runs/", headers={"Authorization": f"Bearer {raw}"}).status_code == 200
    )


def test_a_role_the_user_does_not_hold_cannot_be_put_on_a_token(client, signed_in):
    refused = client.post("/settings/tokens/", {"name": "wide", "roles": ["reviewers"]})

    assert refused.status_code == 422
    assert not ApiToken.objects.exists()


def test_a_revoked_token_stops_working_at_once(client, signed_in):
    raw = client.post("/settings/tokens/", {"name": "ci", "roles": ["authors"]}).context[
        "new_token"
    ]
    token = ApiToken.objects.get()

    client.post(f"/settings/tokens/{token.pk}/revoke/")

    assert (
        client.get("/api/v1/runs/", headers={"Authorization": f"Bearer {raw}"}).status_code == 401
    )
    assert "revoked" in client.get("/settings/").content.decode()


def test_someone_elses_token_cannot_be_revoked(client, signed_in, other_author):
    from plans.api.tokens import token_create

    other_author.groups.add(roles_ensure()["authors"])
    token, _ = token_create(user=other_author, name="theirs", roles=["authors"])

    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_email_preferences_are_saved(client, signed_in):
    client.post("/settings/notifications/", {"approval_emails": "daily", "run_finished_emails": ""})

    preference = NotificationPreference.objects.get(user=signed_in)
    assert preference.approval_emails == "daily" and preference.run_finished_emails is False


def test_the_email_address_is_set_with_the_preferences_and_a_bad_one_saves_nothing(
    client, signed_in
):
    page = client.get("/settings/").content.decode()
    assert 'name="email"' in page

    client.post(
        "/settings/notifications/",
        {
            "email": "alice@example.com",
            "approval_emails": "each_round",
            "run_finished_emails": "on",
        },
    )
    signed_in.refresh_from_db()
    assert signed_in.email == "alice@example.com"
    assert 'value="alice@example.com"' in client.get("/settings/").content.decode()

    refused = client.post(
        "/settings/notifications/",
        {"email": "not an address", "approval_emails": "none", "run_finished_emails": ""},
        follow=True,
    )
    assert "Nothing was saved. Your email address: Enter a valid email address." in (
        refused.content.decode()
    )
    signed_in.refresh_from_db()
    assert signed_in.email == "alice@example.com"
    assert NotificationPreference.objects.get(user=signed_in).approval_emails == "each_round"
