"""Answers a user can bank on: no stale reads, no double effects after a timeout, run-scoped keys.

The tools are a user's own (tests/bank_tools.py), written the usual way, not the built-in demos.
"""

import threading
import time

import pytest
from django.db import connection
from django.urls import reverse

from plans.models import Approval, RunEvent, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create, run_summary
from tests import bank_tools

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def bank(settings, reviewer):
    settings.AGENTSITE_TOOL_MODULES = ["tests.bank_tools"]
    bank_tools.reset(A=100, B=0)
    bank_tools.reviewer_id[:] = [reviewer.pk]
    yield
    bank_tools.bank_reply.set()  # let abandoned calls finish


def start(author, steps):
    run = run_create(author=author, goal_text="bank", plan_data={"steps": steps})
    advance_run(run.pk)
    return run


def steps_of(run):
    return {s.step_id: s for s in Step.objects.filter(plan__run=run)}


def balance_transfer_balance(reader, *, approve_mid_run):
    steps = [
        {"id": 1, "tool": reader, "args": {"account": "A"}},
        {
            "id": 2,
            "tool": "transfer",
            "args": {"source": "A", "target": "B", "amount": 30},
            "depends_on": [1],
        },
        {"id": 3, "tool": reader, "args": {"account": "A"}, "depends_on": [2]},
    ]
    if approve_mid_run:  # the reviewer decides while another step of the run still runs
        steps.append({"id": 4, "tool": "approve_waiting", "args": {}})
    return steps


@pytest.mark.parametrize("reader", ["balance", "posted_balance"])
@pytest.mark.parametrize("approve_mid_run", [True, False], ids=["mid-run", "after-parking"])
def test_a_balance_read_after_a_transfer_sees_the_transfer_whatever_the_reviewers_timing(
    author, reviewer, reader, approve_mid_run
):
    run = start(author, balance_transfer_balance(reader, approve_mid_run=approve_mid_run))
    if not approve_mid_run:
        assert Step.objects.get(plan__run=run, step_id=2).status == "awaiting_approval"
        approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    steps = steps_of(run)
    assert steps[2].status == "succeeded"
    assert (steps[1].result, steps[3].result) == (100, 70)
    assert steps[3].reused_from == ""
    assert bank_tools.calls[reader] == 2


def test_a_chain_of_identical_impure_calls_makes_every_call(author):
    run = start(
        author,
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 0.01}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0.01}, "depends_on": [1]},
            {"id": 3, "tool": "nap", "args": {"seconds": 0.01}, "depends_on": [2]},
        ],
    )

    assert bank_tools.calls["nap"] == 3
    assert ToolCall.objects.filter(run=run, tool="nap").count() == 3
    assert all(not s.reused_from for s in steps_of(run).values())


def test_an_identical_pure_call_is_reused_and_says_so_in_the_step_event_page_and_summary(
    author, client
):
    run = start(
        author,
        [
            {"id": 1, "tool": "double", "args": {"number": 21}},
            {"id": 2, "tool": "double", "args": {"number": 21}, "depends_on": [1]},
        ],
    )

    steps = steps_of(run)
    assert bank_tools.calls["double"] == 1
    assert steps[2].result == 42 and steps[2].reused_from == "step 1"
    event = RunEvent.objects.get(run=run, kind="step_finished", payload__step=2)
    assert event.payload["reused_from"] == "step 1"
    run.refresh_from_db()
    assert run_summary(run)["steps"]["2"]["reused_from"] == "step 1"
    assert run_summary(run)["steps"]["1"]["reused_from"] is None
    client.force_login(author)
    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()
    assert "result reused from step 1" in page


def test_identical_pure_calls_in_parallel_give_what_sequential_ones_give(author):
    run = start(
        author,
        [
            {"id": 1, "tool": "double", "args": {"number": 5}},
            {"id": 2, "tool": "double", "args": {"number": 5}},
        ],
    )

    assert [s.result for s in steps_of(run).values()] == [10, 10]


