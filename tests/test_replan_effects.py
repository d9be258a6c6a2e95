"""A replan never repeats an effect that already happened: identical destructive calls of a later
plan version keep their key, and a call that took effect is not made again."""

import json
import socket

import pytest
from django.core import mail

from plans.llm.offline import REFUND_GOAL, OfflineModel
from plans.models import Approval, LedgerEntry, Plan, Run, RunEvent, Step, ToolCall
from plans.runtime import advance as execution
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests import replan_tools

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def email_fails(settings):
    """Email delivery fails: SMTP points at a loopback port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once the probe closes: nothing listens there
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5},
        }
    }
    settings.AGENTSITE_TOOL_RETRY_BASE_S = 0.01
    settings.AGENTSITE_TOOL_RETRY_CAP_S = 0.05
    settings.AGENTSITE_MAX_REPLANS = 1


def approve_everything(run, reviewer):
    """Approve each call the run waits for, as it comes, until the run ends."""
    for _ in range(10):
        run.refresh_from_db()
        if run.status != Run.Status.AWAITING_APPROVAL:
            return run
        for approval in Approval.objects.filter(run=run, decision="pending"):
            approval_decide(approval=approval, reviewer=reviewer, approve=True)
    raise AssertionError(f"run {run.pk} still waits: {run.status}")


def steps_of(run, version):
    return {s.step_id: s for s in Step.objects.filter(plan__run=run, plan__version=version)}


def test_the_demo_refund_is_issued_once_when_the_email_fails_and_the_run_replans(
    author, reviewer, email_fails
):
    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    run = approve_everything(run, reviewer)

    assert ToolCall.objects.filter(run=run, tool="issue_refund").count() == 1
    assert LedgerEntry.objects.filter(kind="refund").count() == 1
    v1, v2 = steps_of(run, 1), steps_of(run, 2)
    assert v1[3].status == v2[3].status == "failed"  # the email never went out
    assert v2[2].status == "succeeded" and v2[2].reused_from == "plan v1 step 2"
    assert v2[2].result == v1[2].result
    assert v2[2].idempotency_key == v1[2].idempotency_key
    # No reviewer was asked to approve the refund again.
    assert Approval.objects.filter(run=run, tool="issue_refund").count() == 1
    # The email that never acted is tried again under its own key, on a new approval.
    assert v2[3].idempotency_key == v1[3].idempotency_key
    assert "Refunded INR 2499 for order A-1001" in run.answer
    assert "in plan v1" in run.answer
    assert "not issued" not in run.answer
    finished = RunEvent.objects.get(run=run, kind="step_finished", payload__reused_from__gt="")
    assert finished.payload["step"] == 2


def own_plan():
    refund = {"order_id": "A-1001", "amount_inr": 2499}
    return {
        "steps": [
            {"id": 1, "tool": "keyed_refund", "args": refund, "depends_on": []},
            {
                "id": 2,
                "tool": "send_email",
                "args": {"to": "c@example.com", "subject": "Refund", "body": "Ref {{1}}"},
                "depends_on": [1],
            },
        ]
    }


class OwnToolPlanner(OfflineModel):
    """Plans (and replans) the same refund with the test's own tool; answers as offline does."""

    def _reply(self, request):
        if request.purpose in ("plan", "replan"):
            return json.dumps(own_plan())
        return super()._reply(request)


@pytest.fixture
def own_tools(settings, monkeypatch):
    settings.AGENTSITE_TOOL_MODULES = ["tests.replan_tools"]
    replan_tools.reset()
    monkeypatch.setattr(execution, "get_model", OwnToolPlanner)


def test_a_tool_idempotent_by_key_with_no_business_check_acts_once_across_a_replan(
    author, reviewer, email_fails, own_tools
):
    run = run_create(author=author, goal_text="Refund A-1001 with our own tool")
    advance_run(run.pk)
    run = approve_everything(run, reviewer)

    assert Plan.objects.filter(run=run, is_valid=True).count() == 2
    assert replan_tools.refunds == 1  # it would refund on any new key
    assert len(replan_tools.keys) == 1
    assert steps_of(run, 2)[1].reused_from == "plan v1 step 1"
    assert not mail.outbox
