"""Run again and fork: new runs linked to their origin, with fresh approvals and no reuse."""

import json

import pytest
from django.urls import reverse

from plans.llm.offline import PRICE_GOAL, REFUND_GOAL
from plans.models import Approval, Plan, Run, Step
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.forks import fork_preview, plan_json_of, run_fork, run_rerun
from plans.services.runs import GoalRejected, run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def author_role(author):
    from django.contrib.auth.models import Permission

    author.user_permissions.add(Permission.objects.get(codename="add_goal"))
    return type(author).objects.get(pk=author.pk)


def finished_refund(author, reviewer):
    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    approval_decide(
        approval=Approval.objects.get(run=run, tool="issue_refund"), reviewer=reviewer, approve=True
    )
    approval_decide(
        approval=Approval.objects.get(run=run, tool="send_email"), reviewer=reviewer, approve=True
    )
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    return run


def test_run_again_plans_the_same_goal_afresh_as_a_linked_run(author_role):
    origin = run_create(author=author_role, goal_text=PRICE_GOAL)
    advance_run(origin.pk)

    again = run_rerun(origin=origin, author=author_role)

    again.refresh_from_db()
    assert again.origin == origin and again.origin_kind == Run.Origin.RERUN
    assert again.goal.text == PRICE_GOAL and again.goal != origin.goal
    assert again.status == Run.Status.COMPLETED  # the inline task ran it
    assert Plan.objects.get(run=again).source == Plan.Source.PLANNER
    assert not Step.objects.filter(plan__run=again).exclude(reused_from="").exists()


def test_a_fork_with_an_edited_argument_asks_a_fresh_approval_and_runs_it(author_role, reviewer):
    origin = finished_refund(author_role, reviewer)
    data = json.loads(plan_json_of(Plan.objects.get(run=origin)))
    data["steps"][1]["args"]["amount_inr"] = 100

    fork = run_fork(origin=origin, author=author_role, plan_text=json.dumps(data), version=1)

    fork.refresh_from_db()
    assert fork.origin == origin and fork.origin_kind == Run.Origin.FORK
    assert fork.origin_plan_version == 1
    assert fork.status == Run.Status.AWAITING_APPROVAL
    fresh = Approval.objects.get(run=fork)
    assert fresh.decision == Approval.Decision.PENDING
    assert fresh.requested_args["amount_inr"] == 100


def test_an_unedited_fork_still_asks_fresh_approvals(author_role, reviewer):
    origin = finished_refund(author_role, reviewer)
    text = plan_json_of(Plan.objects.get(run=origin))

    preview = fork_preview(origin=origin, plan_text=text)
    fork = run_fork(origin=origin, author=author_role, plan_text=text, version=1)

    assert [s.repeats_effect for s in preview.steps] == [False, True, True]
    assert "would repeat an effect of run" in preview.steps[1].fate
    assert Approval.objects.get(run=fork).decision == Approval.Decision.PENDING


def test_an_invalid_fork_names_its_problems_and_creates_nothing(author_role, reviewer):
    origin = finished_refund(author_role, reviewer)
    bad = json.dumps({"steps": [{"id": 1, "tool": "nope", "args": {}, "depends_on": []}]})
    runs_before = Run.objects.count()

    assert fork_preview(origin=origin, plan_text=bad).problems
    assert (
        fork_preview(origin=origin, plan_text="{")
        .problems[0]
        .startswith("the plan is not valid JSON")
    )
    with pytest.raises(GoalRejected, match="nope"):
        run_fork(origin=origin, author=author_role, plan_text=bad, version=1)
    assert Run.objects.count() == runs_before


