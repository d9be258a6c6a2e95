"""The approval gate: destructive calls run only on a reviewer's decision on their exact args."""

import threading

import pytest
from django.core import mail

from plans.engine import args_sha256
from plans.models import Approval, LedgerEntry, Run, RunEvent, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.runtime.tool_calls import invoke_tool
from plans.services.approvals import ApprovalRefused, approval_decide
from plans.services.runs import run_create
from plans.tools import get_registry
from tests import support_tools
from tests.integration.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

REFUND_PLAN = {
    "steps": [
        {"id": 1, "tool": "order_total", "args": {"order_id": "A-1001"}, "depends_on": []},
        {
            "id": 2,
            "tool": "issue_refund",
            "args": {"order_id": "A-1001", "amount_inr": "{{1}}", "reason": "damaged item"},
            "depends_on": [1],
        },
        {
            "id": 3,
            "tool": "send_email",
            "args": {
                "to": "customer-a1001@example.com",
                "subject": "Your refund",
                "body": "We refunded INR {{1}}. Reference: {{2}}",
            },
            "depends_on": [1, 2],
        },
    ]
}


def start_refund(author):
    run = run_create(author=author, goal_text="Refund order A-1001", plan_data=REFUND_PLAN)
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def test_a_destructive_step_parks_the_run_until_a_reviewer_decides(author):
    run = start_refund(author)

    approval = Approval.objects.get(run=run)
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert run.lease_token is None  # parked runs hold nothing
    assert approval.tool == "issue_refund"
    assert approval.requested_args == {
        "order_id": "A-1001",
        "amount_inr": 2499,
        "reason": "damaged item",
    }
    assert approval.args_sha256 == args_sha256("issue_refund", approval.requested_args)
    assert not LedgerEntry.objects.exists()
    assert not ToolCall.objects.filter(tool="issue_refund").exists()


def test_an_approval_lets_the_run_continue_and_the_side_effect_happens_once(author, reviewer):
    run = start_refund(author)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)
    # The decision enqueued the continuation (inline tasks in tests); the email needs its own.
    run.refresh_from_db()
    email_approval = Approval.objects.get(run=run, tool="send_email")
    approval_decide(approval=email_approval, reviewer=reviewer, approve=True)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert LedgerEntry.objects.filter(kind="refund").count() == 1
    assert len(mail.outbox) == 1
    assert "Reference: " in mail.outbox[0].body


def test_a_rejection_blocks_the_step_with_the_reason_and_skips_its_dependants(author, reviewer):
    run = start_refund(author)
    approval_decide(
        approval=Approval.objects.get(run=run),
        reviewer=reviewer,
        approve=False,
        reason="order was already refunded in store",
    )

    run.refresh_from_db()
    steps = {s.step_id: s for s in Step.objects.filter(plan__run=run)}
    assert run.status == Run.Status.BLOCKED
    assert steps[2].status == "blocked"
    assert steps[2].result == (
        "BLOCKED: a reviewer declined issue_refund. "
        "Reason: order was already refunded in store. Do not retry."
    )
    assert steps[3].status == "skipped"
    assert "already refunded in store" in run.answer
    assert not LedgerEntry.objects.exists()


def test_a_reviewer_may_edit_the_arguments_and_the_approval_binds_to_the_edit(author, reviewer):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    edited = {"order_id": "A-1001", "amount_inr": 2000, "reason": "partial refund"}
    approval_decide(approval=approval, reviewer=reviewer, approve=True, edited_args=edited)

    approval.refresh_from_db()
    assert approval.args == edited
    assert approval.requested_args["amount_inr"] == 2499  # the audit keeps both versions
    assert approval.args_sha256 == args_sha256("issue_refund", edited)
    assert LedgerEntry.objects.get(kind="refund").details["amount_inr"] == 2000


def test_an_edit_that_breaks_the_tool_schema_is_refused_and_changes_nothing(author, reviewer):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    events_before = RunEvent.objects.filter(run=run).count()

    with pytest.raises(ApprovalRefused, match="amount_inr"):
        approval_decide(
            approval=approval,
            reviewer=reviewer,
            approve=True,
            edited_args={"order_id": "A-1001", "amount_inr": "lots", "reason": "x"},
        )

    approval.refresh_from_db()
    assert approval.decision == "pending"
    assert RunEvent.objects.filter(run=run).count() == events_before


