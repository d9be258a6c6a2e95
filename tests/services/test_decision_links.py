"""E-mail decision links: signed for one reviewer, one approval and its argument hash; used once,
even by two requests at once; deciding through the same service (and rules) as the inbox."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Permission
from django.core import signing
from django.db import close_old_connections

from plans.models import Approval, DecisionLinkUse, Run, RunEvent
from plans.services.approvals import ApprovalRefused, approval_decide
from plans.services.decision_links import (
    LinkRefused,
    approval_decide_by_link,
    decision_link_check,
    decision_link_read,
    decision_link_token,
)
from tests.reviewing import decider, refund_of_order_total, shown_token, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = refund_of_order_total("damaged item")


@pytest.fixture
def waiting(author):
    return waiting_approval(author, REFUND, goal="Refund order A-1001")


@pytest.fixture
def second_reviewer(django_user_model):
    return decider(django_user_model, "dave", password="dave-pass-123")


def shown(link):
    """The token of the preview the link's page shows now."""
    return shown_token(Approval.objects.get(pk=link.approval_id))


def link_for(approval, reviewer, choice="approve"):
    return decision_link_read(
        decision_link_token(approval=approval, reviewer=reviewer, choice=choice)
    )


def test_a_link_approves_through_the_service_and_the_run_goes_on(waiting, reviewer):
    link = link_for(waiting, reviewer)
    decided = approval_decide_by_link(link=link, reviewer=reviewer, seen_preview=shown(link))

    assert decided.decision == "approved" and decided.via == "email"
    assert decided.reviewer == reviewer
    assert Run.objects.get(pk=waiting.run_id).status == Run.Status.COMPLETED
    event = RunEvent.objects.get(run_id=waiting.run_id, kind="approval_decided")
    assert event.payload["reviewer"] == "bob" and event.payload["decision"] == "approved"
    [use] = DecisionLinkUse.objects.all()
    assert (use.approval_id, use.reviewer_id, use.decision) == (waiting.pk, reviewer.pk, "approved")


def test_a_reject_link_needs_a_reason_and_a_refusal_leaves_the_link_unused(waiting, reviewer):
    link = link_for(waiting, reviewer, "reject")
    with pytest.raises(ApprovalRefused) as refused:
        approval_decide_by_link(link=link, reviewer=reviewer, seen_preview=shown(link), reason="  ")
    assert refused.value.code == "reason_required"
    assert not DecisionLinkUse.objects.exists()

    decided = approval_decide_by_link(
        link=link, reviewer=reviewer, seen_preview=shown(link), reason="wrong order"
    )
    assert decided.decision == "rejected" and decided.reason == "wrong order"


def test_a_link_decides_once_and_then_says_how_it_was_used(waiting, reviewer):
    link = link_for(waiting, reviewer)
    approval_decide_by_link(link=link, reviewer=reviewer, seen_preview=shown(link))

    for again in (link, link_for(waiting, reviewer, "reject")):  # the other link too
        with pytest.raises(LinkRefused) as refused:
            approval_decide_by_link(
                link=again, reviewer=reviewer, seen_preview=shown(again), reason="x"
            )
        assert refused.value.code == "link_used"
        assert "you approved this step" in str(refused.value)


def test_two_uses_at_once_decide_once(waiting, reviewer):
    link = link_for(waiting, reviewer)
    seen = shown(link)
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def use() -> None:
        try:
            start.wait()
            approval_decide_by_link(link=link, reviewer=reviewer, seen_preview=seen, resume=False)
            outcomes.append("decided")
        except (LinkRefused, ApprovalRefused) as refused:
            outcomes.append(refused.code)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=use) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["decided", "link_used"]
    assert DecisionLinkUse.objects.count() == 1
    assert RunEvent.objects.filter(run_id=waiting.run_id, kind="approval_decided").count() == 1


def test_a_link_for_changed_arguments_is_stale(waiting, reviewer):
    link = link_for(waiting, reviewer)
    changed = waiting.args | {"amount_inr": 10}
    Approval.objects.filter(pk=waiting.pk).update(
        args=changed, args_sha256="0" * 64
    )  # as an edit by another of n reviewers would leave it

    with pytest.raises(LinkRefused) as refused:
        approval_decide_by_link(link=link, reviewer=reviewer, seen_preview=shown(link))
    assert refused.value.code == "link_stale"
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"
    assert not DecisionLinkUse.objects.exists()


def test_a_link_is_refused_to_anyone_but_its_reviewer(waiting, reviewer, second_reviewer):
    link = link_for(waiting, reviewer)
    for check in (
        lambda: decision_link_check(link=link, user=second_reviewer),
        lambda: approval_decide_by_link(
            link=link, reviewer=second_reviewer, seen_preview=shown(link)
        ),
    ):
        with pytest.raises(LinkRefused) as refused:
            check()
        assert refused.value.code == "link_other_user"
    assert Approval.objects.get(pk=waiting.pk).decision == "pending"


def test_a_link_to_a_request_decided_elsewhere_says_by_whom(waiting, reviewer, second_reviewer):
    link = link_for(waiting, reviewer)
    approval_decide(approval=waiting, reviewer=second_reviewer, approve=False, reason="no")

    with pytest.raises(LinkRefused) as refused:
        decision_link_check(link=link, user=reviewer)
    assert refused.value.code == "link_decided"
    assert "already rejected by dave" in str(refused.value)


@pytest.mark.parametrize("settled", ["expired", "stale"])
def test_a_settled_request_is_refused_in_the_same_words_by_its_link_and_the_inbox(
    waiting, reviewer, settled
):
    link = link_for(waiting, reviewer)
    Approval.objects.filter(pk=waiting.pk).update(decision=settled)
    waiting.refresh_from_db()

    with pytest.raises(LinkRefused) as by_link:
        decision_link_check(link=link, user=reviewer)
    with pytest.raises(ApprovalRefused) as by_inbox:
        approval_decide(approval=waiting, reviewer=reviewer, approve=True)

    assert (by_link.value.code, by_inbox.value.code) == ("link_decided", "already_decided")
    assert str(by_link.value) == str(by_inbox.value) == waiting.settled_words()
    assert "by someone" not in str(by_inbox.value)


def test_a_link_keeps_four_eyes(waiting, author):
    author.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    author = type(author).objects.get(pk=author.pk)
    with pytest.raises(ApprovalRefused) as refused:
        link = link_for(waiting, author)
        approval_decide_by_link(link=link, reviewer=author, seen_preview=shown(link))
    assert refused.value.code == "four_eyes"
    assert not DecisionLinkUse.objects.exists()


def test_a_link_past_its_time_or_tampered_with_is_refused(waiting, reviewer, settings):
    token = decision_link_token(approval=waiting, reviewer=reviewer, choice="approve")
    settings.AGENTSITE_DECISION_LINK_TTL_S = -1
    with pytest.raises(LinkRefused) as refused:
        decision_link_read(token)
    assert refused.value.code == "link_expired"

    settings.AGENTSITE_DECISION_LINK_TTL_S = 3600
    forged = signing.dumps(
        {"a": waiting.pk, "u": reviewer.pk, "h": waiting.args_sha256, "d": "approve"},
        salt="another purpose",
    )
    for bad in (token[:-2], forged, token.replace(":", ";", 1)):
        with pytest.raises(LinkRefused) as refused:
            decision_link_read(bad)
        assert refused.value.code == "link_invalid"