def test_the_fork_page_checks_live_and_the_lineage_shows(author_role, reviewer, client):
    origin = finished_refund(author_role, reviewer)
    client.force_login(author_role)

    page = client.get(reverse("plans:run_fork", args=[origin.pk])).content.decode()
    assert "issue_refund" in page and "What will run" in page
    check = client.post(reverse("plans:run_fork_check", args=[origin.pk]), {"plan": '{"steps": 3}'})
    assert "problem" in check.content.decode()
    text = plan_json_of(Plan.objects.get(run=origin))
    response = client.post(
        reverse("plans:run_fork", args=[origin.pk]), {"plan": text, "version": "1"}
    )
    fork = Run.objects.get(origin=origin)
    assert response.status_code == 302
    assert (
        f'forked from <a href="/runs/{origin.pk}/">run #{origin.pk}</a> (plan v1)'
        in client.get(reverse("plans:run_list")).content.decode()
    )
    assert "forked from" in client.get(reverse("plans:run_audit", args=[fork.pk])).content.decode()


def test_someone_who_cannot_see_the_run_cannot_fork_it(author_role, reviewer, outsider, client):
    origin = finished_refund(author_role, reviewer)
    client.force_login(outsider)
    assert client.get(reverse("plans:run_fork", args=[origin.pk])).status_code == 404
    assert client.post(reverse("plans:run_again", args=[origin.pk])).status_code == 404


def test_the_origins_page_and_audit_list_its_forks_and_re_runs(author_role, reviewer, client):
    origin = finished_refund(author_role, reviewer)
    fork = run_fork(
        origin=origin,
        author=author_role,
        plan_text=plan_json_of(Plan.objects.get(run=origin)),
        version=1,
    )
    again = run_rerun(origin=origin, author=author_role)
    client.force_login(author_role)

    for url in (f"/runs/{origin.pk}/", f"/runs/{origin.pk}/audit/"):
        page = client.get(url).content.decode()
        lineage = page[page.index('id="lineage-derived"') :][:600]
        assert f'forked as <a href="/runs/{fork.pk}/">run #{fork.pk}</a> (plan v1)' in lineage
        assert f're-run as <a href="/runs/{again.pk}/">run #{again.pk}</a>' in lineage
    # The fork's own page still names its origin, and lists nothing derived from it.
    page = client.get(f"/runs/{fork.pk}/").content.decode()
    assert f'forked from <a href="/runs/{origin.pk}/">run #{origin.pk}</a>' in page
    assert 'id="lineage-derived"' not in page


def test_a_derived_run_someone_may_not_see_is_not_listed(
    author_role, other_author, reviewer, client
):
    origin = finished_refund(author_role, reviewer)
    other_author.user_permissions.add(*author_role.user_permissions.all())
    other = type(other_author).objects.get(pk=other_author.pk)
    theirs = run_rerun(origin=origin, author=other)
    client.force_login(author_role)

    page = client.get(f"/runs/{origin.pk}/").content.decode()

    assert f"run #{theirs.pk}</a>" not in page


def test_run_again_shows_the_effects_it_would_repeat_before_it_starts(
    author_role, reviewer, client
):
    origin = finished_refund(author_role, reviewer)
    client.force_login(author_role)
    runs_before = Run.objects.count()

    page = client.get(reverse("plans:run_again", args=[origin.pk])).content.decode()

    assert Run.objects.count() == runs_before  # nothing started by looking
    assert "What it would likely repeat" in page
    refund = page[page.index('id="preview-step-2"') :].split("</tr>")[0]
    assert "issue_refund" in refund and f"it would repeat an effect of run #{origin.pk}" in refund
    assert 'id="run-again-form"' in page and 'method="post"' in page
    response = client.post(reverse("plans:run_again", args=[origin.pk]))
    again = Run.objects.get(origin=origin)
    assert response.status_code == 302 and response["Location"] == f"/runs/{again.pk}/"
    assert again.origin_kind == Run.Origin.RERUN
    # The run page's button opens the preview; it no longer starts a run by itself.
    detail = client.get(f"/runs/{origin.pk}/").content.decode()
    assert f'href="/runs/{origin.pk}/again/">Run again</a>' in detail