def test_an_edit_holding_text_that_cannot_be_stored_is_refused_naming_it(author, reviewer):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)

    with pytest.raises(ApprovalRefused, match=r"cannot be stored: a NUL character"):
        approval_decide(
            approval=approval,
            reviewer=reviewer,
            approve=True,
            edited_args={"order_id": "A-1001", "amount_inr": 10, "reason": "x\x00y"},
        )

    approval.refresh_from_db()
    assert approval.decision == "pending"


def test_it_refuses_the_authors_own_approval_under_four_eyes(author):
    from django.contrib.auth.models import Permission

    author.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    author = type(author).objects.get(pk=author.pk)
    run = start_refund(author)

    with pytest.raises(ApprovalRefused, match="Four-eyes"):
        approval_decide(approval=Approval.objects.get(run=run), reviewer=author, approve=True)
    assert Approval.objects.get(run=run).decision == "pending"


def test_it_refuses_a_decision_from_someone_without_the_permission(author, outsider):
    run = start_refund(author)

    with pytest.raises(ApprovalRefused, match="permission"):
        approval_decide(approval=Approval.objects.get(run=run), reviewer=outsider, approve=True)


def test_it_refuses_a_second_decision_on_the_same_step(author, reviewer, django_user_model):
    from django.contrib.auth.models import Permission

    second = django_user_model.objects.create_user("dave")
    second.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    second = django_user_model.objects.get(pk=second.pk)
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    approval_decide(approval=approval, reviewer=reviewer, approve=False, reason="no")

    with pytest.raises(ApprovalRefused, match="already rejected by bob"):
        approval_decide(approval=approval, reviewer=second, approve=True)


def test_a_rejection_needs_a_reason(author, reviewer):
    run = start_refund(author)

    with pytest.raises(ApprovalRefused, match="reason is required"):
        approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=False)


def test_the_tool_invoker_refuses_a_destructive_call_without_a_matching_approval(author):
    spec = get_registry()["issue_refund"]
    args = {"order_id": "A-1001", "amount_inr": 10, "reason": "test"}

    outcome = invoke_tool(spec, args, key="k1", approval=None, step_pk=1)

    assert "no approval" in outcome.error
    assert not LedgerEntry.objects.exists()


def test_an_approval_for_other_arguments_does_not_open_the_gate(author, reviewer):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    approval_decide(approval=approval, reviewer=reviewer, approve=True, resume=False)
    approval.refresh_from_db()
    spec = get_registry()["issue_refund"]

    outcome = invoke_tool(
        spec,
        {"order_id": "A-1001", "amount_inr": 99999, "reason": "damaged item"},
        key="k2",
        approval=approval,
        step_pk=approval.step_id,
    )

    assert "no approval" in outcome.error
    assert not LedgerEntry.objects.exists()


def test_an_approval_left_undecided_past_its_ttl_expires_and_blocks_the_step(author, settings):
    from datetime import timedelta

    from django.utils import timezone

    from plans.services.approvals import approvals_expire

    run = start_refund(author)
    settings.AGENTSITE_APPROVAL_TTL_S = 3600
    Approval.objects.filter(run=run).update(requested_at=timezone.now() - timedelta(hours=2))

    assert approvals_expire() == [run.pk]

    run.refresh_from_db()
    approval = Approval.objects.get(run=run)
    step = Step.objects.get(plan__run=run, step_id=2)
    assert approval.decision == "expired"
    assert run.status == Run.Status.BLOCKED  # the continuation ran (inline tasks in tests)
    assert step.status == "blocked"
    assert step.result.startswith("BLOCKED: issue_refund was not approved in time.")
    assert "approval expired" in step.result
    assert not LedgerEntry.objects.exists()


def test_an_approval_still_within_its_ttl_does_not_expire(author):
    from plans.services.approvals import approvals_expire

    run = start_refund(author)

    assert approvals_expire() == []
    assert Approval.objects.get(run=run).decision == "pending"


