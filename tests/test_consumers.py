"""The run page's websocket: who may connect, replay after a seq, live events exactly once."""

import asyncio
import re
import threading

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.db import transaction

from agentsite.asgi import application
from plans.journal.events import INBOX_GROUP, append_events, publish_text, run_group
from plans.llm.offline import PRICE_GOAL, TRIP_GOAL
from plans.models import Run
from plans.runtime.advance import advance_run
from plans.services.runs import run_create

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

# Generous: a replay renders the whole timeline, and shared CI machines have slow moments.
RECEIVE_S = 5


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


@pytest.fixture
def finished_run(author):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.last_seq > 6
    return run


def session_of(client, user):
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(path, session=None):
    headers = [(b"origin", b"http://localhost")]
    if session:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect()
    assert connected  # accepted, so a refusal can carry a close code the client won't retry
    return communicator


def step_row_ids(html):
    return [int(step) for step in re.findall(r'<tr id="step-row-(\d+)"', html)]


def timeline_seqs(html):
    return [int(seq) for seq in re.findall(r'<li class="event[^"]*" data-seq="(\d+)"', html)]


async def next_events(socket):
    """The next push that carries events: what earlier ones changed may come between (pushes of
    their own: the header and totals, step rows, the graph)."""
    while True:
        message = await socket.receive_from(RECEIVE_S)
        if timeline_seqs(message):
            return message


async def next_state(socket):
    """The next push of the run's header (what a batch of events changed follows its rows)."""
    while True:
        message = await socket.receive_from(RECEIVE_S)
        if 'id="run-header"' in message:
            return message


async def stated_up_to(socket, seq):
    """Receive until the push saying the page shows what the events up to seq changed."""
    while stated_seq(await socket.receive_from(RECEIVE_S)) != seq:
        pass


def stated_seq(html):
    """The seq a push says the page now shows the changes of (None: it says nothing of that)."""
    found = re.search(r'<div id="stated-seq" data-seq="(\d+)"', html)
    return int(found.group(1)) if found else None


def only_stated(html):
    """Whether a push is the stated marker alone: a batch that changed nothing shown."""
    return stated_seq(html) is not None and html.count("<") == 2  # <div ...></div>


@database_sync_to_async
def append(run, *kinds):
    with transaction.atomic():
        events, _ = append_events(run.pk, [(kind, {"status": "running"}) for kind in kinds])
    return [event["seq"] for event in events]


async def following(socket, run):
    """Wait until the consumer follows the run: an event appended now comes back to us."""
    (seq,) = await append(run, "run_status")
    assert timeline_seqs(await socket.receive_from(RECEIVE_S)) == [seq]
    await stated_up_to(socket, seq)  # what it changed follows
    return seq


async def test_a_socket_without_a_signed_in_user_is_closed(finished_run):
    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after=0")

    assert await socket.receive_output(RECEIVE_S) == {"type": "websocket.close", "code": 4401}


async def test_a_socket_for_someone_elses_run_is_closed(finished_run, client, other_author):
    session = await database_sync_to_async(session_of)(client, other_author)

    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after=0", session)

    assert await socket.receive_output(RECEIVE_S) == {"type": "websocket.close", "code": 4403}


async def test_a_socket_for_a_run_that_does_not_exist_is_closed(client, author):
    session = await database_sync_to_async(session_of)(client, author)

    socket = await open_socket("/ws/runs/999999/?after=0", session)

    assert await socket.receive_output(RECEIVE_S) == {"type": "websocket.close", "code": 4403}


async def test_a_socket_from_another_origin_is_refused(finished_run, client, author):
    session = await database_sync_to_async(session_of)(client, author)
    headers = [(b"origin", b"http://evil.example"), (b"cookie", f"sessionid={session}".encode())]
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{finished_run.pk}/", headers=headers
    )

    connected, _ = await communicator.connect()

    assert not connected


async def test_people_who_may_see_all_runs_may_follow_any(finished_run, client, outsider):
    await database_sync_to_async(outsider.user_permissions.add)(
        await database_sync_to_async(Permission.objects.get)(codename="view_all_runs")
    )
    session = await database_sync_to_async(session_of)(client, outsider)

    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after=0", session)

    assert timeline_seqs(await socket.receive_from(RECEIVE_S))
    await socket.disconnect()


