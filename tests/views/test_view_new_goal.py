"""The new-goal page: the goal box, the offline suggestions, starting a run, refusals."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from plans.llm import OFFLINE_DEMO_GOALS
from plans.models import Run
from plans.roles import roles_ensure

pytestmark = pytest.mark.django_db(transaction=True)

PRICE_GOAL = OFFLINE_DEMO_GOALS[0]


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


@pytest.fixture
def author_client(client, author):
    roles_ensure()
    author.groups.add(Group.objects.get(name="authors"))
    client.force_login(author)
    return client


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("plans:new_goal"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_shows_a_goal_box_a_plan_button_and_the_offline_demo_goals(author_client):
    response = author_client.get(reverse("plans:new_goal"))

    page = response.content.decode()
    assert response.status_code == 200
    assert '<label for="goal-input" class="field-label">Goal</label>' in page
    assert ">Plan</button>" in page
    for goal in OFFLINE_DEMO_GOALS:
        assert f'name="suggestion" value="{goal}"' in page


def test_it_offers_no_demo_goals_when_a_real_model_plans(author_client, settings):
    settings.AGENTSITE_MODEL_BACKEND = "anthropic"

    page = author_client.get(reverse("plans:new_goal")).content.decode()

    assert 'name="suggestion"' not in page


def test_submitting_a_goal_starts_a_run_and_goes_to_its_page(author_client, author):
    response = author_client.post(reverse("plans:new_goal"), {"goal": PRICE_GOAL})

    run = Run.objects.get(goal__author=author)
    assert response.status_code == 302
    assert response["Location"] == reverse("plans:run_detail", args=[run.pk])
    run.refresh_from_db()  # tasks run inline in tests: the run is already done
    assert run.status == Run.Status.COMPLETED
    assert "92800" in run.answer


def test_an_htmx_submission_is_told_where_to_go(author_client, author):
    response = author_client.post(
        reverse("plans:new_goal"), {"goal": PRICE_GOAL}, headers={"HX-Request": "true"}
    )

    run = Run.objects.get(goal__author=author)
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("plans:run_detail", args=[run.pk])


def test_a_suggestion_button_submits_its_own_goal(author_client, author):
    author_client.post(reverse("plans:new_goal"), {"goal": "", "suggestion": PRICE_GOAL})

    assert Run.objects.get(goal__author=author).goal.text == PRICE_GOAL


def test_a_rejected_goal_is_explained_inline_and_the_text_is_kept(author_client):
    too_long = "Total price of <b>everything</b> " * 70

    response = author_client.post(
        reverse("plans:new_goal"), {"goal": too_long}, headers={"HX-Request": "true"}
    )

    page = response.content.decode()
    assert response.status_code == 422
    assert "the limit is 2000" in page
    assert "Total price of &lt;b&gt;everything&lt;/b&gt;" in page  # kept, and escaped
    assert page.lstrip().startswith('<form id="goal-form"')  # just the form, swapped in place
    assert not Run.objects.exists()


def test_an_empty_goal_says_what_to_do(author_client):
    response = author_client.post(reverse("plans:new_goal"), {"goal": "   "})

    assert response.status_code == 422
    assert "The goal is empty" in response.content.decode()


def test_someone_who_is_not_an_author_is_told_so_and_nothing_runs(client, outsider):
    client.force_login(outsider)

    page = client.get(reverse("plans:new_goal")).content.decode()
    response = client.post(reverse("plans:new_goal"), {"goal": PRICE_GOAL})

    assert "Only authors can hand the agent a goal" in page
    assert response.status_code == 403
    assert "Only authors can hand the agent a goal" in response.content.decode()
    assert not Run.objects.exists()


def test_the_plans_add_goal_permission_is_enough_to_submit(client, outsider):
    from django.contrib.auth.models import Permission

    outsider.user_permissions.add(Permission.objects.get(codename="add_goal"))
    client.force_login(outsider)

    response = client.post(reverse("plans:new_goal"), {"goal": PRICE_GOAL})

    assert response.status_code == 302
    assert Run.objects.filter(goal__author=outsider).exists()


def test_recent_runs_are_the_users_own(author_client, author, other_author):
    from plans.services.runs import run_create

    run_create(author=author, goal_text="my own goal")
    run_create(author=other_author, goal_text="somebody else's goal")

    page = author_client.get(reverse("plans:new_goal")).content.decode()

    assert "my own goal" in page
    assert "somebody else" not in page
