"""The approvals inbox: what waits, deciding in place, edits, refusals, and the nav badge."""

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from plans.llm.offline import PRICE_GOAL, REFUND_GOAL, TRIP_GOAL
from plans.models import Approval, Run, Step
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from plans.templatetags.agentsite import pretty_json

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    settings.AGENTSITE_FOUR_EYES = True


def parked_run(author, goal):
    run = run_create(author=author, goal_text=goal)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL
    return run


def decide(client, approvals, decision, reason="", **edits):
    first = approvals[0]
    data = {
        "group": f"{first.run_id}-{first.step.round}",
        "approval": [a.pk for a in approvals],
        "decision": decision,
        "reason": reason,
        # The hash of the arguments each card showed, as the form carries it.
        **{f"seen-{a.pk}": a.args_sha256 for a in approvals},
    }
    data.update(edits)
    return client.post(reverse("plans:decide"), data, headers=HTMX)


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("plans:inbox"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_shows_the_goal_tool_exact_arguments_inputs_author_and_wait(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert REFUND_GOAL in page
    assert "<code>issue_refund</code>" in page
    assert "&quot;amount_inr&quot;: 2499" in page  # resolved, not the {{1}} placeholder
    assert "Step 1 · <code>order_total</code> returned" in page
    assert "submitted by <b>alice</b>" in page
    assert "asked just now" in page  # not "waiting 0 minutes"
    assert f'id="group-{run.pk}-2"' in page
    assert ">Approve</button>" in page and ">Reject</button>" in page


def test_a_rounds_destructive_steps_are_decided_with_one_form(client, author, reviewer):
    run = parked_run(author, TRIP_GOAL)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert page.count('<form id="group-') == 1
    assert page.count('type="checkbox" name="approval"') == 2
    assert "book_flight" in page and "book_hotel" in page
    assert f'id="group-{run.pk}-3"' in page


def test_the_requests_that_fall_due_first_come_first(client, author, reviewer, settings):
    older = parked_run(author, REFUND_GOAL)
    newer = parked_run(author, TRIP_GOAL)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()
    assert page.index(f'id="group-{older.pk}-') < page.index(f'id="group-{newer.pk}-')

    # A rule's shorter time limit puts the newer one first.
    Approval.objects.filter(run=newer).update(expires_at=timezone.now() + timedelta(minutes=5))
    page = client.get(reverse("plans:inbox")).content.decode()
    assert page.index(f'id="group-{newer.pk}-') < page.index(f'id="group-{older.pk}-')
    assert "expires in 4\xa0minutes" in page  # timeuntil joins with a no-break space


def test_approving_the_round_together_lets_the_run_finish(client, author, reviewer):
    run = parked_run(author, TRIP_GOAL)
    bookings = list(Approval.objects.filter(run=run))
    client.force_login(reviewer)

    response = decide(client, bookings, "approve")

    html = response.content.decode()
    run.refresh_from_db()
    assert response.status_code == 200
    assert html.lstrip().startswith(f'<form id="group-{run.pk}-3"')
    assert html.count("approved by bob") == 2
    assert run.status == Run.Status.COMPLETED
    assert {a.decision for a in Approval.objects.filter(run=run)} == {"approved"}


def test_a_rejection_needs_a_reason_and_changes_nothing_without_one(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)

    response = decide(client, [approval], "reject", reason="  ")

    approval.refresh_from_db()
    assert response.status_code == 422
    assert "A reason is required to reject." in response.content.decode()
    assert approval.decision == Approval.Decision.PENDING


def test_a_rejection_blocks_the_step_skips_its_dependants_and_reaches_the_answer(
    client, author, reviewer
):
    run = parked_run(author, REFUND_GOAL)
    reason = "the customer was refunded by phone"
    client.force_login(reviewer)

    response = decide(client, [Approval.objects.get(run=run)], "reject", reason=reason)

    run.refresh_from_db()
    steps = {s.step_id: s.status for s in Step.objects.filter(plan__run=run)}
    assert response.status_code == 200
    assert "rejected by bob" in response.content.decode()
    assert run.status == Run.Status.BLOCKED
    assert steps == {1: "succeeded", 2: "blocked", 3: "skipped"}
    assert reason in run.answer


def test_a_reviewer_may_edit_the_arguments_and_both_versions_are_kept(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    edited = {**approval.requested_args, "amount_inr": 1000}
    client.force_login(reviewer)
    draft = {f"args-{approval.pk}": json.dumps(edited)}

    # First the edit's own preview is shown, then the approval is bound to it.
    shown = decide(client, [approval], "approve", **draft)
    assert shown.status_code == 409
    assert "Refund ₹1,000 of ₹2,499" in shown.content.decode()
    token = re.search(rf'name="preview-{approval.pk}" value="(\w+)"', shown.content.decode())
    draft[f"preview-{approval.pk}"] = token[1]
    response = decide(client, [approval], "approve", **draft)

    approval.refresh_from_db()
    assert response.status_code == 200
    assert approval.args["amount_inr"] == 1000
    assert approval.requested_args["amount_inr"] == 2499
    assert "Arguments as approved (edited)" in response.content.decode()
    refund = Step.objects.get(plan__run=run, step_id=2)
    assert refund.status == Step.Status.SUCCEEDED


def test_arguments_that_are_not_json_are_refused_with_a_clear_message(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)

    response = decide(client, [approval], "approve", **{f"args-{approval.pk}": '{"order_id": '})

    html = response.content.decode()
    approval.refresh_from_db()
    assert response.status_code == 422
    assert "The arguments of step 2 (issue_refund) are not valid JSON" in html
    assert "{&quot;order_id&quot;: </textarea>" in html  # the draft is kept for fixing
    assert approval.decision == Approval.Decision.PENDING


@pytest.mark.parametrize(
    ("draft", "error"),
    [
        ("[" * 100_000, "are nested too deeply to read"),
        (
            '{"order_id": ' + "9" * 5000 + "}",
            "cannot be read: an integer has more than 4,300 digits",
        ),
    ],
)
def test_arguments_json_cannot_read_are_refused_like_invalid_json(
    client, author, reviewer, draft, error
):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)

    response = decide(client, [approval], "approve", **{f"args-{approval.pk}": draft})

    html = response.content.decode()
    approval.refresh_from_db()
    assert response.status_code == 422
    assert f"The arguments of step 2 (issue_refund) {error}. Nothing was decided." in html
    assert approval.decision == Approval.Decision.PENDING


def test_arguments_json_cannot_read_are_refused_without_javascript_too(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)
    first = approval
    data = {
        "group": f"{first.run_id}-{first.step.round}",
        "approval": [approval.pk],
        "decision": "approve",
        f"args-{approval.pk}": "[" * 100_000,
    }

    response = client.post(reverse("plans:decide"), data, follow=True)

    approval.refresh_from_db()
    html = response.content.decode()
    assert response.status_code == 422  # the inbox again, at once: no redirect to lose the draft
    assert "are nested too deeply to read" in html
    assert "[" * 1000 in html  # what the reviewer typed is still in the edit box
    assert approval.decision == Approval.Decision.PENDING


def test_a_draft_with_a_typo_is_kept_without_javascript(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)
    draft = '{"order_id": "A-1001", "amount_inr": 2000, "reason": "damaged item",}'
    data = {
        "group": f"{approval.run_id}-{approval.step.round}",
        "approval": [approval.pk],
        "decision": "approve",
        f"args-{approval.pk}": draft,
    }

    response = client.post(reverse("plans:decide"), data)

    html = response.content.decode()
    assert response.status_code == 422
    assert "is not valid JSON" in html or "are not valid JSON" in html
    assert escape(draft) in html
    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.PENDING


def test_arguments_the_tool_does_not_accept_are_refused_by_the_service(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)

    response = decide(
        client, [approval], "approve", **{f"args-{approval.pk}": '{"order_id": "A-1001"}'}
    )

    approval.refresh_from_db()
    assert response.status_code == 409
    assert "Step 2 (issue_refund): the edited arguments are invalid" in response.content.decode()
    assert approval.decision == Approval.Decision.PENDING


def test_a_step_already_decided_cannot_be_decided_again(
    client, author, reviewer, django_user_model
):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    second = django_user_model.objects.create_user("dave", password="dave-pass-123")
    second.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    client.force_login(reviewer)
    decide(client, [approval], "reject", reason="not this one")
    client.force_login(second)

    response = decide(client, [approval], "approve")

    approval.refresh_from_db()
    assert response.status_code == 409
    assert "already rejected by bob" in response.content.decode()
    assert approval.decision == Approval.Decision.REJECTED


def test_someone_without_the_permission_is_refused_and_nothing_changes(client, author, outsider):
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(outsider)

    response = decide(client, [approval], "approve")

    html = response.content.decode()
    approval.refresh_from_db()
    assert response.status_code == 403
    assert "You do not have permission to approve or reject" in html
    assert "amount_inr" not in html  # and sees nothing of a run that is not theirs
    assert approval.decision == Approval.Decision.PENDING


def test_the_goals_author_cannot_approve_it_under_four_eyes(client, reviewer):
    run = parked_run(reviewer, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)

    mine = client.get(reverse("plans:inbox")).content.decode()
    page = client.get(reverse("plans:inbox"), {"scope": "all"}).content.decode()
    response = decide(client, [approval], "approve")

    approval.refresh_from_db()
    assert f'id="group-{run.pk}-' not in mine  # not in their queue: they may not decide it
    assert "under the four-eyes rule another reviewer must decide it" in page
    # Request changes, Reject and Approve alike
    assert page.count(f'disabled aria-describedby="four-eyes-{run.pk}-') == 3
    assert response.status_code == 409
    assert "Four-eyes rule" in response.content.decode()
    assert approval.decision == Approval.Decision.PENDING


def test_another_reviewers_buttons_stay_live_under_four_eyes(client, author, reviewer):
    parked_run(author, REFUND_GOAL)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "four-eyes rule" not in page
    assert "disabled" not in page


def test_without_four_eyes_the_authors_buttons_are_live(client, reviewer, settings):
    settings.AGENTSITE_FOUR_EYES = False
    parked_run(reviewer, REFUND_GOAL)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "disabled" not in page


def test_without_javascript_a_decision_redirects_back_with_its_outcome(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    client.force_login(reviewer)

    approval = Approval.objects.get(run=run)
    response = client.post(
        reverse("plans:decide"),
        {
            "group": f"{run.pk}-2",
            "approval": approval.pk,
            "decision": "approve",
            f"seen-{approval.pk}": approval.args_sha256,
        },
        follow=True,
    )

    assert response.redirect_chain[-1][0] == reverse("plans:inbox")
    assert "Approved 1 step." in response.content.decode()


def test_without_javascript_a_refusal_with_nothing_typed_redirects_with_the_error(
    client, author, reviewer
):
    run = parked_run(author, REFUND_GOAL)
    client.force_login(reviewer)
    approval = Approval.objects.get(run=run)
    as_shown = pretty_json(approval.args).replace("\n", "\r\n")  # as a browser sends it

    response = client.post(
        reverse("plans:decide"),
        {
            "group": f"{run.pk}-2",
            "approval": approval.pk,
            "decision": "reject",
            f"args-{approval.pk}": as_shown,
        },
        follow=True,
    )

    assert response.redirect_chain[-1][0] == reverse("plans:inbox")
    assert "A reason is required to reject." in response.content.decode()


def test_without_javascript_a_refusal_keeps_the_reason_typed(client, author, settings):
    author.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    run = parked_run(author, REFUND_GOAL)
    approval = Approval.objects.get(run=run)
    client.force_login(author)  # a reviewer too, but this is their own goal: four-eyes refuses

    response = client.post(
        reverse("plans:decide"),
        {
            "group": f"{run.pk}-2",
            "approval": approval.pk,
            "decision": "reject",
            "reason": "not this customer",
        },
    )

    html = response.content.decode()
    assert response.status_code == 409
    assert "Four-eyes rule" in html and 'value="not this customer"' in html


def test_authors_see_what_waits_on_their_own_runs_without_decide_buttons(
    client, author, other_author
):
    parked_run(author, REFUND_GOAL)
    parked_run(other_author, TRIP_GOAL)
    client.force_login(author)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert REFUND_GOAL in page
    assert TRIP_GOAL not in page
    assert ">Approve</button>" not in page
    assert "Only reviewers can decide them." in page


def test_finished_runs_leave_the_inbox(client, author, reviewer):
    run = parked_run(author, REFUND_GOAL)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "Nothing is waiting" in page


def test_the_nav_badge_counts_what_waits_for_reviewers(client, author, reviewer):
    parked_run(author, TRIP_GOAL)
    client.force_login(reviewer)

    page = client.get(reverse("plans:new_goal")).content.decode()
    badge = client.get(reverse("plans:pending_count")).content.decode()

    assert 'ws-connect="/ws/approvals/"' in page
    assert '<span id="pending-count" class="badge" data-count="2"' in page
    assert badge.startswith('<span id="pending-count" class="badge" data-count="2"')


def test_counts_stop_at_the_cap_and_say_so(client, author, reviewer, monkeypatch):
    monkeypatch.setattr("plans.selectors.approvals.WAITING_COUNT_CAP", 3)
    monkeypatch.setattr("plans.views.approvals.INBOX_RUNS", 1)
    for goal in (TRIP_GOAL, TRIP_GOAL, REFUND_GOAL):
        parked_run(author, goal)
    assert Approval.objects.filter(decision="pending").count() == 5
    client.force_login(reviewer)

    badge = client.get(reverse("plans:pending_count")).content.decode()
    page = client.get(reverse("plans:inbox")).content.decode()

    assert badge.startswith('<span id="pending-count" class="badge" data-count="4"')
    assert ">3+</span>" in badge
    # The first four requests counted, soonest due first, are the two trips' (two each).
    assert "The 1 soonest due of at least 2 runs waiting (more than 3 steps)." in page
    assert 'href="/approvals/?scope=mine&amp;runs=2"' in page


def test_authors_get_a_badge_for_the_questions_they_are_asked(client, author):
    parked_run(author, TRIP_GOAL)
    client.force_login(author)

    page = client.get(reverse("plans:new_goal")).content.decode()

    assert 'ws-connect="/ws/approvals/"' in page
    assert 'class="badge badge-empty" data-count="0"' in page  # their steps wait for others


def test_a_price_run_never_reaches_the_inbox(client, author, reviewer):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)
    client.force_login(reviewer)

    assert "Nothing is waiting" in client.get(reverse("plans:inbox")).content.decode()


def test_deciding_with_nothing_ticked_keeps_the_form_and_says_why(client, author, reviewer):
    run = parked_run(author, TRIP_GOAL)
    client.force_login(reviewer)

    response = client.post(
        reverse("plans:decide"), {"group": f"{run.pk}-3", "decision": "approve"}, headers=HTMX
    )

    html = response.content.decode()
    assert response.status_code == 422
    assert "Tick at least one step to decide." in html
    assert html.count('type="checkbox" name="approval"') == 2  # the form is still there
    assert set(Approval.objects.filter(run=run).values_list("decision", flat=True)) == {"pending"}


def test_only_steps_of_the_named_round_are_decided(client, author, reviewer):
    trip = parked_run(author, TRIP_GOAL)
    refund = parked_run(author, REFUND_GOAL)
    refund_approval = Approval.objects.get(run=refund)
    client.force_login(reviewer)

    client.post(
        reverse("plans:decide"),
        {"group": f"{trip.pk}-3", "approval": [refund_approval.pk], "decision": "approve"},
        headers=HTMX,
    )

    refund_approval.refresh_from_db()
    assert refund_approval.decision == Approval.Decision.PENDING


def test_the_inbox_shows_the_soonest_due_runs_whole_and_the_rest_on_demand(
    client, author, reviewer, monkeypatch
):
    monkeypatch.setattr("plans.views.approvals.INBOX_RUNS", 2)
    runs = [parked_run(author, goal) for goal in (REFUND_GOAL, TRIP_GOAL, REFUND_GOAL)]
    client.force_login(reviewer)

    first = client.get(reverse("plans:inbox")).content.decode()
    more = client.get(reverse("plans:inbox"), {"runs": 4}).content.decode()

    shown = [run for run in runs if f'id="group-{run.pk}-' in first]
    assert shown == runs[:2]  # the two that asked first (due first), each with all its requests
    waiting = Approval.objects.filter(decision="pending").count()
    assert f"The 2 soonest due of 3 runs waiting ({waiting} steps in all)" in first
    assert 'href="/approvals/?scope=mine&amp;runs=4"' in first
    assert all(f'id="group-{run.pk}-' in more for run in runs)
    assert "Show more" not in more
    trip = runs[1]
    trip_requests = Approval.objects.filter(run=trip).values_list("pk", flat=True)
    assert all(f'value="{pk}"' in first for pk in trip_requests)
