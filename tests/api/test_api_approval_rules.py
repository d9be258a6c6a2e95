"""The API's approvals under approval rules: each carries its rule, its n-of-m progress, its
groups and whether the caller may decide it; deciding counts towards n like the inbox."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from plans.api.tokens import token_create
from plans.roles import roles_ensure
from tests.reviewing import refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def demo_rules(settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]


def refund(author, order_id, amount):
    return waiting_approval(author, refund_plan(order_id, amount))


def reviewer_token(user):
    user.groups.add(roles_ensure()["reviewers"])
    _, raw = token_create(user=user, name="t", roles=["reviewers"])
    return {"Authorization": f"Bearer {raw}"}


def test_a_two_person_request_carries_its_rule_and_progress(client, author, reviewer):
    approval = refund(author, "A-1002", 60000)
    headers = reviewer_token(reviewer)

    listed = client.get("/api/v1/approvals/", headers=headers).json()

    (shown,) = listed
    assert shown["rule"] == {
        "name": "large_refund_needs_two_reviewers",
        "version": approval.rule_version,
        "outcome": "require",
        "error": "",
    }
    assert shown["progress"] == {"needed": 2, "counted": 0, "approved_by": []}
    assert shown["may_decide"] is True and shown["groups"] == []

    decided = client.post(
        "/api/v1/approvals/decide/",
        {
            "decision": "approve",
            "approvals": [{"id": shown["id"], "args_sha256": shown["args_sha256"]}],
        },
        content_type="application/json",
        headers=headers,
    ).json()["decided"][0]

    assert decided["decision"] == "pending"
    assert decided["progress"] == {"needed": 2, "counted": 1, "approved_by": ["bob"]}
    again = client.get("/api/v1/approvals/", headers=headers).json()[0]
    assert again["progress"]["counted"] == 1


def test_a_routed_request_says_the_caller_may_not_decide_it_and_refuses_with_403(
    client, author, reviewer
):
    refund(author, "A-1004", 500)
    headers = reviewer_token(reviewer)

    (shown,) = client.get("/api/v1/approvals/", headers=headers).json()
    assert shown["groups"] == ["finance"] and shown["may_decide"] is False

    refused = client.post(
        "/api/v1/approvals/decide/",
        {
            "decision": "approve",
            "approvals": [{"id": shown["id"], "args_sha256": shown["args_sha256"]}],
        },
        content_type="application/json",
        headers=headers,
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "not_in_group"

    reviewer.groups.add(Group.objects.get_or_create(name="finance")[0])
    (shown,) = client.get("/api/v1/approvals/", headers=headers).json()
    assert shown["may_decide"] is True


def test_a_claim_is_made_and_shown_through_the_api(client, author, reviewer, django_user_model):
    approval = refund(author, "A-1001", 2000)
    headers = reviewer_token(reviewer)

    claimed = client.post(
        f"/api/v1/approvals/{approval.pk}/claim/",
        {},
        content_type="application/json",
        headers=headers,
    )

    assert claimed.status_code == 200, claimed.content
    assert claimed.json()["by"] == "bob"
    (shown,) = client.get("/api/v1/approvals/", headers=headers).json()
    assert shown["claim"]["by"] == "bob" and shown["deadline"]
    other = reviewer_token(django_user_model.objects.create_user("erin"))
    refused = client.post(
        f"/api/v1/approvals/{approval.pk}/claim/",
        {},
        content_type="application/json",
        headers=other,
    )
    assert refused.status_code == 409 and refused.json()["code"] == "claimed"
    taken = client.post(
        f"/api/v1/approvals/{approval.pk}/claim/",
        {"take_over": True},
        content_type="application/json",
        headers=other,
    )
    assert taken.status_code == 200 and taken.json()["by"] == "erin"
