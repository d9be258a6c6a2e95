"""The inbox and the run page under approval rules: the rule on each card, "1 of 2 approvals",
routed requests read-only for others, and a decision bound to the arguments the card showed."""

import re

import pytest
from django.urls import reverse

from plans.models import Approval, ApprovalVote, Run
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests.reviewing import decider, refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def demo_rules(settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]


def refund(author, order_id, amount):
    plan = refund_plan(order_id, amount, reason="returned")
    approval = waiting_approval(author, plan, goal=f"Refund {order_id}")
    return Run.objects.get(pk=approval.run_id), approval


def post(client, approval, decision, *, seen, headers=HTMX, **extra):
    data = {
        "group": f"{approval.run_id}-{approval.step.round}",
        "approval": [approval.pk],
        "decision": decision,
        "reason": extra.pop("reason", ""),
        **extra,
    }
    if seen is not None:
        data[f"seen-{approval.pk}"] = seen
    return client.post(reverse("plans:decide"), data, headers=headers)


def test_the_card_carries_the_hash_of_the_arguments_it_shows(client, author, reviewer):
    _, approval = refund(author, "A-1001", 2000)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert f'name="seen-{approval.pk}" value="{approval.args_sha256}"' in page


def test_a_post_that_does_not_say_which_arguments_it_saw_decides_nothing(client, author, reviewer):
    _, approval = refund(author, "A-1001", 2000)
    client.force_login(reviewer)

    response = post(client, approval, "approve", seen=None)

    assert response.status_code == 409
    assert "not the ones you saw" in response.content.decode()
    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.PENDING


def test_a_stale_post_is_refused_and_the_card_shows_the_new_arguments_and_what_changed(
    client, author, reviewer, django_user_model
):
    _, approval = refund(author, "A-1002", 60000)
    client.force_login(reviewer)
    shown = approval.args_sha256  # what bob's card showed
    erin = decider(django_user_model, "erin")
    edited = {"order_id": "A-1002", "amount_inr": 55000, "reason": "one item kept"}
    approval_decide(approval=approval, reviewer=erin, approve=True, edited_args=edited)

    response = post(client, approval, "approve", seen=shown)

    html = response.content.decode()
    assert response.status_code == 409
    assert "The arguments changed since you loaded this card (erin edited them)" in html
    assert "<code>amount_inr</code> 60000 → 55000" in html
    assert "&quot;amount_inr&quot;: 55000" in html  # the edit box holds the new arguments
    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.PENDING
    assert list(ApprovalVote.objects.values_list("reviewer__username", flat=True)) == ["erin"]


def test_without_javascript_a_stale_post_shows_the_inbox_with_what_changed(
    client, author, reviewer, django_user_model
):
    _, approval = refund(author, "A-1002", 60000)
    client.force_login(reviewer)
    shown = approval.args_sha256
    edited = {"order_id": "A-1002", "amount_inr": 55000, "reason": "one item kept"}
    approval_decide(
        approval=approval,
        reviewer=decider(django_user_model, "erin"),
        approve=True,
        edited_args=edited,
    )

    response = post(client, approval, "approve", seen=shown, headers={})

    assert response.status_code == 409
    assert "<code>amount_inr</code> 60000 → 55000" in response.content.decode()


def test_a_two_person_request_shows_its_progress_and_who_approved(
    client, author, reviewer, django_user_model
):
    run, approval = refund(author, "A-1002", 60000)
    client.force_login(reviewer)
    page = client.get(reverse("plans:inbox")).content.decode()
    assert "rule large_refund_needs_two_reviewers" in page
    assert '<span class="approvals-progress">0 of 2 approvals</span>' in page

    response = post(client, approval, "approve", seen=approval.args_sha256)

    html = response.content.decode()
    assert '<span class="approvals-progress">1 of 2 approvals</span>' in html
    assert "(approved by bob)" in html
    run_page = client.get(reverse("plans:run_detail", args=[run.pk]) + "?step=1").content.decode()
    assert "1 of 2 approvals" in run_page  # the step panel and the graph's node
    assert re.search(r"destructive: 1 of 2 approvals", run_page)
    assert "bob</b> approved step 1" in run_page  # the timeline


def test_the_no_javascript_message_says_the_approval_counted(client, author, reviewer):
    _, approval = refund(author, "A-1002", 60000)
    client.force_login(reviewer)

    response = post(client, approval, "approve", seen=approval.args_sha256, headers={})

    assert response.status_code == 302
    page = client.get(reverse("plans:inbox")).content.decode()
    assert "Your approval of step 1 counts: 1 of 2 approvals." in page


