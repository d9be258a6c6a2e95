"""Publishing to the channel layer: order kept, streamed text coalesced while it waits."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from plans.journal import events
from plans.journal.events import Publisher


class RecordingLayer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


@pytest.fixture
def layer(monkeypatch: pytest.MonkeyPatch) -> RecordingLayer:
    recording = RecordingLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: recording)
    return recording


def held_publisher() -> tuple[Publisher, threading.Event]:
    """A publisher whose drain task cannot send until the returned gate is set."""
    publisher = Publisher()
    loop, _ = publisher._target()
    gate = threading.Event()
    loop.call_soon_threadsafe(gate.wait)  # blocks the loop: everything sent now waits
    return publisher, gate


def test_text_streamed_while_the_last_piece_waits_goes_out_as_one_message(layer):
    publisher, gate = held_publisher()

    for piece in ("Total ", "is ", "92800"):
        publisher.send_text("run-1", "answer_delta", piece)
    gate.set()
    publisher.wait_idle()

    assert layer.sent == [
        (
            "run-1",
            {
                "type": "run.transient",
                "kind": "answer_delta",
                "payload": {"text": "Total is 92800"},
            },
        )
    ]


def test_text_is_never_moved_ahead_of_a_message_sent_after_it(layer):
    publisher, gate = held_publisher()

    publisher.send_text("run-1", "answer_delta", "a")
    publisher.send("run-1", {"type": "run.events", "events": []})
    publisher.send_text("run-1", "answer_delta", "b")
    publisher.send_text("run-2", "answer_delta", "other run")
    publisher.send_text("run-1", "answer_delta", "c")
    gate.set()
    publisher.wait_idle()

    texts = [
        (group, message.get("payload", {}).get("text", message["type"]))
        for group, message in layer.sent
    ]
    assert texts == [
        ("run-1", "a"),
        ("run-1", "run.events"),
        ("run-1", "bc"),
        ("run-2", "other run"),
    ]


def test_text_sent_after_the_last_piece_went_out_is_a_new_message(layer):
    publisher = Publisher()

    publisher.send_text("run-1", "answer_delta", "first")
    publisher.wait_idle()
    publisher.send_text("run-1", "answer_delta", "second")
    publisher.wait_idle()

    assert [message["payload"]["text"] for _, message in layer.sent] == ["first", "second"]


def test_a_group_nobody_in_the_process_joined_is_not_sent_to(monkeypatch):
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    sent: list[tuple[str, Any]] = []
    monkeypatch.setattr(
        events.publisher, "send", lambda group, message: sent.append((group, message))
    )
    monkeypatch.setattr(
        events.publisher, "send_text", lambda group, kind, text: sent.append((group, text))
    )

    events.publish_events(1, [{"run": 1, "seq": 1, "kind": "run_finished", "payload": {}}])
    events.publish_text(1, "answer_delta", "Total")
    assert sent == []  # no hop to the publishing loop: a socket joining later reads the log

    layer.groups["run-1"] = {"specific.socket": 0.0}  # a socket watching run 1
    events.publish_events(1, [{"run": 1, "seq": 2, "kind": "step_started", "payload": {}}])
    events.publish_text(1, "answer_delta", "Total")
    assert [group for group, _ in sent] == ["run-1", "run-1"]