async def test_it_replays_exactly_the_events_after_the_seq_the_client_names(
    finished_run, client, author
):
    session = await database_sync_to_async(session_of)(client, author)
    last = finished_run.last_seq

    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after=3", session)
    replay = await socket.receive_from(RECEIVE_S)
    (live,) = await append(finished_run, "run_status")
    after_replay = await next_events(socket)

    assert sorted(timeline_seqs(replay)) == list(range(4, last + 1))
    assert f'data-first="4" data-seq="{last}"' in replay
    assert timeline_seqs(after_replay) == [live]  # the next message is new, not a repeat
    await socket.disconnect()


async def test_a_reconnect_gets_what_was_missed_while_away_and_nothing_twice(
    finished_run, client, author
):
    session = await database_sync_to_async(session_of)(client, author)
    path = f"/ws/runs/{finished_run.pk}/?after="

    first = await open_socket(path + "0", session)
    seen = timeline_seqs(await first.receive_from(RECEIVE_S))
    await first.disconnect()
    missed = await append(finished_run, "run_status", "run_status")
    second = await open_socket(path + str(max(seen)), session)
    replay = await second.receive_from(RECEIVE_S)

    assert sorted(seen) == list(range(1, finished_run.last_seq + 1))
    assert sorted(timeline_seqs(replay)) == missed
    await second.disconnect()


async def test_a_live_event_arrives_once_even_if_it_is_delivered_twice(
    finished_run, client, author
):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )

    (live,) = await append(finished_run, "run_status")
    first = await socket.receive_from(RECEIVE_S)
    # The same batch again (a publish racing a replay): the consumer has already sent it.
    await get_channel_layer().group_send(
        run_group(finished_run.pk),
        {
            "type": "run.events",
            "events": [
                {"run": finished_run.pk, "seq": live, "kind": "run_status", "payload": {}, "at": ""}
            ],
        },
    )
    (later,) = await append(finished_run, "run_status")
    second = await next_events(socket)

    assert timeline_seqs(first) == [live]
    assert timeline_seqs(second) == [later]
    await socket.disconnect()


async def test_a_gap_in_live_events_is_filled_from_the_log(
    finished_run, client, author, monkeypatch
):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    await following(socket, finished_run)
    monkeypatch.setattr("plans.journal.events.publish_events", lambda run_id, events: None)
    (lost,) = await append(finished_run, "run_status")  # committed, but its push is lost
    monkeypatch.undo()

    (after_gap,) = await append(finished_run, "run_status")
    message = await socket.receive_from(RECEIVE_S)

    assert sorted(timeline_seqs(message)) == [lost, after_gap]
    await socket.disconnect()


async def test_the_client_can_ask_again_from_a_seq(finished_run, client, author):
    session = await database_sync_to_async(session_of)(client, author)
    last = finished_run.last_seq
    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after={last}", session)

    await socket.send_json_to({"resume_after": last - 2})
    message = await socket.receive_from(RECEIVE_S)

    assert sorted(timeline_seqs(message)) == [last - 1, last]
    await socket.disconnect()


async def test_a_lost_last_batch_comes_when_the_client_asks_from_what_it_has(
    finished_run, client, author, monkeypatch
):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    shown = await following(socket, finished_run)
    monkeypatch.setattr("plans.journal.events.publish_events", lambda run_id, events: None)
    lost = await append(finished_run, "run_status", "run_finished")  # nothing comes after it

    await socket.send_json_to({"resume_after": shown})
    message = await socket.receive_from(RECEIVE_S)

    assert sorted(timeline_seqs(message)) == lost
    await socket.disconnect()


async def test_asking_when_nothing_was_missed_sends_nothing(finished_run, client, author):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after=0", session)
    await socket.receive_from(RECEIVE_S)  # the whole log

    last = finished_run.last_seq
    await socket.send_json_to({"resume_after": last})
    await socket.send_json_to({"resume_after": last - 1})  # answered in order, after the first
    message = await next_events(socket)

    assert timeline_seqs(message) == [last]  # the first question got no answer
    await socket.disconnect()