def test_a_request_routed_to_finance_is_read_only_for_a_plain_reviewer(
    client, author, reviewer, django_user_model
):
    _, approval = refund(author, "A-1004", 800)
    client.force_login(reviewer)

    mine = client.get(reverse("plans:inbox")).content.decode()
    groups = client.get(reverse("plans:inbox"), {"scope": "groups"}).content.decode()
    page = client.get(reverse("plans:inbox"), {"scope": "all"}).content.decode()
    assert f'id="approval-{approval.pk}"' not in mine  # not in a plain reviewer's queue
    assert f'id="approval-{approval.pk}"' not in groups
    assert client.get(reverse("plans:pending_count")).content.decode().count('data-count="0"')
    assert "routed to <b>finance</b>" in page
    assert "Only members of finance may decide it." in page
    assert 'type="checkbox" name="approval"' not in page
    response = post(client, approval, "approve", seen=approval.args_sha256)
    assert response.status_code == 403
    assert "only their members may decide it" in response.content.decode()

    client.force_login(decider(django_user_model, "fiona", "finance"))
    for scope in ("mine", "groups", "all"):
        page = client.get(reverse("plans:inbox"), {"scope": scope}).content.decode()
        assert 'type="checkbox" name="approval"' in page, scope
    assert 'data-count="1"' in client.get(reverse("plans:pending_count")).content.decode()


def test_the_timeline_says_which_rule_approved_a_call(client, author):
    run, approval = refund(author, "A-1001", 800)
    client.force_login(author)

    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()

    assert run.status == Run.Status.COMPLETED
    version = f'<span class="muted">(version {approval.rule_version})</span>'
    assert f"<b>rule small_refund_on_delivered_order</b> {version} approved" in page
    assert "approved by rule small_refund_on_delivered_order" in page  # the graph's node


def test_a_step_a_replan_changed_says_what_it_replaced_and_at_whose_request(
    client, author, reviewer, settings
):
    from plans.llm.offline import REFUND_GOAL
    from plans.models import Plan
    from plans.services.changes import changes_request
    from plans.services.plans import plan_decide

    settings.AGENTSITE_MODEL_BACKEND = "offline"
    settings.AGENTSITE_APPROVAL_RULE_MODULES = []
    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    first = Approval.objects.get(run=run, tool="issue_refund")
    changes_request(approvals=[first], reviewer=reviewer, instructions="refund 500, not 2499")
    plan_decide(plan=Plan.objects.get(run=run, version=2), reviewer=reviewer, approve=True)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    note = page[page.index('class="small replan-note"') :][:900]
    assert "Plan v2 replaced v1 at a reviewer's request" in note
    assert "<b>bob</b> asked “refund 500, not 2499” on step 2" in note
    assert "In v1 this step was <code>issue_refund</code>" in note
    assert "&quot;amount_inr&quot;: 2499" in note


def test_an_author_finds_their_question_under_an_honest_heading_and_in_their_badge(client, author):
    plan = {
        "steps": [
            {
                "id": 1,
                "tool": "ask_human",
                "args": {"question": "Which size?", "choices": ["S", "M"]},
                "depends_on": [],
            }
        ]
    }
    run = run_create(author=author, goal_text="Order a shirt", plan_data=plan)
    advance_run(run.pk)
    client.force_login(author)

    page = client.get(reverse("plans:inbox")).content.decode()
    badge = client.get(reverse("plans:pending_count")).content.decode()

    assert "<h1>Questions and waiting steps</h1>" in page
    assert "Destructive steps waiting" not in page
    assert "Which size?" in page
    assert 'data-count="1"' in badge


def test_a_claimed_request_shows_its_claimer_to_another_reviewer_who_may_take_it_over(
    client, author, reviewer, django_user_model
):
    _, approval = refund(author, "A-1001", 2000)
    client.force_login(reviewer)
    page = client.get(reverse("plans:inbox")).content.decode()
    assert "I'm on it</button>" in page

    claimed = client.post(reverse("plans:approval_claim", args=[approval.pk]), headers=HTMX)
    assert claimed.status_code == 200
    assert "Claimed by <b>bob</b>" in claimed.content.decode()

    client.force_login(decider(django_user_model, "erin"))
    page = client.get(reverse("plans:inbox")).content.decode()
    assert "Claimed by <b>bob</b>" in page and "Take over the claim</button>" in page
    refused = post(client, approval, "approve", seen=approval.args_sha256)
    assert refused.status_code == 409 and "bob claimed this" in refused.content.decode()

    taken = client.post(
        reverse("plans:approval_claim", args=[approval.pk]), {"take_over": "1"}, headers=HTMX
    )
    assert "Claimed by <b>erin</b>" in taken.content.decode()
    run_page = client.get(reverse("plans:run_detail", args=[approval.run_id])).content.decode()
    assert "<b>erin</b> took over <b>bob</b>" in run_page
