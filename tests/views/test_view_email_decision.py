"""The page an e-mail's decision link opens: a GET shows the request and decides nothing, the
POST decides; refusals (used, stale, decided, someone else's, bad) are pages that say so."""

from __future__ import annotations

import pytest
from django.urls import reverse

from plans.models import Approval, DecisionLinkUse
from plans.services.approvals import approval_decide
from plans.services.decision_links import decision_link_token
from tests.reviewing import decider, refund_of_order_total, shown_token, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = refund_of_order_total("<b>damaged</b>")


@pytest.fixture
def waiting(author):
    approval = waiting_approval(author, REFUND, goal="Refund <i>A-1001</i>")
    return Approval.objects.select_related("step").get(pk=approval.pk)


def url(approval, reviewer, choice="approve"):
    token = decision_link_token(approval=approval, reviewer=reviewer, choice=choice)
    return reverse("plans:email_decision", args=[token])


def test_opening_the_link_shows_the_exact_arguments_and_what_fed_them_and_decides_nothing(
    client, waiting, reviewer
):
    client.force_login(reviewer)
    for _ in range(3):  # a mail scanner's prefetch, a preview, the reviewer
        response = client.get(url(waiting, reviewer))
        assert response.status_code == 200
    page = response.content.decode()
    assert "Approve step 2: <code>issue_refund</code>?" in page
    assert "&quot;amount_inr&quot;: 2499" in page or '"amount_inr": 2499' in page
    assert "&lt;b&gt;damaged&lt;/b&gt;" in page and "<b>damaged</b>" not in page
    assert "&lt;i&gt;A-1001&lt;/i&gt;" in page
    assert "<code>order_total</code> returned" in page  # the input that fed the amount
    assert waiting.args_sha256 in page
    assert response["Cache-Control"].startswith("max-age=0")
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"
    assert not DecisionLinkUse.objects.exists()


def test_the_page_shows_the_rule_that_required_the_request_and_who_may_decide_it(
    client, author, reviewer, settings
):
    from django.contrib.auth.models import Group

    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.two_of_finance"]
    reviewer.groups.add(Group.objects.create(name="finance"))
    approval = waiting_approval(author, REFUND, goal="Refund A-1001")
    client.force_login(reviewer)

    page = client.get(url(approval, reviewer)).content.decode()

    assert "<h2>The rule</h2>" in page
    assert 'data-approval-rule="refunds_need_two_from_finance"' in page
    assert f"version {approval.rule_version}" in page
    assert "routed to <b>finance</b>" in page
    assert "0 of 2 approvals" in page
    assert Approval.objects.get(pk=approval.pk).decision == "pending"


def test_the_page_says_when_no_rule_matched(client, waiting, reviewer):
    client.force_login(reviewer)

    page = client.get(url(waiting, reviewer)).content.decode()

    assert "No approval rule matched this call: one reviewer decides" in page


def test_the_post_decides_and_a_second_one_is_refused_as_used(client, waiting, reviewer):
    client.force_login(reviewer)
    link = url(waiting, reviewer)

    response = client.post(link, {"preview": shown_token(waiting)})
    assert response.status_code == 200
    assert "You approved step 2" in response.content.decode()
    approval = Approval.objects.get(pk=waiting.pk)
    assert approval.decision == "approved" and approval.via == "email"

    for again in (client.get(link), client.post(link)):
        assert again.status_code == 410
        assert "This link was already used: you approved this step" in again.content.decode()


def test_a_reject_without_a_reason_shows_the_page_again_with_the_error(client, waiting, reviewer):
    client.force_login(reviewer)
    link = url(waiting, reviewer, "reject")

    refused = client.post(link, {"reason": ""})
    assert refused.status_code == 422
    assert "A reason is required to reject." in refused.content.decode()
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"

    assert client.post(link, {"reason": "wrong order"}).status_code == 200
    assert Approval.objects.get(pk=waiting.pk).reason == "wrong order"


def test_someone_else_signed_in_gets_a_refusal_without_the_arguments(
    client, waiting, reviewer, django_user_model
):
    other = decider(django_user_model, "dave", password="dave-pass-123")
    client.force_login(other)
    link = url(waiting, reviewer)

    for response in (client.get(link), client.post(link)):
        assert response.status_code == 403
        page = response.content.decode()
        assert "This link was sent to another reviewer." in page
        assert "amount_inr" not in page
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"


def test_signed_out_the_link_asks_to_sign_in_and_comes_back(client, waiting, reviewer):
    link = url(waiting, reviewer)
    response = client.get(link)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert client.post(link).status_code == 302
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"

    signed_in = client.post(
        response["Location"], {"username": "bob", "password": "bob-pass-123"}, follow=True
    )
    assert "Approve step 2" in signed_in.content.decode()


def test_stale_decided_and_bad_links_say_so(client, waiting, reviewer, django_user_model):
    client.force_login(reviewer)
    link = url(waiting, reviewer)
    Approval.objects.filter(pk=waiting.pk).update(args_sha256="0" * 64)
    stale = client.get(link)
    assert stale.status_code == 409
    assert "The arguments changed since this e-mail was sent" in stale.content.decode()

    fresh = Approval.objects.get(pk=waiting.pk)
    approval_decide(approval=fresh, reviewer=decider(django_user_model, "dave"), approve=True)
    decided = client.get(url(fresh, reviewer))
    assert decided.status_code == 410
    assert "already approved by dave" in decided.content.decode()

    bad = client.get(reverse("plans:email_decision", args=["not-a-token"]))
    assert bad.status_code == 400
    assert "This link is not one we sent" in bad.content.decode()


def test_the_page_shows_the_preview_and_an_approval_is_bound_to_the_one_it_showed(
    client, waiting, reviewer
):
    client.force_login(reviewer)
    link = url(waiting, reviewer)
    page = client.get(link).content.decode()
    assert "Preview of the effect" in page
    assert "Refund ₹2,499 of ₹2,499" in page
    shown = shown_token(waiting)
    assert f'name="preview" value="{shown}"' in page

    # Another reviewer's look took the preview again since: the target moved on.
    moved = {
        **waiting.preview,
        "target_version": "another-version",
        "summary": "Refund ₹2,499 moved",
    }
    Approval.objects.filter(pk=waiting.pk).update(preview=moved)
    refused = client.post(link, {"preview": shown})
    assert refused.status_code == 409
    page = refused.content.decode()
    assert "Nothing was decided: read the preview" in page
    assert "Refund ₹2,499 moved" in page  # the preview as it is now, to read first
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"
    assert not DecisionLinkUse.objects.exists()  # the link is not spent by a refusal

    again = client.post(link, {"preview": shown_token(Approval.objects.get(pk=waiting.pk))})
    assert again.status_code == 200 and "You approved step 2" in again.content.decode()
    assert Approval.objects.get(pk=waiting.pk).preview == moved


def test_an_approval_posted_without_the_preview_it_was_shown_decides_nothing(
    client, waiting, reviewer
):
    client.force_login(reviewer)

    refused = client.post(url(waiting, reviewer))

    assert refused.status_code == 409
    assert "Refund ₹2,499 of ₹2,499" in refused.content.decode()
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"