def test_two_reviewers_deciding_at_once_record_exactly_one_decision(author, reviewer):
    import threading

    from django.contrib.auth.models import Permission
    from django.db import connections

    second = type(reviewer).objects.create_user("erin")
    second.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    second = type(reviewer).objects.get(pk=second.pk)
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    barrier = threading.Barrier(2)
    outcomes = []

    def decide(user, approve):
        barrier.wait()
        try:
            approval_decide(
                approval=approval, reviewer=user, approve=approve, reason="race", resume=False
            )
            outcomes.append("recorded")
        except ApprovalRefused as refused:
            outcomes.append(str(refused))
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=decide, args=(reviewer, True)),
        threading.Thread(target=decide, args=(second, False)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    refusals = [outcome for outcome in outcomes if outcome != "recorded"]
    assert outcomes.count("recorded") == 1
    assert len(refusals) == 1 and "already" in refusals[0]
    assert RunEvent.objects.filter(run=run, kind="approval_decided").count() == 1


def test_decisions_that_come_while_steps_run_keep_to_the_runs_parallel_cap(
    author, reviewer, settings
):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    support_tools.tracked.update(now=0, most=0)
    charge = {"tool": "tracked_charge", "depends_on": []}
    steps = [
        {"id": 1, "tool": "tracked_wait", "args": {"seconds": 1.0}, "depends_on": []},
        *({**charge, "id": n, "args": {"label": f"c{n}"}} for n in (2, 3, 4)),
    ]
    run = run_create(
        author=author, goal_text="charges", plan_data={"steps": steps}, max_parallel_steps=2
    )

    def decide_all_while_step_1_runs():
        wait_until(lambda: Approval.objects.filter(run=run).count() == 3)
        for approval in Approval.objects.filter(run=run):
            approval_decide(approval=approval, reviewer=reviewer, approve=True, resume=False)

    deciding = threading.Thread(target=decide_all_while_step_1_runs)
    deciding.start()
    assert advance_run(run.pk) == Run.Status.COMPLETED
    deciding.join()

    assert support_tools.tracked["most"] == 2


def two_identical_emails_waiting(author, *, body):
    """A run whose steps 1 and 2 send the same email, both waiting: (run, approval 1, 2)."""
    email = {"to": "a@example.com", "subject": "Hello", "body": body}
    steps = [{"id": n, "tool": "send_email", "args": email, "depends_on": []} for n in (1, 2)]
    run = run_create(author=author, goal_text="email", plan_data={"steps": steps})
    advance_run(run.pk)
    first, second = Approval.objects.filter(run=run).order_by("step__step_id")
    return run, first, second


def test_rejecting_one_of_two_identical_steps_leaves_the_other_to_its_own_decision(
    author, reviewer
):
    run, first, second = two_identical_emails_waiting(author, body="Once is enough.")

    approval_decide(approval=first, reviewer=reviewer, approve=False, reason="a duplicate")
    assert Step.objects.get(plan__run=run, step_id=2).status == "awaiting_approval"
    approval_decide(approval=second, reviewer=reviewer, approve=True)

    statuses = dict(Step.objects.filter(plan__run=run).values_list("step_id", "status"))
    assert statuses == {1: "blocked", 2: "succeeded"}
    assert len(mail.outbox) == 1


@pytest.mark.parametrize("reason", ["bad\x00reason", "bad \ud800 reason"])
def test_a_reason_that_cannot_be_stored_is_refused_and_nothing_is_decided(author, reviewer, reason):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)

    with pytest.raises(ApprovalRefused, match="The reason holds text that cannot be stored"):
        approval_decide(approval=approval, reviewer=reviewer, approve=False, reason=reason)

    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.PENDING


def test_identical_destructive_steps_keep_their_own_keys_when_a_crash_reorders_them(
    author, reviewer
):
    run, first, second = two_identical_emails_waiting(author, body="Sent on purpose twice.")
    approval_decide(approval=second, reviewer=reviewer, approve=True)  # step 2 goes first
    approval_decide(approval=first, reviewer=reviewer, approve=True)
    keys = dict(ToolCall.objects.filter(run=run).values_list("step__step_id", "idempotency_key"))
    assert len(set(keys.values())) == 2 and len(mail.outbox) == 2

    # As if the worker died with both calls in flight: nothing but the attempts was recorded.
    ToolCall.objects.filter(run=run).delete()
    Step.objects.filter(plan__run=run).update(status="running", result=None, finished_at=None)
    Run.objects.filter(pk=run.pk).update(status="running", finished_at=None, answer="")
    advance_run(run.pk)  # the recovering worker launches step 1 first

    again = dict(ToolCall.objects.filter(run=run).values_list("step__step_id", "idempotency_key"))
    assert again == keys
    assert len(mail.outbox) == 2  # each key's email went out once


def test_an_edit_with_an_integer_too_long_to_write_is_refused(author, reviewer):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    edited = {**approval.args, "amount_inr": 10**5000}

    with pytest.raises(ApprovalRefused, match="cannot be written as JSON"):
        approval_decide(approval=approval, reviewer=reviewer, approve=True, edited_args=edited)

    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.PENDING
