"""The run event log: seq allocation, insertion, and publishing to websocket groups after commit."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from django.utils import timezone

from plans.bulk import JSONText, insert_rows, update_one_returning, update_rows
from plans.guards.audit import GENESIS, event_chain
from plans.guards.redaction import redacted_json
from plans.journal.rollup import RUN_ROLLUP_FIELDS, RunShare, run_share_moved
from plans.models import Run, RunEvent

logger = logging.getLogger(__name__)

INBOX_GROUP = "approvals-inbox"


class LeaseLost(Exception):
    """The writer no longer holds the run's lease; nothing it tried to write was kept."""


def run_group(run_id: int) -> str:
    return f"run-{run_id}"


def user_group(user_id: int) -> str:
    """Every socket a user has open, so logging out can close them all."""
    return f"user-{user_id}"


EVENT_KINDS = frozenset(RunEvent.Kind.values)


def append_events(
    run_id: int,
    entries: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    lease_token: Any = None,
    run_fields: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Append events (and optional run field updates) inside the caller's transaction.

    With a lease token the write is fenced: if the lease expired or another worker took it,
    LeaseLost is raised. Returns the events as published, and whether cancellation was requested.
    """
    entries = list(entries)
    unknown = [kind for kind, _ in entries if kind not in EVENT_KINDS]
    if unknown:
        # Before anything is written: the pages and the audit know these kinds only.
        raise ValueError(f"unknown event kind(s) {unknown}: add them to RunEvent.Kind")
    # The costs rollup follows the run's status, tokens, cost and tools (plans.journal.rollup).
    moves_share = bool(run_fields) and not RUN_ROLLUP_FIELDS.isdisjoint(run_fields or {})
    share_before = RunShare.locked(run_id) if moves_share else None
    fence: dict[str, Any] = {}
    if lease_token is not None:
        fence = {"lease_token": lease_token}
    # The UPDATE locks the run row, so concurrent writers allocate disjoint seq ranges.
    updated = update_one_returning(
        Run,
        run_id,
        increments={"last_seq": len(entries)},
        values=run_fields or {},
        where=fence,
        where_after={"lease_expires_at": timezone.now()} if fence else {},
        returning=("last_seq", "cancel_requested", "last_event_hash"),
    )
    if updated is None:
        if lease_token is not None:
            raise LeaseLost(f"run {run_id}: lease {lease_token} is no longer held")
        raise Run.DoesNotExist(f"run {run_id} does not exist")
    last_seq, cancel_requested, prev_hash = updated
    cancel_requested = bool(cancel_requested)
    if any(kind == "run_created" for kind, _ in entries):
        created = RunShare.locked(run_id)
        assert created is not None
        run_share_moved(None, created)
    elif share_before is not None:
        run_share_moved(share_before, share_before.after(run_fields or {}))
    if not entries:
        return [], cancel_requested
    now = timezone.now()
    at = now.isoformat()
    first = last_seq - len(entries) + 1
    stored = [(kind, *redacted_json(dict(payload))) for kind, payload in entries]
    chain = event_chain(
        run_id=run_id,
        first_seq=first,
        prev_hash=prev_hash or GENESIS,
        entries=((kind, payload_json, now) for kind, _, payload_json in stored),
    )
    rows, events = [], []
    for (kind, payload, payload_json), (seq, prev_hash, digest) in zip(stored, chain, strict=True):
        rows.append(
            {
                "run_id": run_id,
                "seq": seq,
                "kind": kind,
                "payload": JSONText(payload_json),
                "at": now,
                "prev_hash": prev_hash,
                "lease_token": lease_token,
                "hash": digest,
            }
        )
        events.append({"run": run_id, "seq": seq, "kind": kind, "payload": payload, "at": at})
    insert_rows(RunEvent, rows)
    update_rows(Run, [{"id": run_id, "last_event_hash": rows[-1]["hash"]}], ["last_event_hash"])
    transaction.on_commit(lambda: announce_committed(run_id, events))
    return events, cancel_requested


def event_message(event: RunEvent) -> dict[str, Any]:
    """A stored event in the form it is published (for replays from the log)."""
    return {
        "run": event.run_id,
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
        "at": event.at.isoformat(),
    }


# --- Publishing -------------------------------------------------------------------------------


class Publisher:
    """Sends channel-layer messages in order, from any thread, without blocking the sender.

    One drain task sends them one at a time. It lives on the server's event loop when the
    in-memory layer is used inside the server (that layer's queues belong to that loop), and
    otherwise on a loop of its own thread (so Redis connections are reused, not reopened).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] | None = None
        self._server_loop: asyncio.AbstractEventLoop | None = None
        # Per group, the streamed-text message still waiting to be sent.
        self._streaming: dict[str, dict[str, Any]] = {}

    def bind_server_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._server_loop is not loop:
                self._server_loop = loop
                self._loop = self._queue = None  # the next send starts a drain task there

    def send(self, group: str, message: dict[str, Any]) -> None:
        with self._lock:
            self._streaming.pop(group, None)  # later text must not jump ahead of this message
        self._put(group, message)

    def send_text(self, group: str, kind: str, text: str) -> None:
        """Send a piece of streamed text; while the group's last piece still waits, extend it.

        A burst of tokens then costs one message, not one per token, for the layer and the
        browsers alike.
        """
        with self._lock:
            waiting = self._streaming.get(group)
            if waiting is not None and waiting["kind"] == kind:
                waiting["payload"]["text"] += text
                return
            message = {"type": "run.transient", "kind": kind, "payload": {"text": text}}
            self._streaming[group] = message
        self._put(group, message)

    def taken(self, group: str, message: dict[str, Any]) -> None:
        """The drain task is sending message: text may no longer be added to it."""
        with self._lock:
            if self._streaming.get(group) is message:
                del self._streaming[group]

    def _put(self, group: str, message: dict[str, Any]) -> None:
        loop, queue = self._target()
        loop.call_soon_threadsafe(queue.put_nowait, (group, message))

    def wait_idle(self, timeout: float = 5.0) -> None:
        """Block until everything sent so far has been handed to the channel layer."""
        loop, queue = self._target()
        asyncio.run_coroutine_threadsafe(queue.join(), loop).result(timeout)

    def _target(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue]:
        with self._lock:
            if self._loop is None or self._loop.is_closed() or self._queue is None:
                server = self._server_loop
                use_server = isinstance(get_channel_layer(), InMemoryChannelLayer) and (
                    server is not None and server.is_running()
                )
                loop = server if use_server and server is not None else _start_loop_thread()
                queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
                loop.call_soon_threadsafe(lambda: loop.create_task(_drain(queue, self)))
                self._loop, self._queue = loop, queue
            return self._loop, self._queue


def _start_loop_thread() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="channel-publisher", daemon=True).start()
    return loop


