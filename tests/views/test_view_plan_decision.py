"""Approve plan / Reject plan on the run page, under the plan-approval policy."""

import pytest

from plans.models import Goal, Run, ToolCall
from plans.selectors.plans import plan_current

pytestmark = pytest.mark.django_db(transaction=True)

GOAL = "Total price of an iPhone 16 and AirPods 4 in INR"


@pytest.fixture
def held_run(client, author):
    from django.contrib.auth.models import Group

    from plans.roles import roles_ensure

    roles_ensure()
    author.groups.add(Group.objects.get(name="authors"))
    client.force_login(author)
    client.post("/", {"goal": GOAL, "require_plan_approval": "1"})
    client.logout()
    return Run.objects.get()


@pytest.fixture
def reviewer(reviewer):
    """A reviewer as the role makes one: may decide, and may see every run."""
    from django.contrib.auth.models import Permission

    reviewer.user_permissions.add(Permission.objects.get(codename="view_all_runs"))
    return type(reviewer).objects.get(pk=reviewer.pk)


def test_the_checkbox_holds_the_plan_for_a_reviewer(held_run):
    assert Goal.objects.get().require_plan_approval
    assert held_run.status == Run.Status.AWAITING_PLAN_APPROVAL
    assert not ToolCall.objects.exists()


def test_a_reviewer_sees_the_plan_buttons_and_approving_runs_the_plan(client, held_run, reviewer):
    client.force_login(reviewer)
    page = client.get(f"/runs/{held_run.pk}/").content.decode()
    assert "Approve plan" in page and "Reject plan" in page
    assert "plan-four-eyes" not in page

    client.post(f"/runs/{held_run.pk}/plan/decide/", {"decision": "approve"})

    held_run.refresh_from_db()
    assert held_run.status == Run.Status.COMPLETED


def test_rejecting_without_a_reason_is_refused_in_place(client, held_run, reviewer):
    client.force_login(reviewer)

    response = client.post(
        f"/runs/{held_run.pk}/plan/decide/", {"decision": "reject"}, HTTP_HX_REQUEST="true"
    )

    assert response.status_code == 422
    assert "reason is required" in response.content.decode()
    assert Run.objects.get(pk=held_run.pk).status == Run.Status.AWAITING_PLAN_APPROVAL


def test_the_author_may_not_approve_their_own_plan(client, held_run, author):
    from django.contrib.auth.models import Permission

    author.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    client.force_login(author)

    page = client.get(f"/runs/{held_run.pk}/").content.decode()
    response = client.post(f"/runs/{held_run.pk}/plan/decide/", {"decision": "approve"})

    assert page.count('disabled aria-describedby="plan-four-eyes"') == 2  # both buttons
    assert "another reviewer must decide its plan" in page
    assert response.status_code == 409
    assert "Four-eyes" in response.content.decode()
    assert Run.objects.get(pk=held_run.pk).status == Run.Status.AWAITING_PLAN_APPROVAL


def test_someone_who_may_not_decide_is_refused_as_forbidden(client, held_run, author):
    client.force_login(author)  # sees the run (it is theirs) but has no decide permission

    response = client.post(f"/runs/{held_run.pk}/plan/decide/", {"decision": "approve"})

    assert response.status_code == 403
    assert "permission" in response.content.decode()
    assert Run.objects.get(pk=held_run.pk).status == Run.Status.AWAITING_PLAN_APPROVAL


def test_a_post_without_a_verdict_is_refused_and_decides_nothing(client, reviewer, held_run):
    client.force_login(reviewer)

    response = client.post(f"/runs/{held_run.pk}/plan/decide/", {"decision": "maybe"})

    assert response.status_code == 400
    assert plan_current(held_run).decision == ""