async def test_answer_tokens_are_appended_escaped(finished_run, client, author):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    await following(socket, finished_run)

    publish_text(finished_run.pk, "answer_delta", "<b>92800</b> ")
    message = await socket.receive_from(RECEIVE_S)

    assert message == '<span hx-swap-oob="beforeend:#answer-text">&lt;b&gt;92800&lt;/b&gt; </span>'
    await socket.disconnect()


async def test_an_events_rows_come_first_then_the_header_totals_and_step_rows_then_the_graph(
    finished_run, client, author
):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq - 1}", session
    )

    replay = await socket.receive_from(RECEIVE_S)
    state = await socket.receive_from(RECEIVE_S)
    with_step = await database_sync_to_async(append_events_with_step)(finished_run)
    update = await socket.receive_from(RECEIVE_S)
    rows = await socket.receive_from(RECEIVE_S)
    stated = await socket.receive_from(RECEIVE_S)
    graph = await socket.receive_from(RECEIVE_S)

    # The rows (drawn from the events alone) are not held up by the reads the rest needs.
    assert timeline_seqs(replay) == [finished_run.last_seq]
    assert 'id="last-seq"' in replay and 'id="run-header"' not in replay
    assert 'id="run-header"' in state and 'id="run-totals"' in state
    assert 'id="last-seq"' not in state  # only a push of events moves the gap check's seq
    assert stated_seq(state) == finished_run.last_seq  # the reconnect's resume point, last
    assert state.rstrip().endswith("</div>") and state.rstrip().rsplit("<div", 1)[1].startswith(
        ' id="stated-seq"'
    )
    assert timeline_seqs(update) == [with_step]
    # Only the changed step's row is swapped, in a message of its own: not the whole table.
    assert 'id="steps-table"' not in update and "<tr" not in update
    assert step_row_ids(rows) == [3]
    assert 'hx-swap-oob="true"' in rows and rows.lstrip().startswith("<tr")
    # The header and totals did not change, so they are not sent again: the marker alone.
    assert only_stated(stated) and stated_seq(stated) == with_step
    # The event is not held up by the graph's drawing: that comes next, on its own.
    assert 'id="graph"' not in update
    assert graph.lstrip().startswith('<div id="graph" class="graph" hx-swap-oob="true">')
    assert "<svg" in graph
    await socket.disconnect()


async def test_a_header_whose_run_changed_is_sent_again(finished_run, client, author):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    await following(socket, finished_run)

    await database_sync_to_async(Run.objects.filter(pk=finished_run.pk).update)(
        status=Run.Status.FAILED
    )
    (seq,) = await append(finished_run, "run_status")
    update = await socket.receive_from(RECEIVE_S)
    state = await socket.receive_from(RECEIVE_S)

    assert timeline_seqs(update) == [seq]
    assert 'data-status="failed"' in state and 'id="run-totals"' not in state
    await socket.disconnect()


def append_events_with_step(run):
    with transaction.atomic():
        events, _ = append_events(
            run.pk, [("step_finished", {"step": 3, "tool": "calculator", "status": "succeeded"})]
        )
    return events[0]["seq"]


# --- the reviewers' badge ------------------------------------------------------------------


@database_sync_to_async
def parked_trip(author):
    run = run_create(author=author, goal_text=TRIP_GOAL)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk).status


async def test_the_badge_socket_sends_reviewers_the_count_and_follows_changes(
    client, author, reviewer
):
    session = await database_sync_to_async(session_of)(client, reviewer)
    socket = await open_socket("/ws/approvals/", session)
    initial = await socket.receive_from(RECEIVE_S)

    assert await parked_trip(author) == Run.Status.AWAITING_APPROVAL
    await get_channel_layer().group_send(INBOX_GROUP, {"type": "inbox.changed"})
    updates = [await socket.receive_from(RECEIVE_S)]
    while 'data-count="2"' not in updates[-1]:  # the run's own nudge may come first
        updates.append(await socket.receive_from(RECEIVE_S))

    assert 'id="pending-count"' in initial and 'data-count="0"' in initial
    assert 'hx-swap-oob="true"' in updates[-1]
    await socket.disconnect()


