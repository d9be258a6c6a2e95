"""Websockets: a run page's live updates, and the reviewers' pending-approvals badge.

Both push HTML fragments with out-of-band swaps, rendered on the server from the same
template partials as the pages (the htmx ws extension swaps them in). A run's batch of events
goes out first as its timeline rows, drawn from the events alone on the event loop; what the
events changed (header, totals, step rows) follows, read and rendered once per batch and
permission view on a thread, and each socket sends only the parts that differ from what it sent
last. The graph comes last, now and then.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.loader import render_to_string

from plans.asyncdb import db_async
from plans.engine.text import MAX_ID, whole_number
from plans.journal.events import INBOX_GROUP, bind_server_loop, run_group, user_group
from plans.selectors.approvals import pending_approvals_count
from plans.selectors.runs import run_events_after, run_visible_get
from plans.sessions import session_signs_in
from plans.ui.run_page import (
    answer_delta_fragment,
    graph_fragment,
    live_fragment_needs_graph,
    live_state,
    live_timeline,
    push_view,
)

logger = logging.getLogger(__name__)

# Close codes the htmx ws extension does not retry (it reconnects only on 1006/1011-1013).
NOT_SIGNED_IN = 4401
FORBIDDEN = 4403
# An idle socket's session watch never re-reads its session more often than this, whatever
# AGENTSITE_STREAM_RECHECK_S says (0 there means: re-read before every push).
SESSION_WATCH_MIN_S = 0.1
# A socket redraws its run's graph at most this often (the first change is drawn at once).
GRAPH_REDRAW_S = 0.25
# A finished render stays this long for the sockets that ask for it a little later (a few at
# most: they get each batch at about the same moment), and this many at most are kept.
RENDER_KEEP_S = 2.0
RENDERS_KEPT = 256
# A live batch of at most this many events has its timeline rows drawn on the event loop (well
# under a millisecond each: no database, no hop to a thread); a longer one, as a replay from the
# log is, on a thread.
TIMELINE_ON_LOOP = 32

Rendered = TypeVar("Rendered")


class Turns:
    """Work that takes turns across the process: one piece at a time, each followed by a rest
    as long as it took, so that all of it together uses at most half of the time.

    Graph drawings take turns: each is a `dot` run (~15 ms of a core) and ~6 ms of Python,
    and sixteen watched runs would otherwise ask for more than the machine has, while the
    pushes of their events, which take no turn, wait behind them.
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, work: Callable[[], Awaitable[Rendered]]) -> Rendered:
        loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(loop, asyncio.Lock())
        await lock.acquire()
        started = loop.time()
        try:
            result = await work()
        except BaseException:
            lock.release()
            raise
        loop.call_later(loop.time() - started, lock.release)  # the rest, then the next turn
        return result


graph_turns = Turns()


