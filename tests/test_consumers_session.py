"""Sockets end with their session, not only at a logout: a password changed elsewhere, too."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from plans.llm.offline import PRICE_GOAL
from plans.services.runs import run_create
from tests.test_consumers import RECEIVE_S, append, following, open_socket, session_of

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

SIGNED_OUT = {"type": "websocket.close", "code": 4401}


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


@pytest.fixture
def run(author):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    run.refresh_from_db()  # last_seq counts the run_created event
    return run


async def run_socket(client, run, user):
    session = await database_sync_to_async(session_of)(client, user)
    socket = await open_socket(f"/ws/runs/{run.pk}/?after={run.last_seq}", session)
    await following(socket, run)
    return socket, session


@database_sync_to_async
def change_password_in_another_session(user, old_password):
    other = Client()
    other.force_login(user)
    new_password = "N3w-pass-4567"
    response = other.post(
        reverse("password_change"),
        {
            "old_password": old_password,
            "new_password1": new_password,
            "new_password2": new_password,
        },
    )
    assert response.status_code == 302
    assert other.get("/").status_code == 200  # the changing session stays signed in


async def test_a_password_change_elsewhere_closes_the_run_socket_at_once(run, client, author):
    socket, _ = await run_socket(client, run, author)

    await change_password_in_another_session(author, "alice-pass-123")

    # Closed without waiting for a push: the page stops showing itself as live, too.
    assert await socket.receive_output(RECEIVE_S) == SIGNED_OUT


async def test_a_password_change_elsewhere_closes_the_badge_socket(client, reviewer):
    session = await database_sync_to_async(session_of)(client, reviewer)
    socket = await open_socket("/ws/approvals/", session)
    assert 'id="pending-count"' in await socket.receive_from(RECEIVE_S)

    await change_password_in_another_session(reviewer, "bob-pass-123")

    assert await socket.receive_output(RECEIVE_S) == SIGNED_OUT


async def test_deactivating_the_user_closes_their_sockets(run, client, author):
    socket, _ = await run_socket(client, run, author)

    author.is_active = False
    await database_sync_to_async(author.save)()

    assert await socket.receive_output(RECEIVE_S) == SIGNED_OUT


async def test_saving_the_user_otherwise_leaves_their_sockets_open(run, client, author):
    socket, _ = await run_socket(client, run, author)

    author.first_name = "Alice"
    await database_sync_to_async(author.save)()

    await following(socket, run)  # the re-read session still holds
    await socket.disconnect()


async def test_a_deleted_session_stops_the_pushes(run, client, author, settings):
    settings.AGENTSITE_STREAM_RECHECK_S = 0  # re-read before every push
    socket, session = await run_socket(client, run, author)

    await database_sync_to_async(SessionStore(session).delete)()  # as clearsessions or an admin
    await append(run, "run_status")

    assert await socket.receive_output(RECEIVE_S) == SIGNED_OUT


@pytest.mark.parametrize("ending", ["deleted", "expired"])
async def test_an_idle_socket_closes_once_its_session_ends(run, client, author, settings, ending):
    settings.AGENTSITE_STREAM_RECHECK_S = 0.2
    socket, session = await run_socket(client, run, author)
    # Another session of the same user's, still valid: it must not keep this socket open.
    await database_sync_to_async(session_of)(Client(), author)

    if ending == "deleted":
        await database_sync_to_async(SessionStore(session).delete)()
    else:
        await database_sync_to_async(Session.objects.filter(session_key=session).update)(
            expire_date=timezone.now() - timedelta(seconds=1)
        )

    # Nothing is pushed: the socket re-reads its session on its own, and closes.
    assert await socket.receive_output(RECEIVE_S) == SIGNED_OUT


async def test_the_badge_socket_closes_once_its_session_expires(client, reviewer, settings):
    settings.AGENTSITE_STREAM_RECHECK_S = 0.2
    session = await database_sync_to_async(session_of)(client, reviewer)
    socket = await open_socket("/ws/approvals/", session)
    assert 'id="pending-count"' in await socket.receive_from(RECEIVE_S)

    await database_sync_to_async(Session.objects.filter(session_key=session).update)(
        expire_date=timezone.now() - timedelta(seconds=1)
    )

    assert await socket.receive_output(RECEIVE_S) == SIGNED_OUT