async def test_an_authors_badge_socket_counts_only_the_questions_they_are_asked(client, author):
    session = await database_sync_to_async(session_of)(client, author)

    socket = await open_socket("/ws/approvals/", session)
    initial = await socket.receive_from(RECEIVE_S)
    assert await parked_trip(author) == Run.Status.AWAITING_APPROVAL  # no question: not counted
    await get_channel_layer().group_send(INBOX_GROUP, {"type": "inbox.changed"})
    update = await socket.receive_from(RECEIVE_S)

    assert 'data-count="0"' in initial and 'data-count="0"' in update
    await socket.disconnect()


async def test_logging_out_closes_the_users_open_sockets(finished_run, client, author):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    await following(socket, finished_run)

    await database_sync_to_async(client.logout)()

    closed = await socket.receive_output(timeout=3)
    assert closed == {"type": "websocket.close", "code": 4401}


async def test_seqs_out_of_range_are_ignored_and_the_socket_carries_on(
    finished_run, client, author
):
    session = await database_sync_to_async(session_of)(client, author)
    huge = "9" * 30
    socket = await open_socket(f"/ws/runs/{finished_run.pk}/?after={huge}", session)
    whole_log = await socket.receive_from(RECEIVE_S)  # read as no seq given: from the start

    last = finished_run.last_seq
    for nonsense in (int(huge), -5, True):
        await socket.send_json_to({"resume_after": nonsense})
    await socket.send_json_to({"resume_after": last - 1})
    message = await next_events(socket)

    assert sorted(timeline_seqs(whole_log)) == list(range(1, last + 1))
    assert timeline_seqs(message) == [last]
    await socket.disconnect()


async def test_batches_go_out_while_what_an_earlier_one_changed_renders_and_that_follows_once(
    finished_run, client, author, monkeypatch
):
    from plans import consumers

    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    await following(socket, finished_run)
    rendering, both_sent = threading.Event(), threading.Event()
    render, stated = consumers.live_state, []

    def slow_render(run_id, events, viewer):
        stated.append([event["seq"] for event in events])
        if not rendering.is_set():
            rendering.set()
            both_sent.wait(RECEIVE_S)  # the next two batches go out meanwhile
        return render(run_id, events, viewer)

    monkeypatch.setattr(consumers, "live_state", slow_render)

    (first,) = await append(finished_run, "run_status")
    assert timeline_seqs(await socket.receive_from(RECEIVE_S)) == [first]
    await asyncio.get_running_loop().run_in_executor(None, rendering.wait, RECEIVE_S)
    second = await append(finished_run, "run_status", "run_status")
    assert timeline_seqs(await socket.receive_from(RECEIVE_S)) == second
    third = await append(finished_run, "run_status")
    assert timeline_seqs(await socket.receive_from(RECEIVE_S)) == third
    both_sent.set()
    markers = [await socket.receive_from(RECEIVE_S) for _ in range(2)]

    # Nothing they changed was not sent already: the markers alone, the latest last.
    assert [stated_seq(m) for m in markers if only_stated(m)] == [first, third[-1]]
    assert await socket.receive_nothing(0.2)
    assert stated == [[first], [*second, *third]]  # the two batches in one render
    await socket.disconnect()


async def test_a_graph_is_redrawn_at_most_every_so_often_and_the_latest_state_last(
    finished_run, client, author, monkeypatch
):
    from plans import consumers

    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    await following(socket, finished_run)
    monkeypatch.setattr(consumers, "GRAPH_REDRAW_S", 2.0)

    first = await database_sync_to_async(append_events_with_step)(finished_run)
    assert timeline_seqs(await socket.receive_from(RECEIVE_S)) == [first]
    assert step_row_ids(await socket.receive_from(RECEIVE_S)) == [3]
    assert stated_seq(await socket.receive_from(RECEIVE_S)) == first
    assert 'id="graph"' in await socket.receive_from(RECEIVE_S)  # the first change: at once
    second = await database_sync_to_async(append_events_with_step)(finished_run)
    assert timeline_seqs(await socket.receive_from(RECEIVE_S)) == [second]
    assert step_row_ids(await socket.receive_from(RECEIVE_S)) == [3]
    assert stated_seq(await socket.receive_from(RECEIVE_S)) == second
    assert await socket.receive_nothing(0.2)  # the next drawing waits for its turn
    assert 'id="graph"' in await socket.receive_from(RECEIVE_S)
    await socket.disconnect()


