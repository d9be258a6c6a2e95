"""Refusals carry a code that names the rule; each edge maps codes to statuses in one table."""

import pytest
from django.contrib.auth.models import Group

from plans.api.errors import REFUSALS, refusal_error
from plans.api.tokens import scoped_user
from plans.models import Approval, Plan, Run
from plans.roles import may_decide, roles_ensure
from plans.runtime.advance import advance_run
from plans.services.approvals import ApprovalRefused, Seen, approval_decide, approvals_decide_seen
from plans.services.changes import changes_request
from plans.services.plans import plan_decide, plan_decide_seen
from plans.services.refusals import Refused, text_clean
from plans.services.runs import GoalRejected, run_create
from plans.views.refusals import refusal_status
from tests.reviewing import decider
from tests.services.test_approvals import REFUND_PLAN, start_refund

pytestmark = pytest.mark.django_db(transaction=True)


def refusal(call) -> Refused:
    with pytest.raises(Refused) as raised:
        call()
    return raised.value


def test_each_refused_decision_names_its_rule(author, reviewer, outsider, django_user_model):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)
    own = decider(django_user_model, "dana")
    own_run = start_refund(own)

    assert refusal(
        lambda: approval_decide(approval=approval, reviewer=None, approve=True)
    ).code == ("signed_out")
    assert refusal(
        lambda: approval_decide(approval=approval, reviewer=outsider, approve=True)
    ).code == ("not_a_reviewer")
    no_reason = refusal(
        lambda: approval_decide(approval=approval, reviewer=reviewer, approve=False)
    )
    assert (no_reason.code, str(no_reason)) == (
        "reason_required",
        "A reason is required to reject.",
    )
    assert refusal(
        lambda: approval_decide(approval=approval, reviewer=reviewer, approve=True, reason="\x00")
    ).code == ("text_invalid")
    assert refusal(
        lambda: approval_decide(
            approval=approval, reviewer=reviewer, approve=True, edited_args={"order_id": 5}
        )
    ).code == ("args_invalid")
    assert refusal(
        lambda: approval_decide(
            approval=Approval.objects.get(run=own_run), reviewer=own, approve=True
        )
    ).code == ("four_eyes")
    approval_decide(approval=approval, reviewer=reviewer, approve=False, reason="no")
    assert refusal(
        lambda: approval_decide(approval=approval, reviewer=reviewer, approve=True)
    ).code == ("already_decided")


def test_a_decision_on_arguments_other_than_those_seen_is_refused_as_stale(author, reviewer):
    run = start_refund(author)
    approval = Approval.objects.get(run=run)

    stale = refusal(
        lambda: approvals_decide_seen(
            seen=[Seen(approval.pk, "0" * 64)], reviewer=reviewer, approve=True
        )
    )
    twice = refusal(
        lambda: approvals_decide_seen(
            seen=[Seen(approval.pk, approval.args_sha256)] * 2, reviewer=reviewer, approve=True
        )
    )
    missing = refusal(
        lambda: approvals_decide_seen(
            seen=[Seen(approval.pk + 99, "0" * 64)], reviewer=reviewer, approve=True
        )
    )

    assert (stale.code, twice.code, missing.code) == ("stale_hash", "listed_twice", "not_found")
    assert Approval.objects.get(pk=approval.pk).decision == "pending"


def test_plan_decisions_and_requests_for_changes_name_their_rule(author, reviewer, settings):
    settings.AGENTSITE_REQUIRE_PLAN_APPROVAL = True
    run = run_create(author=author, goal_text="Refund order A-1001", plan_data=REFUND_PLAN)
    advance_run(run.pk)
    run.refresh_from_db()
    plan = Plan.objects.get(run=run)

    stale = refusal(lambda: plan_decide_seen(run=run, version=7, reviewer=reviewer, approve=True))
    assert stale.code == "stale_plan"
    unreasoned = refusal(lambda: plan_decide(plan=plan, reviewer=reviewer, approve=False))
    assert str(unreasoned) == "A reason is required to reject a plan."
    plan_decide(plan=plan, reviewer=reviewer, approve=True)
    assert refusal(lambda: plan_decide(plan=plan, reviewer=reviewer, approve=True)).code == (
        "already_decided"
    )
    advance_run(run.pk)
    approval = Approval.objects.get(run=run)
    empty = refusal(
        lambda: changes_request(approvals=[approval], reviewer=reviewer, instructions=" ")
    )
    assert empty.code == "text_invalid"


def test_who_may_create_a_run_is_decided_when_it_is_created(author, outsider):
    roles_ensure()
    author.groups.add(Group.objects.get(name="authors"))
    as_token = scoped_user(type(author).objects.get(pk=author.pk), ["reviewers"])

    for who, via in ((outsider, "web"), (outsider, "api"), (as_token, "api")):
        refused = refusal(lambda who=who, via=via: run_create(author=who, goal_text="hi", via=via))
        assert isinstance(refused, GoalRejected) and refused.code == "not_an_author"
    assert not Run.objects.exists()
    assert run_create(author=outsider, goal_text="hi", via="cli").pk  # the operator's shell
    assert run_create(author=type(author).objects.get(pk=author.pk), goal_text="hi", via="web")


def test_the_edges_map_codes_to_statuses_by_table_not_by_message():
    four_eyes = ApprovalRefused("four_eyes", "any words at all")
    invalid = ApprovalRefused("text_invalid", "A reason is required to reject.")

    assert (refusal_error(four_eyes).status, refusal_error(four_eyes).code) == (403, "four_eyes")
    assert (refusal_error(invalid).status, refusal_error(invalid).code) == (422, "decision_invalid")
    assert refusal_error(ApprovalRefused("already_decided", "x")).code == "decision_refused"
    assert REFUSALS["not_a_reviewer"][2] == "Only reviewers may decide (token role: reviewers)."
    assert [
        refusal_status(ApprovalRefused(code, "x")) for code in ("not_a_reviewer", "four_eyes")
    ] == [
        403,
        409,
    ]
    assert refusal_status(GoalRejected("goal_invalid", "x")) == 422


def test_may_decide_is_the_reviewer_permission(reviewer, outsider):
    assert may_decide(reviewer) and not may_decide(outsider) and not may_decide(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("   ", "empty!"),
        ("x" * 6, "6 over 5"),
        (" a\x00 ", "The note holds text that cannot be stored: a NUL character"),
    ],
)
def test_typed_text_is_trimmed_and_refused_with_the_callers_words(text, message):
    with pytest.raises(ApprovalRefused, match=message) as raised:
        text_clean(
            text,
            refused=ApprovalRefused,
            code="text_invalid",
            holds="The note holds",
            empty="empty!",
            max_chars=5,
            too_long="{length} over {limit}",
        )
    assert raised.value.code == "text_invalid"
    assert text_clean("  ok ", refused=ApprovalRefused, code="x", holds="-") == "ok"