async def _drain(queue: asyncio.Queue[tuple[str, dict[str, Any]]], sender: Publisher) -> None:
    while True:
        group, message = await queue.get()
        sender.taken(group, message)
        try:
            layer = get_channel_layer()
            if layer is not None:
                await layer.group_send(group, message)
        except Exception:
            # A lost push is recovered by the client's seq gap check; never fail for it.
            logger.exception("could not publish to %s", group)
        finally:
            queue.task_done()


publisher = Publisher()


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called from the server's loop (a consumer connecting) so pushes are delivered there."""
    publisher.bind_server_loop(loop)


# Events that change what the approvals inbox holds (decisions announce themselves).
INBOX_KINDS = frozenset({"approval_requested", "approval_stale", "question_asked", "run_finished"})


EventsListener = Callable[[int, list[dict[str, Any]]], None]
_listeners: list[EventsListener] = []


def on_events_committed(listener: EventsListener) -> None:
    """Call listener(run_id, events) after each commit of a run's events (integrations' hook).

    It runs in the committing thread, often the executor's: it must hand the work off, not do it.
    """
    if listener not in _listeners:
        _listeners.append(listener)


def announce_committed(run_id: int, events: list[dict[str, Any]]) -> None:
    """Publish committed events and tell the listeners (after commit, or once a commit whose
    answer was lost is known to have happened)."""
    publish_events(run_id, events)
    for listener in _listeners:
        try:
            listener(run_id, events)
        except Exception:
            logger.exception("an events listener failed for run %s", run_id)


def publish_events(run_id: int, events: list[dict[str, Any]]) -> None:
    """One message per commit: consumers receive the batch in seq order."""
    group_send(run_group(run_id), {"type": "run.events", "events": events})
    if any(event["kind"] in INBOX_KINDS for event in events):
        group_send(INBOX_GROUP, {"type": "inbox.changed"})


def publish_text(run_id: int, kind: str, text: str) -> None:
    """Stream text not worth storing (answer tokens); the stored event with all of it follows."""
    group = run_group(run_id)
    if heard(group):
        publisher.send_text(group, kind, text)


def group_send(group: str, message: dict[str, Any]) -> None:
    """Queue a message for a channel group; delivery is best-effort (clients resync by seq)."""
    if heard(group):
        publisher.send(group, message)


def heard(group: str) -> bool:
    """False when nobody can receive the group's messages: the in-process layer has no member
    for it. A message then costs nothing (no hop to the publishing loop, no wake of it).

    Safe to skip: a consumer joins its group first and then reads the log from the seq it
    names, so what was committed before it joined reaches it from the log. Another layer
    (Redis: members in other processes) is always sent to.
    """
    layer = get_channel_layer()
    return not isinstance(layer, InMemoryChannelLayer) or bool(layer.groups.get(group))