# --- one render per run and permission view, for every socket watching it -----------------


def counting_renders(monkeypatch):
    """Count the renders: live_state calls (each one run's changes for one permission view) and
    live_timeline calls (a batch's rows, for every view)."""
    from plans import consumers

    state, timeline, calls = consumers.live_state, consumers.live_timeline, []

    def state_counted(run_id, events, viewer):
        calls.append(("state", run_id))
        return state(run_id, events, viewer)

    def timeline_counted(events):
        calls.append(("timeline", events[0]["run"]))
        return timeline(events)

    monkeypatch.setattr(consumers, "live_state", state_counted)
    monkeypatch.setattr(consumers, "live_timeline", timeline_counted)
    return calls


async def watching(run, users):
    """A socket per user on the run, each following it (an event appended reaches them all),
    each with a session of its own."""
    from django.test import Client

    last_seq = await database_sync_to_async(lambda: Run.objects.get(pk=run.pk).last_seq)()
    sockets = []
    for user in users:
        session = await database_sync_to_async(session_of)(Client(), user)
        sockets.append(await open_socket(f"/ws/runs/{run.pk}/?after={last_seq}", session))
    (seq,) = await append(run, "run_status")
    for socket in sockets:  # live, or read from the log by a socket that joined just after
        assert timeline_seqs(await next_events(socket)) == [seq]
        await next_state(socket)
    return sockets


async def test_ten_sockets_on_one_run_cause_one_render_and_get_the_same_push(
    finished_run, client, author, monkeypatch
):
    sockets = await watching(finished_run, [author] * 10)
    renders = counting_renders(monkeypatch)

    (seq,) = await append(finished_run, "run_status")
    pushes = [await socket.receive_from(RECEIVE_S) for socket in sockets]
    for socket in sockets:  # the header and totals did not change: the stated marker alone
        assert only_stated(await socket.receive_from(RECEIVE_S))
        assert await socket.receive_nothing(0.2)

    assert sorted(renders) == [("state", finished_run.pk), ("timeline", finished_run.pk)]
    assert all(timeline_seqs(push) == [seq] for push in pushes)
    assert len(set(pushes)) == 1
    for socket in sockets:
        await socket.disconnect()


@pytest.fixture
def deciders(django_user_model, reviewer, operator):
    """Who watches a plan waiting for approval: the goal's author (a reviewer), another
    reviewer, and two who may see every run but not decide."""
    see_all = Permission.objects.get(codename="view_all_runs")
    other = django_user_model.objects.create_user("dave", password="dave-pass-123")
    other.user_permissions.add(see_all, Permission.objects.get(codename="decide_approval"))
    reviewer.user_permissions.add(see_all)
    second_operator = django_user_model.objects.create_user("oscar", password="oscar-pass-123")
    second_operator.user_permissions.add(see_all)
    fresh = django_user_model.objects.get  # fresh permission caches
    return {
        "own goal": fresh(pk=reviewer.pk),
        "reviewer": fresh(pk=other.pk),
        "reader": fresh(pk=operator.pk),
        "another reader": fresh(pk=second_operator.pk),
    }


@pytest.fixture
def held_run(deciders):
    run = run_create(author=deciders["own goal"], goal_text=PRICE_GOAL, require_plan_approval=True)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_PLAN_APPROVAL
    return run


def decision_buttons(push):
    """The plan decision's buttons in a push, each with whether it is disabled."""
    buttons = re.findall(r'<button type="submit" name="decision" value="(\w+)"([^>]*)>', push)
    return {value: " disabled" in attributes for value, attributes in buttons}


