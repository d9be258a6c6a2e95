"""A run page's live updates keep what only some viewers get: the plan decision form."""

import pytest
from channels.db import database_sync_to_async
from django.urls import reverse

from plans.llm.offline import PRICE_GOAL
from plans.models import Run
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.test_consumers import RECEIVE_S, open_socket, session_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


@pytest.fixture
def held_run(author):
    run = run_create(author=author, goal_text=PRICE_GOAL, require_plan_approval=True)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_PLAN_APPROVAL
    return run


@pytest.fixture
def reviewer(reviewer):
    """A reviewer as the role makes one: may decide, and may see every run."""
    from django.contrib.auth.models import Permission

    reviewer.user_permissions.add(Permission.objects.get(codename="view_all_runs"))
    return type(reviewer).objects.get(pk=reviewer.pk)


def has_decision_form(html, run):
    return f'action="{reverse("plans:plan_decide", args=[run.pk])}"' in html


def run_page_and_update(client, run):
    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()
    update = client.get(reverse("plans:run_events", args=[run.pk]), {"after": 0})
    assert update.status_code == 200
    return page, update.content.decode()


def test_a_reviewer_keeps_the_plan_decision_after_a_live_update(client, held_run, reviewer):
    client.force_login(reviewer)

    page, update = run_page_and_update(client, held_run)

    assert has_decision_form(page, held_run)
    assert 'id="run-header"' in update and has_decision_form(update, held_run)
    assert 'name="csrfmiddlewaretoken"' in update  # rendered with the request, like the page


def test_an_author_gets_no_plan_decision_in_a_live_update(client, held_run, author):
    client.force_login(author)

    page, update = run_page_and_update(client, held_run)

    assert "Nothing runs until a reviewer approves this plan." in update
    assert not has_decision_form(page, held_run)
    assert not has_decision_form(update, held_run)


@pytest.mark.asyncio
async def test_a_reviewers_socket_pushes_the_plan_decision(client, held_run, reviewer):
    session = await database_sync_to_async(session_of)(client, reviewer)

    socket = await open_socket(f"/ws/runs/{held_run.pk}/?after=0", session)
    await socket.receive_from(RECEIVE_S)  # the events' lines; what they changed follows
    push = await socket.receive_from(RECEIVE_S)

    assert 'id="run-header"' in push and has_decision_form(push, held_run)
    await socket.disconnect()


@pytest.mark.asyncio
async def test_an_authors_socket_never_pushes_the_plan_decision(client, held_run, author):
    session = await database_sync_to_async(session_of)(client, author)

    socket = await open_socket(f"/ws/runs/{held_run.pk}/?after=0", session)
    await socket.receive_from(RECEIVE_S)  # the events' lines; what they changed follows
    push = await socket.receive_from(RECEIVE_S)

    assert 'id="run-header"' in push and not has_decision_form(push, held_run)
    await socket.disconnect()
