"""The offline demo's stale preview: two runs refund the same order; the second approval goes
stale after the first refund, and its request comes back showing what changed."""

import pytest

from plans.models import Approval, LedgerEntry, RunEvent
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)

GOAL = "Refund order A-1001 for a damaged item"


def refund_request(run):
    return Approval.objects.get(run=run, tool="issue_refund", decision="pending")


def test_the_second_refund_of_an_order_goes_stale_after_the_first(author, reviewer):
    first = run_create(author=author, goal_text=GOAL)
    second = run_create(author=author, goal_text=GOAL)
    advance_run(first.pk)
    advance_run(second.pk)
    for run in (first, second):  # both reviewers saw "already refunded ₹0"
        request = refund_request(run)
        assert dict(request.preview["facts"])["Already refunded"] == "₹0"
        approval_decide(approval=request, reviewer=reviewer, approve=True, resume=False)

    advance_run(first.pk)  # refunds ₹2,499, then waits for its email's approval
    advance_run(second.pk)

    assert LedgerEntry.objects.filter(kind="refund").count() == 1
    fresh = refund_request(second)
    assert fresh.supersedes.decision == "stale"
    facts = dict(fresh.preview["facts"])
    assert facts["Already refunded"] == "₹2,499"
    assert facts["Earlier refunds"].endswith(f", run #{first.pk})")
    assert "Already refunded: ₹0 → ₹2,499" in fresh.changes
    assert fresh.preview["warnings"][0].startswith("only ₹0 is left to refund")
    assert RunEvent.objects.filter(run=second, kind="approval_stale").count() == 1
