"""Previews on PostgreSQL: the demo's second refund of an order goes stale after the first."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command

from tests.integration.conftest import postgres_settings

pytestmark = pytest.mark.services

GOAL = "Refund order A-1001 for a damaged item"


def test_the_second_refund_of_an_order_goes_stale_on_postgresql(pg_database, this_process_on):
    from plans.models import Approval, LedgerEntry, RunEvent, ToolPreview
    from plans.runtime.advance import advance_run
    from plans.services.approvals import approval_decide
    from plans.services.runs import run_create

    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        users = get_user_model().objects
        author = users.create_user("alice")
        reviewer = users.create_user("bob")
        reviewer.user_permissions.add(Permission.objects.get(codename="decide_approval"))
        runs = [run_create(author=author, goal_text=GOAL) for _ in range(2)]
        for run in runs:
            advance_run(run.pk)
            request = Approval.objects.get(run=run, decision="pending")
            approval_decide(approval=request, reviewer=reviewer, approve=True, resume=False)
        for run in runs:
            advance_run(run.pk)

        assert LedgerEntry.objects.filter(kind="refund").count() == 1
        fresh = Approval.objects.get(run=runs[1], tool="issue_refund", decision="pending")
        assert fresh.supersedes.decision == "stale"
        assert "Already refunded: ₹0 → ₹2,499" in fresh.changes
        assert RunEvent.objects.filter(run=runs[1], kind="approval_stale").count() == 1
        assert ToolPreview.objects.filter(run=runs[1]).count() == 2  # request, launch
