"""The API's event stream in this process: it follows the run's channel-layer group, as the
run page's socket does, instead of reading the log on a timer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.test import AsyncClient
from django.utils import timezone

from plans.api import runs as runs_api
from plans.api.tokens import token_create
from plans.journal import events as journal_events
from plans.journal.events import append_events
from plans.models import Run
from plans.roles import roles_ensure
from plans.services.runs import run_create
from tests.integration.conftest import service_url

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

# Far longer than any wait below: an event that arrives in time did not wait for a timed read.
NEVER_S = 600.0
# Generous, for a loaded machine; each wait ends as soon as what it waits for arrives.
ARRIVE_S = 20.0


@pytest.fixture(
    params=["in-memory", pytest.param("redis", marks=[pytest.mark.services])],
)
def channel_layer(request, settings):
    """The embedded default's in-memory layer, and Redis as in scale-out."""
    if request.param == "redis":
        url = service_url("AGENTSITE_TEST_REDIS_URL")
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [{"address": url, "socket_timeout": 30}]},
            }
        }
    else:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    return request.param


@pytest.fixture
def never_polled(settings, monkeypatch, channel_layer):
    """The stream would read the log and its credential on a timer only after NEVER_S."""
    monkeypatch.setattr(runs_api, "STREAM_POLL_S", NEVER_S)
    monkeypatch.setattr(runs_api, "STREAM_HEARTBEAT_S", NEVER_S)
    settings.AGENTSITE_STREAM_RECHECK_S = NEVER_S


@pytest.fixture
def token(author):
    author.groups.add(roles_ensure()["authors"])
    return token_create(user=author, name="ci", roles=["authors"])[1]


@pytest.fixture
def run(author):
    run = run_create(author=author, goal_text="Follow me")  # not started: it waits
    run.refresh_from_db()
    assert not run.is_terminal and run.last_seq >= 1
    return run


class EventStream:
    """A text/event-stream response read frame by frame, each waited for at most ARRIVE_S."""

    def __init__(self, response: Any) -> None:
        assert response.status_code == 200, response
        assert response["Content-Type"].startswith("text/event-stream")
        self.chunks = aiter(response.streaming_content)
        self.text = ""

    async def frame(self) -> dict[str, str] | None:
        """The next frame's fields (comments left out), or None once the server ends it."""
        while True:
            while "\n\n" in self.text:
                raw, self.text = self.text.split("\n\n", 1)
                fields = dict(
                    line.split(": ", 1) for line in raw.split("\n") if not line.startswith(":")
                )
                if fields:
                    return fields
            try:
                chunk = await asyncio.wait_for(anext(self.chunks), ARRIVE_S)
            except StopAsyncIteration:
                return None
            self.text += chunk.decode()

    async def event(self) -> tuple[str, dict[str, Any]]:
        while True:
            fields = await self.frame()
            assert fields is not None, "the stream ended"
            if "data" in fields:
                return fields.get("event", "message"), json.loads(fields["data"])

    async def through(self, seq: int) -> list[int]:
        """Read until the event with this seq; the seqs read."""
        seqs = []
        while not seqs or seqs[-1] < seq:
            _, event = await self.event()
            seqs.append(event["seq"])
        return seqs

    async def close(self) -> None:
        await self.chunks.aclose()  # type: ignore[attr-defined]


async def open_stream(client: AsyncClient, run: Run, **headers: str) -> EventStream:
    response = await client.get(
        f"/api/v1/runs/{run.pk}/events/", headers={"Accept": "text/event-stream", **headers}
    )
    return EventStream(response)


@database_sync_to_async
def append(run: Run, *kinds: str, **run_fields: Any) -> list[int]:
    with transaction.atomic():
        events, _ = append_events(
            run.pk, [(kind, {"status": "running"}) for kind in kinds], run_fields=run_fields
        )
    return [event["seq"] for event in events]


async def test_an_event_committed_after_the_stream_opened_arrives_without_a_timed_read(
    never_polled, token, run
):
    stream = await open_stream(AsyncClient(), run, Authorization=f"Bearer {token}")
    assert await stream.through(run.last_seq) == list(range(1, run.last_seq + 1))

    (seq,) = await append(run, "run_status")

    kind, event = await stream.event()
    assert (kind, event["seq"], event["payload"]) == ("run_status", seq, {"status": "running"})
    await stream.close()


async def test_events_delivered_twice_go_out_once_and_in_order(never_polled, token, run):
    stream = await open_stream(AsyncClient(), run, Authorization=f"Bearer {token}")
    await stream.through(run.last_seq)
    first = await append(run, "run_status", "run_status")
    assert await stream.through(first[-1]) == first

    # What the stream has sent comes again (as a join racing its first read delivers it).
    old = await database_sync_to_async(lambda: list(run.events.order_by("seq")))()
    journal_events.publish_events(run.pk, [journal_events.event_message(e) for e in old])
    second = await append(run, "run_status")

    assert await stream.through(second[-1]) == second
    await stream.close()


async def test_a_gap_in_the_delivered_events_is_filled_from_the_log(
    never_polled, token, run, monkeypatch
):
    stream = await open_stream(AsyncClient(), run, Authorization=f"Bearer {token}")
    await stream.through(run.last_seq)
    with monkeypatch.context() as lost:
        lost.setattr(journal_events, "announce_committed", lambda run_id, events: None)
        missed = await append(run, "run_status")
    later = await append(run, "run_status")

    assert await stream.through(later[-1]) == missed + later
    await stream.close()


async def test_a_lost_last_message_is_found_by_the_next_timed_read(
    never_polled, token, run, monkeypatch
):
    monkeypatch.setattr(runs_api, "STREAM_POLL_S", 0.2)
    stream = await open_stream(AsyncClient(), run, Authorization=f"Bearer {token}")
    await stream.through(run.last_seq)
    monkeypatch.setattr(journal_events, "announce_committed", lambda run_id, events: None)

    missed = await append(run, "run_status")

    assert await stream.through(missed[-1]) == missed
    await stream.close()


async def test_the_stream_ends_after_the_event_that_ends_the_run(never_polled, token, run):
    stream = await open_stream(AsyncClient(), run, Authorization=f"Bearer {token}")
    await stream.through(run.last_seq)

    (seq,) = await append(
        run, "run_finished", status=Run.Status.COMPLETED, finished_at=timezone.now()
    )

    kind, event = await stream.event()
    assert (kind, event["seq"]) == ("run_finished", seq)
    assert await stream.frame() is None  # the server ended it


async def test_a_resumed_stream_starts_after_the_last_event_id(never_polled, token, run):
    seqs = await append(run, "run_status", "run_status", "run_status")

    stream = await open_stream(
        AsyncClient(),
        run,
        Authorization=f"Bearer {token}",
        **{"Last-Event-ID": str(seqs[0])},
    )

    assert await stream.through(seqs[-1]) == seqs[1:]
    await stream.close()


async def test_a_session_stream_ends_at_logout_without_waiting_for_its_recheck(
    never_polled, author: User, run
):
    client = AsyncClient()
    await client.aforce_login(author)
    stream = await open_stream(client, run)
    await stream.through(run.last_seq)

    assert (await client.post("/accounts/logout/")).status_code == 302

    assert await stream.event() == (
        "error",
        {"code": "not_authenticated", "detail": "The session has ended: sign in again."},
    )
    assert await stream.frame() is None