class SharedRenders:
    """This process's renders of run pushes, one per key, shared by every socket that asks.

    Sockets watching a run get each committed batch at about the same moment: the first to
    ask renders it (off the event loop), the others await that render, or find it done.
    """

    def __init__(self) -> None:
        self._renders: OrderedDict[Hashable, tuple[float, asyncio.Future[Any]]] = OrderedDict()

    async def get(
        self,
        key: Hashable,
        render: Callable[[], Rendered],
        *,
        turns: Turns | None = None,
        on_loop: bool = False,
    ) -> Rendered:
        """The render for key: this process's, or a new one on a thread (on_loop: here, for
        renders that read no database and take well under a millisecond)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._forget_old(now)
        held = self._renders.get(key)
        # A future belongs to its loop: a test's new loop, or a failed render, starts afresh.
        if held is None or held[1].get_loop() is not loop or held[1].cancelled():
            future: asyncio.Future[Any]
            if on_loop:
                future = loop.create_future()
                future.set_result(render())
            else:
                # Off the one shared sync thread: a push does not queue behind other sockets'.
                rendering = db_async(render)
                work = rendering() if turns is None else turns.run(rendering)
                future = asyncio.ensure_future(work)
                future.add_done_callback(lambda done: self._forget_failed(key, done))
            held = self._renders[key] = (now, future)
        # Shielded: a socket that closes while it waits does not cancel the others' render.
        return await asyncio.shield(held[1])

    def _forget_old(self, now: float) -> None:
        while self._renders:
            at, future = next(iter(self._renders.values()))
            if len(self._renders) <= RENDERS_KEPT and (
                now - at < RENDER_KEEP_S or not future.done()
            ):
                return
            self._renders.popitem(last=False)

    def _forget_failed(self, key: Hashable, done: asyncio.Future[Any]) -> None:
        held = self._renders.get(key)
        if held is not None and held[1] is done and (done.cancelled() or done.exception()):
            del self._renders[key]


shared_renders = SharedRenders()


class SessionBound(AsyncWebsocketConsumer):
    """A socket that lives only as long as its session signs its user in.

    A logout is announced to the user's group and closes it at once, and a saved user (a new
    password, a deactivation) makes it re-read its session; anything else that ends the session
    (expiry, deletion) announces nothing, so the session is re-read every
    AGENTSITE_STREAM_RECHECK_S, and before a send once that long has passed since the last read.
    """

    user_group = ""
    session_checked_at = 0.0
    signed_out = False
    session_watch: asyncio.Task[None] | None = None

    async def follow_session(self, user: Any) -> None:
        self.session_checked_at = time.monotonic()  # the handshake has just verified it
        self.user_group = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        self.session_watch = asyncio.ensure_future(self._watch_session())

    async def disconnect(self, code: int) -> None:
        if self.session_watch is not None:
            self.session_watch.cancel()
        if self.user_group:
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def _watch_session(self) -> None:
        """Re-read the session now and then, so an idle socket ends with it too."""
        while not self.signed_out:
            every = max(SESSION_WATCH_MIN_S, settings.AGENTSITE_STREAM_RECHECK_S)
            await asyncio.sleep(max(0.0, self.session_checked_at + every - time.monotonic()))
            if not self.signed_out and time.monotonic() - self.session_checked_at >= every:
                await self.verify_session()

    async def session_ended(self, message: dict[str, Any]) -> None:
        """type "session.ended": the user logged out, so this socket may not stay open."""
        await self.sign_out()

    async def session_changed(self, message: dict[str, Any]) -> None:
        """type "session.changed": the user was saved (a new password?), so check at once."""
        if not self.signed_out:
            await self.verify_session()

    async def still_signed_in(self) -> bool:
        """Whether the socket may send: its session, read at most every few seconds, still holds."""
        if self.signed_out:
            return False
        if time.monotonic() - self.session_checked_at < settings.AGENTSITE_STREAM_RECHECK_S:
            return True
        return await self.verify_session()

    async def verify_session(self) -> bool:
        """Read the session again; close the socket, as a logout does, if it no longer holds."""
        session_key = self.scope["session"].session_key
        # Off the shared sync thread: every socket does this every few seconds.
        if not await db_async(session_signs_in)(session_key, self.scope["user"]):
            await self.sign_out()
            return False
        self.session_checked_at = time.monotonic()
        return True

    async def sign_out(self) -> None:
        if not self.signed_out:  # a logout and a re-read may both find the session gone
            self.signed_out = True
            await self.close(code=NOT_SIGNED_IN)


class RunConsumer(SessionBound):
    """Sends a run page every event after the seq it names, then follows the run's group.

    Exactly once, in order: the group is joined before the log is read, and live events at or
    below the last seq sent are dropped; a live event beyond the next seq is a gap, filled from
    the log. The client sends {"resume_after": N} when it sees a gap of its own, and now and then
    anyway: pushes are best-effort, and a lost last batch has nothing after it to reveal the gap.
    """

    run_id: int
    view = ""
    last_sent = 0
    group = ""
    # Batches received but not yet pushed, and the task pushing them (see run_events).
    pending: list[dict[str, Any]]
    pusher: asyncio.Task[None] | None = None
    # Events sent whose changes are not yet, the task sending those, and what this socket last
    # sent of each part of the page (by element id): an unchanged part is not sent again.
    unstated: list[dict[str, Any]]
    stater: asyncio.Task[None] | None = None
    parts_sent: dict[str, str]
    graph_task: asyncio.Task[None] | None = None
    graph_again = False
    graph_drawn_at = float("-inf")

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.pending, self.unstated, self.parts_sent = [], [], {}
        # One push renders and goes out at a time, so pushes leave in seq order.
        self.pushing = asyncio.Lock()
        user = self.scope.get("user")
        # Accept, then close with a code: a refused handshake would make the client retry.
        await self.accept()
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_SIGNED_IN)
            return
        view = await db_async(_run_view)(user, self.run_id)
        if view is None:
            await self.close(code=FORBIDDEN)
            return
        # Rights are read as the page reads them on load: the push rendered for this view
        # (shared by every socket of it) is what this socket sends.
        self.view = view
        bind_server_loop(asyncio.get_running_loop())
        await self.follow_session(user)
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.replay(after=_after_from(self.scope))

    async def disconnect(self, code: int) -> None:
        await super().disconnect(code)
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        for task in (self.pusher, self.stater, self.graph_task):
            if task is not None:
                task.cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.group:
            return
        try:
            message = json.loads(text_data or "")
        except ValueError:
            return
        resume_after = message.get("resume_after") if isinstance(message, dict) else None
        if type(resume_after) is int and 0 <= resume_after <= MAX_ID:
            if resume_after < self.last_sent:
                # The page lost pushes: what it shows of the run may be older than what was sent.
                self.parts_sent.clear()
            await self.replay(after=resume_after)

    async def run_events(self, message: dict[str, Any]) -> None:
        """type "run.events": a committed batch, in seq order.

        Handed to the pusher rather than rendered here: batches that arrive while a push
        renders go out together in the next one, so a busy run's events wait for at most one
        render, not for one render per batch before them.
        """
        self.pending.extend(message["events"])
        if self.pusher is None or self.pusher.done():
            self.pusher = asyncio.ensure_future(self._push_pending())

    async def _push_pending(self) -> None:
        await self._closing_on_failure(self._push_while_pending())

    async def _closing_on_failure(self, pushing: Awaitable[None]) -> None:
        try:
            await pushing
        except Exception:
            # As a failing handler would: close, so the client reconnects and replays.
            logger.exception("run %s: a push failed", self.run_id)
            await self.close(code=1011)

    async def _push_while_pending(self) -> None:
        while self.pending:
            async with self.pushing:
                batches, self.pending = self.pending, []
                fresh = {e["seq"]: e for e in batches if e["seq"] > self.last_sent}
                if not fresh:
                    continue
                events = [fresh[seq] for seq in sorted(fresh)]
                if [e["seq"] for e in events] != list(
                    range(self.last_sent + 1, self.last_sent + 1 + len(events))
                ):
                    # Something committed before these has not reached us (yet): read the log.
                    await self._replay_holding_lock(after=self.last_sent)
                else:
                    await self._send_events(events)

    async def run_transient(self, message: dict[str, Any]) -> None:
        """type "run.transient": answer tokens as they stream (the stored answer follows)."""
        if message.get("kind") == "answer_delta" and await self.still_signed_in():
            await self.send(text_data=answer_delta_fragment(message["payload"].get("text", "")))

    async def replay(self, *, after: int) -> None:
        async with self.pushing:
            await self._replay_holding_lock(after=after)

    async def _replay_holding_lock(self, *, after: int) -> None:
        def read() -> tuple[list[dict[str, Any]], str]:
            events = run_events_after(self.run_id, after)
            return events, live_timeline(events) if events else ""

        # The log may hold thousands of events: read and drawn on a thread.
        events, timeline = await db_async(read)()
        if events:
            await self._send_events(events, timeline=timeline)
        else:
            self.last_sent = max(self.last_sent, after)

    async def _send_events(self, events: list[dict[str, Any]], *, timeline: str = "") -> None:
        """The events' timeline rows now; what they changed (_send_state) follows."""
        if self.signed_out:
            return
        if not timeline:
            # Once per batch for every socket on the run (no view sees them differently);
            # seqs run without gaps, so the first and last name the batch.
            key = ("timeline", self.run_id, events[0]["seq"], events[-1]["seq"])
            timeline = await shared_renders.get(
                key, lambda: live_timeline(events), on_loop=len(events) <= TIMELINE_ON_LOOP
            )
        # The credential is checked just before the send: nothing leaves after it lapsed.
        if not await self.still_signed_in():
            return
        self.last_sent = max(self.last_sent, events[-1]["seq"])
        await self.send(text_data=timeline)
        self.unstated.extend(events)
        if self.stater is None or self.stater.done():
            self.stater = asyncio.ensure_future(self._closing_on_failure(self._send_state()))

    async def _send_state(self) -> None:
        """What the events sent changed, as the run is now: one render at a time, so events
        sent while one renders are stated together in the next, the latest state last."""
        user = self.scope["user"]
        while self.unstated and not self.signed_out:
            events, self.unstated = self.unstated, []
            seqs = [event["seq"] for event in events]
            # Once per batch and view for every socket on the run.
            key = ("state", self.run_id, self.view, min(seqs), max(seqs), len(seqs))
            state = await shared_renders.get(key, partial(live_state, self.run_id, events, user))
            sent = self.parts_sent
            changed = "".join(html for at, html in state.parts.items() if sent.get(at) != html)
            # The rows first, the marker last: a page that has the marker has the rest.
            messages = [html for html in (state.rows_html, changed + state.stated_html) if html]
            if not await self.still_signed_in():
                return
            self.parts_sent.update(state.parts)
            for html in messages:
                await self.send(text_data=html)
            if live_fragment_needs_graph(events):
                self._graph_due()

    def _graph_due(self) -> None:
        """Redraw the graph: one drawing at a time per socket, at most one every
        GRAPH_REDRAW_S, the latest state last."""
        if self.graph_task is not None and not self.graph_task.done():
            self.graph_again = True
            return
        self.graph_task = asyncio.ensure_future(self._send_graph())

    async def _send_graph(self) -> None:
        while True:
            # A busy run's steps change faster than it is worth drawing them (each drawing is
            # a `dot` run, CPU the pushes of events need): the latest state, now and then.
            await asyncio.sleep(max(0.0, self.graph_drawn_at + GRAPH_REDRAW_S - time.monotonic()))
            self.graph_again = False
            self.graph_drawn_at = time.monotonic()
            # The graph shows no permission: one drawing per run and state for every socket.
            key = ("graph", self.run_id, self.last_sent)
            html = await shared_renders.get(
                key, lambda: graph_fragment(self.run_id), turns=graph_turns
            )
            if html and not self.signed_out:
                await self.send(text_data=html)
            if not self.graph_again:
                return