def test_a_pure_result_is_not_reused_across_a_destructive_step_that_ran_after_it(author, reviewer):
    run = start(
        author,
        [
            {"id": 1, "tool": "double", "args": {"number": 1}},
            {
                "id": 2,
                "tool": "transfer",
                "args": {"source": "A", "target": "B", "amount": 1},
                "depends_on": [1],
            },
            {"id": 3, "tool": "double", "args": {"number": 1}, "depends_on": [2]},
            {"id": 4, "tool": "double", "args": {"number": 1}, "depends_on": [3]},
        ],
    )
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    steps = steps_of(run)
    assert bank_tools.calls["double"] == 2  # step 3 calls again; step 4 reuses step 3
    assert (steps[3].reused_from, steps[4].reused_from) == ("", "step 3")


def reply_once_the_call_timed_out(run):
    """The bank's slow reply comes only after the executor recorded the call as timed out."""

    def watch():
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if RunEvent.objects.filter(run=run, kind="step_outcome_unknown").exists():
                    break
                time.sleep(0.01)
        finally:
            bank_tools.bank_reply.set()
            connection.close()

    threading.Thread(target=watch, daemon=True).start()


def test_a_timed_out_destructive_call_is_not_repeated_while_it_may_still_act(
    author, reviewer, client
):
    run = start(
        author,
        [{"id": 1, "tool": "slow_transfer", "args": {"source": "A", "target": "B", "amount": 30}}],
    )
    reply_once_the_call_timed_out(run)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    assert bank_tools.accounts == {"A": 70, "B": 30}  # moved 30, once
    step = steps_of(run)[1]
    (call,) = ToolCall.objects.filter(step=step)
    assert bank_tools.calls["slow_transfer"] == 1
    assert step.status == "succeeded" and step.result["moved"] == 30
    assert call.error.startswith("timed out after 0.2s")
    assert call.late_result == {"moved": 30, "from": "A", "to": "B"}
    assert call.late_arrived_at is not None
    late = RunEvent.objects.get(run=run, kind="tool_call_late")
    assert late.payload["result"]["moved"] == 30
    client.force_login(author)
    audit = client.get(reverse("plans:run_audit", args=[run.pk])).content.decode()
    assert "arrived late, at" in audit


def test_a_timed_out_destructive_call_is_settled_by_its_tools_reconcile_hook(author, reviewer):
    run = start(
        author,
        [
            {
                "id": 1,
                "tool": "reconciled_transfer",
                "args": {"source": "A", "target": "B", "amount": 30},
            }
        ],
    )
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    step = steps_of(run)[1]
    assert step.status == "succeeded" and step.result == {"moved": 30, "reconciled": True}
    assert bank_tools.calls["reconciled_transfer"] == 1
    assert bank_tools.accounts == {"A": 70, "B": 30}
    assert RunEvent.objects.filter(run=run, kind="step_reconciled").count() == 1


def test_a_destructive_call_with_no_outcome_in_time_fails_as_unknown_and_is_not_repeated(
    author, reviewer, settings
):
    settings.AGENTSITE_TOOL_OUTCOME_WAIT_S = 0.05
    run = start(
        author,
        [{"id": 1, "tool": "slow_transfer", "args": {"source": "A", "target": "B", "amount": 30}}],
    )
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    step = steps_of(run)[1]
    assert step.status == "failed"
    assert "outcome unknown" in step.error and "not repeated" in step.error
    assert bank_tools.calls["slow_transfer"] == 1


def test_two_runs_identical_approved_transfers_both_happen(author, reviewer):
    plan = [{"id": 1, "tool": "transfer", "args": {"source": "A", "target": "B", "amount": 10}}]
    for _ in range(2):
        run = start(author, plan)
        approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    assert bank_tools.accounts == {"A": 80, "B": 20}
    keys = set(ToolCall.objects.filter(tool="transfer").values_list("idempotency_key", flat=True))
    assert len(keys) == 2


def test_two_runs_identical_approved_emails_both_send(author, reviewer):
    from django.core import mail

    email = {"to": "ops@example.com", "subject": "Stock alert", "body": "Reorder AirPods 4"}
    for _ in range(2):
        run = start(author, [{"id": 1, "tool": "send_email", "args": email}])
        approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    assert len(mail.outbox) == 2
