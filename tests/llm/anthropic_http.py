"""The Anthropic API over HTTP, as tests serve it to the real SDK through a mock transport."""

import json

import anthropic
import httpx2


def client_served_by(handler):
    """The real SDK client, its requests answered by handler(request) -> httpx2.Response."""
    return anthropic.Anthropic(
        api_key="test-key",
        base_url="https://api.example.test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def sse(*events):
    lines = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return httpx2.Response(
        200, content=lines.encode(), headers={"content-type": "text/event-stream"}
    )


def stream_events(deltas, *, input_usage, output_tokens):
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_02",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"output_tokens": 1, **input_usage},
        },
    }
    return [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": d}}
            for d in deltas
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]