class PendingApprovalsConsumer(SessionBound):
    """Keeps the nav badge current: a new count whenever the inbox changes."""

    joined = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        await self.accept()
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_SIGNED_IN)
            return
        # Everyone signed in: a reviewer's count is what they may decide, an author's the
        # questions their runs ask them (selectors.approvals.pending_approvals_count).
        bind_server_loop(asyncio.get_running_loop())
        await self.follow_session(user)
        await self.channel_layer.group_add(INBOX_GROUP, self.channel_name)
        self.joined = True
        await self.inbox_changed({})  # anything decided while the socket was away

    async def disconnect(self, code: int) -> None:
        await super().disconnect(code)
        if self.joined:
            await self.channel_layer.group_discard(INBOX_GROUP, self.channel_name)

    async def inbox_changed(self, message: dict[str, Any]) -> None:
        """type "inbox.changed": an approval was requested or decided somewhere."""
        if not await self.still_signed_in():
            return
        count = await db_async(pending_approvals_count)(self.scope["user"])
        await self.send(
            text_data=render_to_string(
                "base.html#pending_badge", {"pending_approvals": count, "oob": True}
            )
        )


def _run_view(user: Any, run_id: int) -> str | None:
    """The permission view of the run's pushes the user gets (None: they may not see it)."""
    run = run_visible_get(user=user, run_id=run_id)
    return None if run is None else push_view(run, user)


def _after_from(scope: dict[str, Any]) -> int:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return whole_number(query.get("after", ["0"])[0]) or 0