async def test_each_permission_view_is_rendered_once_and_a_reader_gets_no_decision(
    held_run, client, deciders, monkeypatch
):
    from django.test import Client

    renders = counting_renders(monkeypatch)
    sessions = [await database_sync_to_async(session_of)(Client(), u) for u in deciders.values()]
    sockets = [
        await open_socket(f"/ws/runs/{held_run.pk}/?after={held_run.last_seq - 1}", session)
        for session in sessions
    ]
    for socket in sockets:
        await next_events(socket)  # the replayed event
    states = [await next_state(socket) for socket in sockets]
    pushes = dict(zip(deciders, states, strict=True))

    assert [kind for kind, _ in renders].count("state") == 3  # four sockets, three views
    assert pushes["reader"] == pushes["another reader"]
    assert decision_buttons(pushes["reader"]) == {}
    assert 'name="decision"' not in pushes["reader"]
    assert decision_buttons(pushes["reviewer"]) == {
        "changes": False,
        "reject": False,
        "approve": False,
    }
    # Under four-eyes the goal's author sees the decision, but may not make it.
    assert decision_buttons(pushes["own goal"]) == {"reject": True, "approve": True}
    for socket in sockets:
        await socket.disconnect()


async def test_a_live_batchs_rows_are_drawn_once_for_every_view_and_its_changes_once_per_view(
    held_run, deciders, monkeypatch
):
    sockets = await watching(held_run, list(deciders.values()))
    renders = counting_renders(monkeypatch)

    (seq,) = await append(held_run, "run_status")
    pushes = [await socket.receive_from(RECEIVE_S) for socket in sockets]
    for socket in sockets:  # what it changed: the stated marker at least
        assert stated_seq(await socket.receive_from(RECEIVE_S)) == seq

    assert len(set(pushes)) == 1 and timeline_seqs(pushes[0]) == [seq]
    assert sorted(renders) == [("state", held_run.pk)] * 3 + [("timeline", held_run.pk)]
    for socket in sockets:
        await socket.disconnect()


async def test_a_page_that_lost_pushes_gets_the_header_and_totals_again(
    finished_run, client, author
):
    session = await database_sync_to_async(session_of)(client, author)
    socket = await open_socket(
        f"/ws/runs/{finished_run.pk}/?after={finished_run.last_seq}", session
    )
    seq = await following(socket, finished_run)

    # Asked for what follows an event before the last it was sent: the page missed some.
    await socket.send_json_to({"resume_after": seq - 1})
    replayed = await socket.receive_from(RECEIVE_S)
    state = await socket.receive_from(RECEIVE_S)

    assert timeline_seqs(replayed) == [seq]
    assert 'id="run-header"' in state and 'id="run-totals"' in state
    assert stated_seq(state) == seq
    await socket.disconnect()


async def test_a_shared_push_is_not_sent_to_a_socket_whose_session_ended(
    finished_run, author, settings
):
    from django.contrib.sessions.backends.db import SessionStore

    settings.AGENTSITE_STREAM_RECHECK_S = 0  # re-read before every push
    ended, staying = await watching(finished_run, [author, author])
    session = ended.scope["headers"][1][1].decode().removeprefix("sessionid=")

    await database_sync_to_async(SessionStore(session).delete)()
    (later,) = await append(finished_run, "run_status")

    assert timeline_seqs(await next_events(staying)) == [later]
    assert await ended.receive_output(RECEIVE_S) == {"type": "websocket.close", "code": 4401}
    await staying.disconnect()


async def test_graph_drawings_of_different_runs_take_turns(client, author, monkeypatch):
    from plans import consumers

    runs = [
        await database_sync_to_async(lambda: run_create(author=author, goal_text=PRICE_GOAL))()
        for _ in range(3)
    ]
    for run in runs:
        await database_sync_to_async(advance_run)(run.pk)
    sockets = [(await watching(run, [author]))[0] for run in runs]
    draw, drawing, most = consumers.graph_fragment, [], []

    def drawn_alone(run_id):
        drawing.append(run_id)
        most.append(len(drawing))
        try:
            return draw(run_id)
        finally:
            drawing.remove(run_id)

    monkeypatch.setattr(consumers, "graph_fragment", drawn_alone)

    for run in runs:
        await database_sync_to_async(append_events_with_step)(run)
    graphs = []
    for socket in sockets:
        while 'id="graph"' not in (message := await socket.receive_from(RECEIVE_S)):
            pass
        graphs.append(message)

    assert len(most) == 3 and max(most) == 1
    for socket in sockets:
        await socket.disconnect()
