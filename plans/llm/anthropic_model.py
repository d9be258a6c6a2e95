"""The Anthropic Messages API as a ChatModel, with our own retries and prompt caching.

Named anthropic_model rather than anthropic so that `plans.llm.anthropic` can never be mistaken
for (or replace, as a package attribute) the SDK module `anthropic` imported here.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
from django.conf import settings

from plans.engine.policies import backoff_delay
from plans.llm import plan_schema_setting
from plans.llm.base import Completion, ModelError, ModelRequest, Usage

logger = logging.getLogger(__name__)

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0
RETRY_AFTER_CAP_S = 60.0  # a longer wait than this is not worth holding a run for

# Statuses worth another attempt: request timeout, rate limit, and every server error (529 too).
RETRYABLE_STATUSES = frozenset({408, 429})
# An error event inside a 200 stream carries only its type; map it to the status it stands for.
_STREAM_ERROR_STATUS = {
    "overloaded_error": 529,
    "api_error": 500,
    "rate_limit_error": 429,
    "timeout_error": 504,
}


@dataclass
class _Shown:
    """What one streamed attempt passed on before it ended: any text, and the reply so far."""

    text: bool = False
    message: Any = None


@dataclass(frozen=True)
class _Failure:
    """One failed attempt: what went wrong, whether to try again, and any wait the server asked."""

    description: str
    retryable: bool
    retry_after: float | None = None


class AnthropicModel:
    """Claude through the SDK, retrying 408, 429, 5xx (529 too), timeouts and connection errors.

    Other errors (400, 401, 403, 404, ...) fail at once. latency_ms is the successful attempt's.
    """

    def __init__(
        self,
        client: anthropic.Anthropic | None = None,
        *,
        max_retries: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if client is None:
            client = anthropic.Anthropic(
                api_key=settings.ANTHROPIC_API_KEY,
                max_retries=0,
                timeout=settings.AGENTSITE_MODEL_TIMEOUT_S,
            )
        elif isinstance(client, anthropic.Anthropic) and client.max_retries:
            # SDK retries under ours would multiply the attempts and hide them from our backoff.
            client = client.with_options(max_retries=0)
        self.client = client
        self.max_retries = (
            settings.AGENTSITE_MODEL_MAX_RETRIES if max_retries is None else max_retries
        )
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {self.max_retries}")
        self.sleep = sleep
        self.rng = rng if rng is not None else random.Random()

    def complete(
        self, request: ModelRequest, *, on_text: Callable[[str], None] | None = None
    ) -> Completion:
        params = request_params(request)
        attempts = self.max_retries + 1
        # Usage of attempts that failed after the API began replying: billed, so kept.
        earlier = Usage()
        for attempt in range(1, attempts + 1):
            shown = _Shown()
            started = time.perf_counter()
            try:
                message = self._attempt(params, on_text, shown)
                text, usage = message_text(message), message_usage(message)
            except _UNREADABLE_REPLY as err:
                # The API answered, but not in the Messages shape (a proxy's page, a cut JSON).
                raise ModelError(
                    f"The model API's reply could not be read: {type(err).__name__}: {err}"
                ) from err
            except (anthropic.APIError, httpx2.TransportError) as err:
                failure = _describe(err)
                if shown.message is not None:
                    # The reply had begun (message_start reported its input): billed.
                    earlier = earlier + message_usage(shown.message)
                final = _final_error(failure, shown, earlier, attempt=attempt, attempts=attempts)
                if final is not None:
                    raise final from err
                delay = self._delay(attempt, failure.retry_after)
                logger.warning(
                    "model call attempt %d/%d failed (%s); retrying in %.2fs",
                    attempt,
                    attempts,
                    failure.description,
                    delay,
                )
                self.sleep(delay)
                continue
            # The successful attempt's own time: failed attempts and backoff sleeps are not
            # the model's latency (they show up in the step's or run's wall time instead).
            latency_ms = round((time.perf_counter() - started) * 1000)
            return Completion(
                text=text,
                usage=usage + earlier if earlier.total_tokens else usage,
                model=request.model,
                latency_ms=latency_ms,
                stop_reason=str(getattr(message, "stop_reason", None) or ""),
            )
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _attempt(
        self,
        params: dict[str, Any],
        on_text: Callable[[str], None] | None,
        shown: _Shown,
    ) -> Any:
        if on_text is None:
            return self.client.messages.create(**params)
        streamed = _StreamedText(on_text)
        with self.client.messages.stream(**params) as stream:
            for event in stream:
                # From message_start on, the reply is billed even if it breaks before any text.
                shown.message = stream.current_message_snapshot
                if event.type == "text":
                    shown.text = True
                    streamed.delta(shown.message.content, event.text)
            return stream.get_final_message()

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        # A wait of zero or a date already past says nothing: back off as usual.
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            return min(retry_after, RETRY_AFTER_CAP_S)
        return backoff_delay(attempt, base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S, rng=self.rng)


# What the SDK or our reading of its Message raises on a reply that is not a Message.
_UNREADABLE_REPLY = (AttributeError, AssertionError, KeyError, TypeError, ValueError)


# The forced tool a plan is written into where structured outputs are not to be had.
PLAN_TOOL = "submit_plan"
# Models from before structured outputs (Claude 3.x, the 4.0 and 4.1 releases): a forced tool.
_WITHOUT_STRUCTURED_OUTPUTS = re.compile(
    r"^claude-(?:instant|2|3|opus-4-0|opus-4-1|sonnet-4-0|opus-4-2025|sonnet-4-2025)", re.ASCII
)
# A strict schema with more alternatives than this is not sent as one; conservative, so a
# large catalog (MCP servers' tools) falls back to the forced tool call instead of a 400.
MAX_STRICT_UNIONS = 16


def request_params(request: ModelRequest) -> dict[str, Any]:
    """The Messages API arguments; metadata and purpose stay on our side."""
    system: list[dict[str, Any]] = [
        {"type": "text", "text": text} for text in request.system_blocks()
    ]
    # One breakpoint after the stable prefix (rules + catalog) caches it for every later call.
    system[-1]["cache_control"] = {"type": "ephemeral"}
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "system": system,
        "messages": [dict(message) for message in request.messages],
    }
    if request.reply_schema is not None:
        params.update(_binding(request.model, dict(request.reply_schema)))
    return params


def schema_mode(model: str, schema: dict[str, Any]) -> str:
    """How a reply is bound to the schema for this model: "output_format", "tool" or "off"."""
    return _schema_binding(model, schema)[0]


def _schema_binding(model: str, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """schema_mode, and for "output_format" the strict schema it is sent as (made once: the
    SDK's transform of a large catalog's schema is most of the cost of a plan call's params)."""
    mode = plan_schema_setting()
    if mode == "auto":
        strict = None if _WITHOUT_STRUCTURED_OUTPUTS.match(model) else _strict_schema(schema)
        return ("tool", None) if strict is None else ("output_format", strict)
    return mode, _strict_schema(schema) if mode == "output_format" else None


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema as structured outputs take it (the SDK's transform), or None if it cannot be."""
    if "$schema" in json.dumps(schema):
        return None  # a full JSON Schema (an MCP tool's): more than structured outputs take
    try:
        strict = anthropic.transform_schema(_type_lists_split(schema))
    except (AssertionError, ValueError, TypeError):
        return None
    if json.dumps(strict).count('"anyOf"') > MAX_STRICT_UNIONS:
        return None
    return strict


# Keywords that belong to one JSON type, kept on that type's alternative when a list splits.
_TYPE_KEYWORDS = {
    "array": ("items", "minItems", "maxItems"),
    "object": ("properties", "required", "additionalProperties"),
    "string": ("format", "pattern", "minLength", "maxLength"),
    "integer": ("minimum", "maximum"),
    "number": ("minimum", "maximum"),
}


def _type_lists_split(schema: Any) -> Any:
    """The schema with every "type": [a, b] written as anyOf [a, b], which the SDK's transform
    (and structured outputs) take; the same values are allowed."""
    if isinstance(schema, list):
        return [_type_lists_split(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {key: _type_lists_split(value) for key, value in schema.items()}
    if "properties" in schema and isinstance(schema["properties"], dict):
        schema["properties"] = {k: _type_lists_split(v) for k, v in schema["properties"].items()}
    kinds = schema.get("type")
    if not isinstance(kinds, list):
        return schema
    owned = {key for keywords in _TYPE_KEYWORDS.values() for key in keywords}
    shared = {k: v for k, v in schema.items() if k != "type" and k not in owned}
    variants = []
    for kind in kinds:
        variant: dict[str, Any] = {"type": kind}
        variant.update({k: schema[k] for k in _TYPE_KEYWORDS.get(kind, ()) if k in schema})
        variants.append(variant)
    return {**shared, "anyOf": variants}


def _binding(model: str, schema: dict[str, Any]) -> dict[str, Any]:
    mode, strict = _schema_binding(model, schema)
    if mode == "output_format":
        if strict is None:
            raise ValueError("the reply schema cannot be sent as a structured output format")
        return {"output_config": {"format": {"type": "json_schema", "schema": strict}}}
    if mode == "tool":
        tool = {
            "name": PLAN_TOOL,
            "description": "Submit the plan: the JSON object the rules describe.",
            "input_schema": schema,
        }
        return {"tools": [tool], "tool_choice": {"type": "tool", "name": PLAN_TOOL}}
    return {}


def message_text(message: Any) -> str:
    """All text blocks of a Message, joined as the API means them.

    Blocks split at citations are one text and join as they are; other text blocks are separate
    passages (around a tool use, say) and are kept apart by a blank line.
    """
    if getattr(message, "stop_reason", None) == "max_tokens":
        logger.warning("model reply was cut off at max_tokens")
    for block in message.content:
        if getattr(block, "type", None) == "tool_use" and getattr(block, "name", "") == PLAN_TOOL:
            # A plan written into the forced tool: its input is the plan object.
            return json.dumps(block.input, ensure_ascii=False)
    text = ""
    previous: Any = None
    for block in message.content:
        if getattr(block, "type", None) != "text":
            previous = block
            continue
        if text and not (_cited(block) or _cited(previous)):
            text = text.rstrip() + "\n\n" + block.text.lstrip()
        else:
            text += block.text
        previous = block
    return text


class _StreamedText:
    """Text deltas passed on as message_text joins their blocks: a blank line where a new,
    separate text block begins, so the live answer reads as the stored one."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self.on_text = on_text
        self.block = -1  # index of the block being streamed
        self.sent = False  # any text passed on yet
        self.joining = False  # a separate block began: strip its leading whitespace

    def delta(self, content: list[Any], text: str) -> None:
        index = len(content) - 1  # blocks stream in order: the delta is the last one's
        if index != self.block:
            self.block = index
            previous = content[index - 1] if index > 0 else None
            self.joining = self.sent and not (_cited(content[index]) or _cited(previous))
        if self.joining:
            text = text.lstrip()
            if not text:
                return
            text = "\n\n" + text
            self.joining = False
        if text:
            self.sent = True
            self.on_text(text)


def _cited(block: Any) -> bool:
    return getattr(block, "type", None) == "text" and bool(getattr(block, "citations", None))


def message_usage(message: Any) -> Usage:
    """Token usage of a Message; absent cache counts are zero.

    One-hour cache writes (usage.cache_creation) are priced apart from five-minute ones, and
    server tool use (web search, web fetch) is counted per request.
    """
    usage = message.usage
    split = getattr(usage, "cache_creation", None)
    server = getattr(usage, "server_tool_use", None)
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=usage.cache_read_input_tokens or 0,
        cache_write_tokens=usage.cache_creation_input_tokens or 0,
        cache_write_1h_tokens=(getattr(split, "ephemeral_1h_input_tokens", 0) or 0),
        web_search_requests=(getattr(server, "web_search_requests", 0) or 0),
        web_fetch_requests=(getattr(server, "web_fetch_requests", 0) or 0),
    )


def _final_error(
    failure: _Failure, shown: _Shown, earlier: Usage, *, attempt: int, attempts: int
) -> ModelError | None:
    """The error that ends the call, or None when another attempt is worth making."""
    billed = earlier if earlier.total_tokens else None
    if shown.text:
        # The caller already showed part of this reply; a retry would repeat it.
        return ModelError(
            f"The model's streamed reply broke off part-way: {failure.description}",
            usage=billed,
        )
    if not failure.retryable:
        return ModelError(f"The model API call failed: {failure.description}", usage=billed)
    if attempt == attempts:
        return ModelError(
            f"The model API call failed after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}; "
            f"last error: {failure.description}",
            usage=billed,
        )
    return None


def _describe(err: Exception) -> _Failure:
    if isinstance(err, anthropic.APITimeoutError | httpx2.TimeoutException):
        return _Failure("the request timed out", retryable=True)
    if isinstance(err, anthropic.APIConnectionError | httpx2.TransportError):
        return _Failure(f"connection error ({_cause(err)})", retryable=True)
    if isinstance(err, anthropic.APIStatusError):
        status = err.status_code
        if status < 400:
            # An error event inside a successful stream: the status is in its type.
            status = _STREAM_ERROR_STATUS.get(str(err.type or ""), status)
        detail = err.api_message or err.message
        kind = f" {err.type}" if err.type else ""
        return _Failure(
            f"HTTP {status}{kind}: {detail}",
            retryable=status in RETRYABLE_STATUSES or status >= 500,
            retry_after=_retry_after(err.response.headers),
        )
    return _Failure(str(err) or type(err).__name__, retryable=False)


def _cause(err: BaseException) -> str:
    cause = err.__cause__ or err
    return str(cause) or type(cause).__name__


def _retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, or retry-after as seconds or a date."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return float(email.utils.mktime_tz(parsed) - time.time())
