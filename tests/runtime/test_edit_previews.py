"""A reviewer's edit of a destructive call's arguments has its own preview: taken when the edit
is approved (as a request's is: tool threads, the hook's limit and breaker, recorded), shown
before it binds, and the one the call is held to at launch. Tools from tests.preview_tools."""

import pytest
from django.contrib.auth.models import Permission

from plans.engine import args_sha256
from plans.models import Approval, Run, RunEvent, Step, ToolCall, ToolPreview
from plans.runtime.advance import advance_run
from plans.services.approvals import ApprovalRefused, PreviewUnseen, approval_decide
from plans.services.runs import run_create
from tests import preview_tools
from tests.reviewing import shown_token

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def preview_tool_module(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.preview_tools"]
    preview_tools.reset(widget=10, gadget=5)
    yield
    preview_tools.hang.set()  # lets a hanging preview's thread go


def start(author, tool="ship"):
    steps = [{"id": 1, "tool": tool, "args": {"item": "widget", "quantity": 3}}]
    run = run_create(author=author, goal_text=f"ship with {tool}", plan_data={"steps": steps})
    advance_run(run.pk)
    return run


def waiting(run):
    return Approval.objects.get(run=run, decision="pending")


def edit(approval, reviewer, args, **seen):
    return approval_decide(
        approval=approval, reviewer=reviewer, approve=True, edited_args=args, resume=False, **seen
    )


GADGETS = {"item": "gadget", "quantity": 2}


def test_an_edit_is_previewed_and_the_approval_bound_to_that_preview(author, reviewer):
    run = start(author)
    decided = edit(waiting(run), reviewer, GADGETS)

    assert decided.decision == "approved"
    assert decided.preview["summary"] == "Ship 2 of gadget; 5 in stock"
    assert decided.target_version == "gadget@1"
    row = ToolPreview.objects.get(run=run, purpose="edit")
    assert row.args == GADGETS and row.error == "" and row.preview == decided.preview
    assert row.args_sha256 == decided.args_sha256 == args_sha256("ship", GADGETS)
    event = RunEvent.objects.get(run=run, kind="approval_decided").payload
    assert event["edited"] and event["preview"] == decided.preview

    assert advance_run(run.pk) == Run.Status.COMPLETED
    assert preview_tools.shipped == [("gadget", 1, Step.objects.get(plan__run=run).idempotency_key)]
    launch = ToolPreview.objects.get(run=run, purpose="launch")
    assert launch.args == GADGETS  # the call's own target, re-checked
    assert launch.args_sha256 == decided.args_sha256


def test_an_edited_calls_target_changing_before_launch_makes_it_stale(author, reviewer):
    run = start(author)
    edit(waiting(run), reviewer, GADGETS)
    preview_tools.restock("gadget", 4)  # after the edit's preview, before the call

    assert advance_run(run.pk) == Run.Status.AWAITING_APPROVAL
    assert preview_tools.shipped == []
    assert not ToolCall.objects.filter(run=run).exists()
    stale = Approval.objects.get(run=run, decision="stale")
    fresh = waiting(run)
    assert fresh.supersedes == stale and fresh.args == GADGETS
    assert fresh.preview["summary"] == "Ship 2 of gadget; 9 in stock"
    assert fresh.changes == ["In stock: 5 → 9", "Left after: 3 → 7"]
    payload = RunEvent.objects.get(run=run, kind="approval_stale").payload
    assert (payload["approved_version"], payload["current_version"]) == ("gadget@1", "gadget@2")


def test_the_target_the_run_asked_about_no_longer_holds_an_edited_call_back(author, reviewer):
    run = start(author)
    edit(waiting(run), reviewer, GADGETS)
    preview_tools.restock("widget", 4)  # the call no longer touches widgets

    assert advance_run(run.pk) == Run.Status.COMPLETED
    assert [item for item, _, _ in preview_tools.shipped] == ["gadget"]


def test_an_edit_whose_preview_hangs_shows_no_preview_and_can_still_be_decided(author, reviewer):
    run = start(author, tool="ship_hanging")
    approval = waiting(run)

    with pytest.raises(PreviewUnseen) as unseen:
        edit(approval, reviewer, GADGETS, seen_preview=shown_token(approval))
    (shown,) = unseen.value.previews
    assert shown.preview == {"error": "timed out after 0.2s"}  # "no preview: ..." on the card
    assert waiting(run).args == approval.requested_args  # nothing decided

    decided = edit(waiting(run), reviewer, GADGETS, seen_preview=shown.token)
    assert decided.decision == "approved" and decided.args == GADGETS
    assert decided.preview == {"error": "timed out after 0.2s"}
    assert decided.target_version is None  # a failed preview confirms no target
    edits = ToolPreview.objects.filter(run=run, purpose="edit")
    assert [row.error for row in edits] == ["timed out after 0.2s"] * 2
    assert advance_run(run.pk) == Run.Status.COMPLETED
    assert [item for item, _, _ in preview_tools.shipped] == ["gadget"]


def test_an_edit_is_refused_until_its_reviewer_was_shown_its_preview(author, reviewer):
    run = start(author)
    approval = waiting(run)

    with pytest.raises(PreviewUnseen) as unseen:
        edit(approval, reviewer, GADGETS, seen_preview=shown_token(approval))
    assert unseen.value.code == "preview_unseen"
    (shown,) = unseen.value.previews
    assert shown.args == GADGETS and shown.edited
    assert shown.preview["summary"] == "Ship 2 of gadget; 5 in stock"
    assert not RunEvent.objects.filter(run=run, kind="approval_decided").exists()
    assert ToolPreview.objects.filter(run=run, purpose="edit").count() == 1  # recorded anyway

    preview_tools.restock("gadget", 1)  # the target moves while the reviewer reads
    with pytest.raises(PreviewUnseen) as again:
        edit(approval, reviewer, GADGETS, seen_preview=shown.token)
    (now,) = again.value.previews
    assert now.preview["summary"] == "Ship 2 of gadget; 6 in stock"

    decided = edit(approval, reviewer, GADGETS, seen_preview=now.token)
    assert decided.decision == "approved" and decided.target_version == "gadget@2"


def decider(django_user_model, name):
    user = django_user_model.objects.create_user(name)
    user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    return django_user_model.objects.get(pk=user.pk)


@pytest.fixture
def two_person_rule(settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.two_for_shipping"]


def test_under_a_two_person_rule_the_next_approver_decides_on_the_edits_preview(
    two_person_rule, author, reviewer, django_user_model
):
    run = start(author)
    edit(waiting(run), reviewer, GADGETS)

    pending = waiting(run)
    assert pending.approvals_counted == 1  # the edit counts as its reviewer's approval
    assert pending.preview["summary"] == "Ship 2 of gadget; 5 in stock"  # what erin is shown
    erin = decider(django_user_model, "erin")
    decided = approval_decide(
        approval=pending,
        reviewer=erin,
        approve=True,
        resume=False,
        seen_sha256=pending.args_sha256,
        seen_preview=shown_token(pending),
    )
    assert decided.decision == "approved" and decided.target_version == "gadget@1"
    assert advance_run(run.pk) == Run.Status.COMPLETED


def test_an_approval_of_a_preview_since_replaced_is_refused_and_no_longer_counts(
    two_person_rule, author, reviewer, django_user_model
):
    run = start(author)
    first = waiting(run)
    card = shown_token(first)  # what erin's card shows: widgets, as the run asked
    approval_decide(approval=first, reviewer=reviewer, approve=True, resume=False)
    frank = decider(django_user_model, "frank")
    edit(waiting(run), frank, GADGETS)
    preview_tools.restock("widget", 1)
    # Back to widgets: the same arguments as bob approved, but not the same target.
    edit(waiting(run), frank, first.requested_args)

    pending = waiting(run)
    assert pending.args_sha256 == first.args_sha256
    assert pending.target_version == "widget@2"
    assert pending.approvals_counted == 1  # frank's: bob approved widget@1
    erin = decider(django_user_model, "erin")
    with pytest.raises(ApprovalRefused) as refused:
        approval_decide(
            approval=pending, reviewer=erin, approve=True, resume=False, seen_preview=card
        )
    assert refused.value.code == "preview_unseen"
    # Bob may approve what is now shown: his earlier vote was for another target version.
    decided = approval_decide(
        approval=pending,
        reviewer=reviewer,
        approve=True,
        resume=False,
        seen_preview=shown_token(pending),
    )
    assert decided.decision == "approved" and decided.target_version == "widget@2"
