"""/policies/: the rules in force, read-only, each with its match counts."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from plans.demo import approval_rules as demo
from tests.reviewing import refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)


def refund(author, order_id, amount):
    waiting_approval(author, refund_plan(order_id, amount))


def test_it_lists_the_rules_in_order_with_their_match_counts(client, author, reviewer, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    Group.objects.create(name="finance")
    refund(author, "A-1001", 500)
    refund(author, "A-1001", 300)
    refund(author, "A-1004", 300)
    client.force_login(reviewer)

    page = client.get(reverse("plans:policies")).content.decode()

    names = ["huge_refund", "small_refund_on_delivered_order", "large_refund_needs_two_reviewers"]
    positions = [page.index(f'id="rule-{name}"') for name in names]
    assert positions == sorted(positions)
    assert f"version {demo.small_refund_on_delivered_order.version}" in page
    small = page[page.index('id="rule-small_refund_on_delivered_order"') :]
    assert '<td class="match-count"><b>2</b><br><span class="muted small">2 approved' in small
    routed = page[page.index('id="rule-refund_before_delivery_goes_to_finance"') :]
    assert '<b>1</b><br><span class="muted small">1 pending' in routed
    assert "escalate to finance after 14400 s" in page
    assert "<form" not in page.split("<main", 1)[1].split("</main>")[0]  # read-only


def test_rules_that_cannot_be_loaded_are_named_on_the_page(client, reviewer, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.nope"]
    client.force_login(reviewer)

    page = client.get(reverse("plans:policies")).content.decode()

    assert "The rules could not be loaded" in page and "tests.rule_modules.nope" in page


def test_a_rule_naming_a_missing_group_is_flagged(client, reviewer, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    client.force_login(reviewer)

    page = client.get(reverse("plans:policies")).content.decode()

    assert "names group &#x27;finance&#x27;, which does not exist" in page


def test_authors_may_not_read_the_rules(client, author):
    client.force_login(author)

    assert client.get(reverse("plans:policies")).status_code == 403
