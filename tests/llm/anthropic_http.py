"""The Anthropic API over HTTP, as tests serve it to the real SDK through a mock transport.

Runs use such a model through the fixtures in tests/runtime/conftest.py.
"""

import json

import anthropic
import httpx2

from plans.llm.anthropic_model import AnthropicModel


def client_served_by(handler):
    """The real SDK client, its requests answered by handler(request) -> httpx2.Response."""
    return anthropic.Anthropic(
        api_key="test-key",
        base_url="https://api.example.test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def model_served_by(handler, **options):
    """The Anthropic backend on client_served_by(handler); it never sleeps unless told to."""
    options.setdefault("sleep", lambda seconds: None)
    return AnthropicModel(client_served_by(handler), **options)


def message(text=None, *, content=None, stop_reason="end_turn", usage=None):
    """A whole (unstreamed) reply: the text as its one block, or the content blocks given."""
    return httpx2.Response(
        200,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5-5",
            "content": content if content is not None else [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 40, "output_tokens": 30},
        },
    )


def sse(*events):
    lines = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return httpx2.Response(
        200, content=lines.encode(), headers={"content-type": "text/event-stream"}
    )


def stream_events(deltas, *, input_usage, output_tokens, stop_reason="end_turn"):
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
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def streamed(deltas, *, input_tokens, output_tokens, stop_reason="end_turn"):
    """A streamed reply of one text block made of the deltas."""
    events = stream_events(
        deltas,
        input_usage={"input_tokens": input_tokens},
        output_tokens=output_tokens,
        stop_reason=stop_reason,
    )
    return sse(*events)


class Claude:
    """API-shaped replies: a plan, then (when told steps failed) the replan, streamed answers.

    Keeps each request's last message (prompts), system text (where the catalog is) and what
    it was for (purposes).
    """

    def __init__(self, first_plan, replans):
        self.first_plan = first_plan
        self.replans = list(replans)
        self.purposes = []
        self.prompts = []
        self.systems = []

    def __call__(self, request):
        body = json.loads(request.content)
        text = body["messages"][-1]["content"]
        self.prompts.append(text)
        self.systems.append(json.dumps(body.get("system")))
        if body.get("stream"):
            self.purposes.append("answer")
            answer = "Here is what happened: " + text[-200:]
            return streamed([answer], input_tokens=100, output_tokens=30)
        usage = {"input_tokens": 100, "output_tokens": 50}
        if "Some steps of the plan below failed" in text:
            self.purposes.append("replan")
            return message(self.replans.pop(0), usage=usage)
        self.purposes.append("plan")
        return message(self.first_plan, usage=usage)
