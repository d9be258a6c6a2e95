"""Previews of destructive calls: taken before the decision (slow, raising or hanging hooks
never block it) and again just before the call, which does not run if its target changed."""

import pytest

from plans.guards.audit import chain_problems
from plans.models import Approval, LedgerEntry, Run, RunEvent, Step, ToolCall, ToolPreview
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests import preview_tools

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def preview_tool_module(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.preview_tools"]  # with the demo's built-ins
    preview_tools.reset(widget=10)
    yield
    preview_tools.hang.set()  # lets a hanging preview's thread go


def start(author, tool="ship", quantity=3):
    steps = [{"id": 1, "tool": tool, "args": {"item": "widget", "quantity": quantity}}]
    run = run_create(author=author, goal_text=f"ship with {tool}", plan_data={"steps": steps})
    status = advance_run(run.pk)
    return run, status


def waiting(run):
    return Approval.objects.get(run=run, decision="pending")


def approve(approval, reviewer):
    approval_decide(approval=approval, reviewer=reviewer, approve=True, resume=False)


def test_the_request_carries_the_preview_and_its_target_version(author):
    run, status = start(author)

    assert status == Run.Status.AWAITING_APPROVAL
    preview = waiting(run).preview
    assert preview["summary"] == "Ship 3 of widget; 10 in stock"
    assert preview["facts"] == [["In stock", "10"], ["Left after", "7"]]
    assert preview["target_version"] == "widget@1"
    assert waiting(run).target_version == "widget@1"
    recorded = ToolPreview.objects.get(run=run)
    assert (recorded.purpose, recorded.error) == ("request", "")
    assert recorded.preview == preview
    # A preview is never a call: no ToolCall row, no attempt.
    assert not ToolCall.objects.filter(run=run).exists()
    assert Step.objects.get(plan__run=run).attempts == 0
    requested = RunEvent.objects.get(run=run, kind="approval_requested")
    assert requested.payload["preview"] == preview


def test_an_unchanged_target_lets_the_call_run_after_the_re_check(author, reviewer):
    run, _ = start(author)
    approve(waiting(run), reviewer)

    assert advance_run(run.pk) == Run.Status.COMPLETED
    assert preview_tools.shipped == [("widget", 1, Step.objects.get(plan__run=run).idempotency_key)]
    assert list(ToolPreview.objects.filter(run=run).values_list("purpose", flat=True)) == [
        "request",
        "launch",
    ]
    assert preview_tools.preview_calls["ship"] == 2


def test_a_target_changed_since_approval_stops_the_call_and_asks_again(author, reviewer):
    run, _ = start(author)
    first = waiting(run)
    approve(first, reviewer)
    preview_tools.restock("widget", 5)  # between the reviewer's look and the call

    assert advance_run(run.pk) == Run.Status.AWAITING_APPROVAL
    assert preview_tools.shipped == []
    assert not ToolCall.objects.filter(run=run).exists()
    first.refresh_from_db()
    assert first.decision == "stale"
    fresh = waiting(run)
    assert fresh.supersedes == first
    assert fresh.preview["target_version"] == "widget@2"
    assert fresh.preview["summary"] == "Ship 3 of widget; 15 in stock"
    assert fresh.changes == ["In stock: 10 → 15", "Left after: 7 → 12"]
    step = Step.objects.get(plan__run=run)
    assert (step.status, step.attempts) == ("awaiting_approval", 0)
    stale = RunEvent.objects.get(run=run, kind="approval_stale")
    assert stale.payload["approved_version"] == "widget@1"
    assert stale.payload["current_version"] == "widget@2"
    assert stale.payload["changes"] == fresh.changes
    assert stale.payload["approved_preview"] == first.preview
    assert stale.hash  # an audit row, on the run's hash chain
    assert chain_problems(Run.objects.get(pk=run.pk)) == []

    approve(fresh, reviewer)
    assert advance_run(run.pk) == Run.Status.COMPLETED
    assert [version for _, version, _ in preview_tools.shipped] == [2]


def test_a_slow_preview_is_waited_for_within_its_limit(author):
    run, _ = start(author, tool="ship_slowly")

    approval = waiting(run)
    assert approval.preview["summary"] == "Ship 3 of widget; 10 in stock"
    assert ToolPreview.objects.get(run=run).duration_ms >= preview_tools.SLOW_PREVIEW_S * 1000


@pytest.mark.parametrize(
    ("tool", "error"),
    [
        ("ship_broken", "RuntimeError: warehouse API answered 503"),
        ("ship_hanging", "timed out after 0.2s"),
        ("ship_badly_previewed", "PreviewInvalid: the preview hook returned dict, not a Preview"),
    ],
)
def test_a_failed_preview_shows_why_and_never_blocks_or_approves(author, reviewer, tool, error):
    run, status = start(author, tool=tool)

    assert status == Run.Status.AWAITING_APPROVAL  # still asked, and not approved by it
    approval = waiting(run)
    assert approval.preview == {"error": error}
    assert approval.target_version is None
    assert ToolPreview.objects.get(run=run).error == error
    assert preview_tools.shipped == []

    approve(approval, reviewer)
    assert advance_run(run.pk) == Run.Status.COMPLETED  # approved without a preview: it runs
    assert len(preview_tools.shipped) == 1
    # Nothing to hold the call to, so the hook is not asked again at launch.
    assert preview_tools.preview_calls[tool] == 1


def test_a_preview_that_fails_at_launch_does_not_confirm_the_target(author, reviewer, settings):
    run, _ = start(author)
    approve(waiting(run), reviewer)
    preview_tools.stock.pop("widget")  # the hook now raises KeyError

    assert advance_run(run.pk) == Run.Status.AWAITING_APPROVAL
    assert preview_tools.shipped == []
    fresh = waiting(run)
    assert fresh.preview == {"error": "KeyError: 'widget'"}
    assert fresh.changes == ["the preview could not be taken again (KeyError: 'widget')"]


def test_a_rejected_fresh_request_blocks_the_step(author, reviewer):
    run, _ = start(author)
    approve(waiting(run), reviewer)
    preview_tools.restock("widget", 1)
    advance_run(run.pk)

    approval_decide(
        approval=waiting(run), reviewer=reviewer, approve=False, reason="changed", resume=False
    )
    assert advance_run(run.pk) == Run.Status.BLOCKED
    assert Step.objects.get(plan__run=run).status == "blocked"
    assert preview_tools.shipped == []


REFUND = {
    "steps": [
        {
            "id": 1,
            "tool": "issue_refund",
            "args": {"order_id": "A-1003", "amount_inr": 999, "reason": "late"},
        }
    ]
}


def test_a_call_repeated_after_a_crash_is_not_stale_for_its_own_effect(author, reviewer):
    run = run_create(author=author, goal_text="refund", plan_data=REFUND)
    advance_run(run.pk)
    approve(waiting(run), reviewer)
    assert advance_run(run.pk) == Run.Status.COMPLETED
    # As if the worker died after the refund, before its outcome was recorded.
    ToolCall.objects.filter(run=run).delete()
    Step.objects.filter(plan__run=run).update(status="running", result=None, finished_at=None)
    Run.objects.filter(pk=run.pk).update(status="running", finished_at=None, answer="")

    assert advance_run(run.pk) == Run.Status.COMPLETED
    assert not Approval.objects.filter(run=run, decision="stale").exists()
    assert LedgerEntry.objects.filter(kind="refund").count() == 1


def test_a_failing_preview_opens_a_breaker_of_its_own_not_the_tools(author, settings):
    from plans.guards.circuits import CIRCUIT_OPEN_MESSAGE, circuit_admits

    settings.AGENTSITE_BREAKER_FAILURES = 2
    for _ in range(3):
        run, _ = start(author, tool="ship_broken")

    assert waiting(run).preview == {"error": CIRCUIT_OPEN_MESSAGE}
    assert preview_tools.preview_calls["ship_broken"] == 2  # not called while open
    assert circuit_admits("ship_broken")  # the tool itself is not held back by it


def start_round(author, tool, count):
    """A run of `count` destructive calls in one round (each to its own item: one call does not
    change another's target), parked for their approvals."""
    steps = [
        {"id": i, "tool": tool, "args": {"item": f"item{i}", "quantity": 1}, "depends_on": []}
        for i in range(1, count + 1)
    ]
    run = run_create(author=author, goal_text=f"ship {count}", plan_data={"steps": steps})
    return run, advance_run(run.pk)


def stock_items(count):
    preview_tools.reset(**{f"item{i}": 10 for i in range(1, count + 1)})


def test_a_rounds_requests_take_their_previews_at_once(author):
    stock_items(3)
    preview_tools.arm_together(3)

    run, status = start_round(author, "ship_together", 3)

    assert status == Run.Status.AWAITING_APPROVAL
    previews = ToolPreview.objects.filter(run=run, purpose="request")
    assert [p.error for p in previews] == ["", "", ""]
    assert sorted(a.preview["target_version"] for a in Approval.objects.filter(run=run)) == [
        "item1@1",
        "item2@1",
        "item3@1",
    ]


def test_a_rounds_launch_re_checks_run_at_once(author, reviewer):
    stock_items(3)
    run, _ = start_round(author, "ship_together", 3)
    for approval in Approval.objects.filter(run=run, decision="pending"):
        approve(approval, reviewer)
    preview_tools.arm_together(3)  # for the re-checks just before the calls

    assert advance_run(run.pk) == Run.Status.COMPLETED
    launched = ToolPreview.objects.filter(run=run, purpose="launch")
    assert [p.error for p in launched] == ["", "", ""]
    assert len(preview_tools.shipped) == 3
