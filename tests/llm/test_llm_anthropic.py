"""The Anthropic backend through the real SDK, with HTTP served by an in-process mock transport."""

import json
import random

import anthropic
import httpx2
import pytest

from plans.llm.anthropic_model import BACKOFF_BASE_S, RETRY_AFTER_CAP_S, AnthropicModel
from plans.llm.base import ModelError, Usage
from plans.llm.prompts import answer_request, planner_request
from tests.llm.anthropic_http import message as api_message
from tests.llm.anthropic_http import model_served_by, sse, stream_events

CATALOG = [
    {
        "name": "price",
        "description": "Price of an item in INR.",
        "input_schema": {"type": "object", "properties": {"item": {"type": "string"}}},
        "destructive": False,
    }
]
PLAN_TEXT = (
    '{"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]}'
)


class Server:
    """Serves queued responses and records every request the SDK sent."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        response = self.responses.pop(0)
        if isinstance(response, Exception):
            raise response
        return response

    def body(self, index=0):
        return json.loads(self.requests[index].content)


def model_for(server, *, max_retries=3, sleeps=None):
    sleep = sleeps.append if sleeps is not None else lambda seconds: None
    return model_served_by(server, max_retries=max_retries, sleep=sleep, rng=random.Random(7))


def message(text, **usage):
    return api_message(text, usage={"input_tokens": 10, "output_tokens": 20, **usage})


def error(status, kind, text, headers=None):
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return httpx2.Response(status, json=body, headers=headers or {})


def plan_request():
    return planner_request(
        goal="Total price of an iPhone 16", catalog=CATALOG, max_steps=5, model="claude-test"
    )


def answer():
    outcome = {
        "id": 1,
        "tool": "price",
        "args": {"item": "iPhone 16"},
        "status": "succeeded",
        "result": 79900,
        "error": "",
    }
    return answer_request(
        goal="Price of an iPhone 16", plan={}, outcomes=[outcome], model="claude-test"
    )


def test_a_plan_is_requested_with_a_cached_system_prefix_and_its_usage_recorded():
    server = Server(
        message(PLAN_TEXT, cache_read_input_tokens=1800, cache_creation_input_tokens=300)
    )
    request = plan_request()
    completion = model_for(server).complete(request)

    assert completion.text == PLAN_TEXT
    assert completion.model == "claude-test"
    assert completion.usage == Usage(
        input_tokens=10, output_tokens=20, cache_read_tokens=1800, cache_write_tokens=300
    )
    assert completion.latency_ms >= 0

    [sent] = server.requests
    assert sent.url.path == "/v1/messages"
    body = server.body()
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 2048
    assert "stream" not in body or body["stream"] is False
    assert body["system"] == [
        {"type": "text", "text": request.system},
        {
            "type": "text",
            "text": request.system_blocks()[1],
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert '"name":"price"' in body["system"][1]["text"]
    [user] = body["messages"]
    assert user["role"] == "user"
    assert "<goal>\nTotal price of an iPhone 16\n</goal>" in user["content"]
    # Our metadata never leaves the process.
    assert "metadata" not in body


def test_absent_cache_counts_are_recorded_as_zero():
    server = Server(message("ok", cache_read_input_tokens=None))
    usage = model_for(server).complete(plan_request()).usage
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (0, 0)


def test_a_streamed_answer_passes_each_delta_on_in_order_and_returns_the_whole():
    deltas = ["The price ", "of an iPhone 16 ", "is INR ", "79900."]
    usage = {"input_tokens": 120, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 7}
    server = Server(sse(*stream_events(deltas, input_usage=usage, output_tokens=15)))
    received = []

    completion = model_for(server).complete(answer(), on_text=received.append)

    assert received == deltas
    assert completion.text == "The price of an iPhone 16 is INR 79900."
    assert completion.usage == Usage(
        input_tokens=120, output_tokens=15, cache_read_tokens=50, cache_write_tokens=7
    )
    body = server.body()
    assert body["stream"] is True
    assert body["max_tokens"] == 1024
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert '<tool_result step="1">\n79900\n</tool_result>' in body["messages"][0]["content"]


def test_an_overloaded_api_is_retried_once_after_a_full_jitter_delay():
    server = Server(error(529, "overloaded_error", "Overloaded"), message(PLAN_TEXT))
    sleeps = []

    completion = model_for(server, sleeps=sleeps).complete(plan_request())

    assert completion.text == PLAN_TEXT
    assert len(server.requests) == 2
    [delay] = sleeps
    # First retry: uniform(0, min(cap, base * 2**0)).
    assert 0 <= delay <= BACKOFF_BASE_S


def test_a_bad_request_fails_at_once_with_the_apis_message():
    server = Server(error(400, "invalid_request_error", "max_tokens: 999999 is too large"))
    sleeps = []

    with pytest.raises(ModelError, match="max_tokens: 999999 is too large") as raised:
        model_for(server, sleeps=sleeps).complete(plan_request())

    assert "HTTP 400" in str(raised.value)
    assert len(server.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize("status", [401, 403, 404])
def test_auth_and_not_found_errors_are_not_retried(status):
    server = Server(error(status, "authentication_error", "invalid x-api-key"))
    with pytest.raises(ModelError, match=f"HTTP {status}.*invalid x-api-key"):
        model_for(server).complete(plan_request())
    assert len(server.requests) == 1


def test_repeated_server_errors_exhaust_the_retries_with_growing_backoff():
    server = Server(*(error(500, "api_error", "Internal server error") for _ in range(3)))
    sleeps = []

    with pytest.raises(ModelError, match=r"after 3 attempts.*HTTP 500 api_error"):
        model_for(server, max_retries=2, sleeps=sleeps).complete(plan_request())

    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= BACKOFF_BASE_S
    assert 0 <= sleeps[1] <= 2 * BACKOFF_BASE_S


def test_a_retry_after_header_sets_the_wait_up_to_a_cap():
    server = Server(
        error(429, "rate_limit_error", "slow down", headers={"retry-after": "3"}),
        error(429, "rate_limit_error", "slow down", headers={"retry-after": "86400"}),
        message("ok"),
    )
    sleeps = []
    model_for(server, sleeps=sleeps).complete(plan_request())
    assert sleeps == [3.0, RETRY_AFTER_CAP_S]


def test_timeouts_and_connection_errors_are_retried():
    server = Server(
        httpx2.ReadTimeout("read timed out"),
        httpx2.ConnectError("connection refused"),
        message("ok"),
    )
    sleeps = []
    assert model_for(server, sleeps=sleeps).complete(plan_request()).text == "ok"
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_exhausted_retries_name_the_last_connection_error():
    server = Server(httpx2.ConnectError("connection refused"), httpx2.ReadTimeout("slow"))
    with pytest.raises(ModelError, match="after 2 attempts; last error: the request timed out"):
        model_for(server, max_retries=1).complete(plan_request())


def test_a_stream_refused_before_any_text_is_retried():
    deltas = ["fine"]
    usage = {"input_tokens": 5}
    server = Server(
        error(529, "overloaded_error", "Overloaded"),
        sse(*stream_events(deltas, input_usage=usage, output_tokens=2)),
    )
    received = []
    completion = model_for(server).complete(answer(), on_text=received.append)
    assert received == ["fine"] and completion.text == "fine"
    assert len(server.requests) == 2


def test_a_stream_that_breaks_after_text_was_shown_is_not_retried():
    events = stream_events(["partial "], input_usage={"input_tokens": 5}, output_tokens=2)[:3]
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server = Server(sse(*events), message("never sent"))
    received = []

    with pytest.raises(
        ModelError, match=r"broke off part-way.*HTTP 529 overloaded_error"
    ) as raised:
        model_for(server).complete(answer(), on_text=received.append)

    assert received == ["partial "]
    assert len(server.requests) == 1
    # The input was billed: message_start said so, and the error carries it to be recorded.
    assert raised.value.usage == Usage(input_tokens=5, output_tokens=1)


def test_the_default_client_has_sdk_retries_off_and_the_configured_timeout(settings):
    settings.ANTHROPIC_API_KEY = "sk-test"
    settings.AGENTSITE_MODEL_TIMEOUT_S = 12.5
    settings.AGENTSITE_MODEL_MAX_RETRIES = 4
    model = AnthropicModel()
    assert model.client.max_retries == 0
    assert model.client.timeout == 12.5
    assert model.client.api_key == "sk-test"
    assert model.max_retries == 4


def test_an_injected_client_with_sdk_retries_has_them_turned_off():
    server = Server(error(500, "api_error", "boom"), error(500, "api_error", "boom"))
    client = anthropic.Anthropic(
        api_key="test-key",
        base_url="https://api.example.test",
        max_retries=5,
        http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
    )
    model = AnthropicModel(client, max_retries=1, sleep=lambda seconds: None)
    assert model.client.max_retries == 0
    with pytest.raises(ModelError, match="after 2 attempts"):
        model.complete(plan_request())
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "reply",
    [
        httpx2.Response(200, json={"id": "msg_01", "type": "message", "content": None}),
        httpx2.Response(200, text="<html>gateway</html>", headers={"content-type": "text/html"}),
    ],
    ids=["json-not-a-message", "html-page"],
)
def test_a_reply_that_is_not_a_message_fails_with_a_model_error_and_is_not_retried(reply):
    server = Server(reply, message("never sent"))

    with pytest.raises(ModelError, match="reply could not be read"):
        model_for(server).complete(plan_request())

    assert len(server.requests) == 1


def test_a_stream_of_unreadable_events_fails_with_a_model_error():
    server = Server(
        httpx2.Response(
            200,
            text="event: message_start\ndata: {not json\n\n",
            headers={"content-type": "text/event-stream"},
        )
    )
    with pytest.raises(ModelError, match="reply could not be read"):
        model_for(server).complete(answer(), on_text=lambda text: None)


@pytest.mark.parametrize("value", ["0", "Thu, 01 Jan 1970 00:00:00 GMT"])
def test_a_retry_after_of_zero_or_in_the_past_backs_off_as_usual(value):
    server = Server(
        error(429, "rate_limit_error", "slow down", headers={"retry-after": value}), message("ok")
    )
    sleeps = []
    model_for(server, sleeps=sleeps).complete(plan_request())
    [delay] = sleeps
    assert 0 < delay <= BACKOFF_BASE_S


def test_a_negative_retry_count_is_refused():
    with pytest.raises(ValueError, match="max_retries must be 0 or more, got -1"):
        model_for(Server(), max_retries=-1)


def message_with(content):
    return api_message(content=content, usage={"input_tokens": 10, "output_tokens": 20})


def test_separate_text_blocks_are_kept_apart_and_cited_pieces_join_as_one_text():
    citation = {
        "type": "char_location",
        "cited_text": "AirPods 4 cost 12,900 INR",
        "document_index": 0,
        "document_title": "catalog",
        "start_char_index": 0,
        "end_char_index": 25,
    }
    server = Server(
        message_with(
            [{"type": "text", "text": "The total is"}, {"type": "text", "text": "92,800 INR"}]
        ),
        message_with(
            [
                {"type": "text", "text": "AirPods cost "},
                {"type": "text", "text": "12,900 INR", "citations": [citation]},
                {"type": "text", "text": " each."},
            ]
        ),
    )
    model = model_for(server)

    assert model.complete(plan_request()).text == "The total is\n\n92,800 INR"
    assert model.complete(plan_request()).text == "AirPods cost 12,900 INR each."


def test_a_stream_that_fails_after_it_began_keeps_that_attempts_usage_when_retried():
    began = stream_events([], input_usage={"input_tokens": 700}, output_tokens=0)[:1]
    began.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server = Server(
        sse(*began), sse(*stream_events(["ok"], input_usage={"input_tokens": 700}, output_tokens=3))
    )

    completion = model_for(server).complete(answer(), on_text=lambda text: None)

    assert completion.text == "ok" and len(server.requests) == 2
    assert completion.usage.input_tokens == 1400  # both attempts were billed for their input
    assert completion.stop_reason == "end_turn"


def test_one_hour_cache_writes_and_server_tool_use_are_read_from_the_usage():
    reply = message(
        PLAN_TEXT,
        cache_creation_input_tokens=1500,
        cache_creation={"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 1000},
        server_tool_use={"web_search_requests": 2, "web_fetch_requests": 1},
    )

    usage = model_for(Server(reply)).complete(plan_request()).usage

    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens) == (1500, 1000)
    assert (usage.web_search_requests, usage.web_fetch_requests) == (2, 1)


def test_a_streamed_answer_puts_the_blank_line_between_text_blocks_the_stored_one_has():
    events = stream_events(["The total is"], input_usage={"input_tokens": 9}, output_tokens=6)
    second = [
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "  92,800 INR"},
        },
        {"type": "content_block_stop", "index": 1},
    ]
    server = Server(sse(*events[:4], *second, *events[4:]))
    received = []

    completion = model_for(server).complete(answer(), on_text=received.append)

    assert completion.text == "The total is\n\n92,800 INR"
    assert "".join(received) == completion.text


def test_a_plan_calls_schema_is_made_strict_once_per_request(monkeypatch):
    from plans.engine import plan_json_schema
    from plans.llm.anthropic_model import request_params
    from plans.tools import get_registry

    transform = anthropic.transform_schema
    made = []

    def counted(schema):
        made.append(1)
        return transform(schema)

    monkeypatch.setattr(anthropic, "transform_schema", counted)
    schema = plan_json_schema(get_registry(), max_steps=5)
    request = planner_request(
        goal="g", catalog=CATALOG, max_steps=5, model="claude-sonnet-5-5", reply_schema=schema
    )

    params = request_params(request)

    assert params["output_config"]["format"]["type"] == "json_schema"
    assert len(made) == 1
