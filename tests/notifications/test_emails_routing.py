"""Who a waiting round's e-mail goes to when an approval rule routed its requests."""

import pytest
from django.contrib.auth.models import Group, Permission

from plans.notifications.emails import approval_round_email
from tests.reviewing import refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team(django_user_model):
    decide = Permission.objects.get(codename="decide_approval")
    finance = Group.objects.create(name="finance")
    people = {}
    for name, groups in (("bob", []), ("fiona", [finance])):
        user = django_user_model.objects.create_user(name, email=f"{name}@example.com")
        user.user_permissions.add(decide)
        user.groups.add(*groups)
        people[name] = user
    return people


def emailed(approval, people):
    """Who of these people the round's e-mail goes to (one e-mail each, to them alone)."""
    sent = [approval_round_email(approval.run_id, approval.step.round, p.pk) for p in people]
    return sorted(address for email in sent if email for address in email.recipients)


def refund(author, order_id, amount=500):
    return waiting_approval(author, refund_plan(order_id, amount))


def test_a_request_routed_to_finance_is_emailed_to_finance_members_only(author, team, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    approval = refund(author, "A-1004")  # not delivered: routed to finance

    assert emailed(approval, team.values()) == ["fiona@example.com"]


def test_a_request_anyone_may_decide_is_emailed_to_every_reviewer(author, team):
    approval = refund(author, "A-1004")  # no rules

    assert emailed(approval, team.values()) == ["bob@example.com", "fiona@example.com"]


def test_the_email_says_the_rule_and_how_many_approvals_it_has(author, team, settings):
    from plans.services.approvals import approval_decide

    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    approval = refund(author, "A-1002", 60000)
    approval_decide(approval=approval, reviewer=team["bob"], approve=True)

    email = approval_round_email(approval.run_id, approval.step.round, team["fiona"].pk)

    assert email is not None
    assert "rule large_refund_needs_two_reviewers · 1 of 2 approvals" in email.text
    assert "1 of 2 approvals" in email.html
