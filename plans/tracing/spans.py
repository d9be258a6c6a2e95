"""Spans for a run, its plan versions, model calls, steps, tool calls and approval waits.

Spans are written after the fact, with the start and end times the rows recorded, so a run
that parks and resumes in another worker stays one trace: its trace id is kept on the run, and
the ids of the run's and each plan version's span are derived from it, so any worker can
parent a span to them; the run's and the plans' spans are emitted when the run ends.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from plans.guards.redaction import redact
from plans.models import Approval, ModelCall, Plan, Run, Step

logger = logging.getLogger(__name__)

TRACER_NAME = "agentsite"
# Attribute values past this are cut: a span is a summary, not a copy of the audit log.
CONTENT_MAX_CHARS = 4000
_PROVIDERS = {"anthropic": "anthropic", "offline": "agentsite.offline"}


def otlp_provider() -> TracerProvider:
    """A provider exporting over OTLP/HTTP in batches, configured by the OTEL_* variables."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = new_provider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def new_provider() -> TracerProvider:
    """A provider that can emit spans with the ids a run's trace needs (no exporter yet)."""
    service = os.environ.get("OTEL_SERVICE_NAME") or "agentsite"
    return TracerProvider(
        resource=Resource.create({SERVICE_NAME: service}), id_generator=_PresetIds()
    )


class _PresetIds(IdGenerator):
    """Random ids, except where a span must have an id decided beforehand (see _preset)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._next = threading.local()

    def generate_span_id(self) -> int:
        preset = getattr(self._next, "span_id", None)
        if preset is not None:
            self._next.span_id = None
            return int(preset)
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        preset = getattr(self._next, "trace_id", None)
        if preset is not None:
            self._next.trace_id = None
            return int(preset)
        return self._random.generate_trace_id()

    @contextmanager
    def preset(self, *, span_id: int, trace_id: int | None = None) -> Iterator[None]:
        self._next.span_id, self._next.trace_id = span_id, trace_id
        try:
            yield
        finally:
            self._next.span_id = self._next.trace_id = None


class RunTracer:
    """The runtime's observer (plans.runtime.telemetry) writing a run's spans."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME)
        ids = provider.id_generator
        self._ids = ids if isinstance(ids, _PresetIds) else None
        self._trace_ids: dict[int, int] = {}
        self._lock = threading.Lock()

    # --- the observer's calls ----------------------------------------------------------------

    def model_call(self, run: Run, call: ModelCall, *, requested_model: str) -> None:
        with _never_raises("model call"):
            end = _now_ns()
            start = end - int(call.latency_ms) * 1_000_000
            backend = settings.AGENTSITE_MODEL_BACKEND
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.system": _PROVIDERS.get(backend, backend),
                "gen_ai.provider.name": _PROVIDERS.get(backend, backend),
                "gen_ai.request.model": requested_model,
                "gen_ai.response.model": call.model,
                "gen_ai.usage.input_tokens": call.input_tokens,
                "gen_ai.usage.output_tokens": call.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": call.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": call.cache_write_tokens,
                "agentsite.cost_usd": float(call.cost_usd),
                "agentsite.model_call.purpose": call.purpose,
                # OpenInference names, which Arize Phoenix reads for its token columns.
                "openinference.span.kind": "LLM",
                "llm.model_name": call.model,
                "llm.token_count.prompt": call.input_tokens,
                "llm.token_count.completion": call.output_tokens,
                "llm.token_count.total": call.input_tokens + call.output_tokens,
            }
            span = self.tracer.start_span(
                f"chat {call.model}",
                context=self._parent(self._trace_id(run), self._run_span_id(run)),
                kind=SpanKind.CLIENT,
                start_time=start,
                attributes=attributes,
            )
            if call.error:
                span.set_attribute("error.type", "model_error")
                span.set_status(Status(StatusCode.ERROR, call.error[:CONTENT_MAX_CHARS]))
            span.end(end_time=end)

    def tool_call(self, run: Run, step: Step, row: Mapping[str, Any]) -> None:
        with _never_raises("tool call"):
            start = _ns(row["started_at"])
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": row["tool"],
                "gen_ai.tool.call.id": row["idempotency_key"],
                "gen_ai.tool.type": "function",
                "agentsite.step.id": step.step_id,
                "agentsite.tool.attempt": row["attempt"],
                "openinference.span.kind": "TOOL",
                "tool.name": row["tool"],
            }
            if _capture_content():
                attributes["gen_ai.tool.call.arguments"] = _content(row["args"])
                if row["result"] is not None:
                    attributes["gen_ai.tool.call.result"] = _content(row["result"])
            trace_id = self._trace_id(run)
            span = self.tracer.start_span(
                f"execute_tool {row['tool']}",
                context=self._parent(trace_id, self._step_span_id(trace_id, step)),
                kind=SpanKind.INTERNAL,
                start_time=start,
                attributes=attributes,
            )
            if row["error"]:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, str(row["error"])[:CONTENT_MAX_CHARS]))
            span.end(end_time=start + int(float(row["duration_ms"]) * 1_000_000))

    def step_finished(self, run: Run, step: Step) -> None:
        with _never_raises("step"):
            trace_id = self._trace_id(run)
            end = _ns(step.finished_at) if step.finished_at else _now_ns()
            start = _ns(step.started_at) if step.started_at else end
            attributes: dict[str, Any] = {
                "agentsite.step.id": step.step_id,
                "agentsite.step.status": step.status,
                "agentsite.step.attempts": step.attempts,
                "agentsite.step.destructive": step.destructive,
                "gen_ai.tool.name": step.tool,
                "openinference.span.kind": "CHAIN",
            }
            with self._preset(self._step_span_id(trace_id, step)):
                span = self.tracer.start_span(
                    f"step {step.step_id} {step.tool}",
                    context=self._parent(trace_id, self._plan_span_id(trace_id, step.plan_id)),
                    start_time=start,
                    attributes=attributes,
                )
            if step.status in (Step.Status.FAILED, Step.Status.BLOCKED):
                span.set_attribute("error.type", step.status)
                span.set_status(Status(StatusCode.ERROR, step.error[:CONTENT_MAX_CHARS]))
            span.end(end_time=end)

    def approval_waited(self, run: Run, step: Step, approval: Approval) -> None:
        with _never_raises("approval"):
            trace_id = self._trace_id(run)
            reviewer = approval.reviewer.get_username() if approval.reviewer_id else ""
            start = _ns(approval.requested_at)
            end = _ns(approval.decided_at) if approval.decided_at else _now_ns()
            span = self.tracer.start_span(
                f"approval {approval.tool}",
                context=self._parent(trace_id, self._step_span_id(trace_id, step)),
                start_time=start,
                attributes={
                    "agentsite.approval.decision": approval.decision,
                    "agentsite.approval.reviewer": reviewer or approval.via or "",
                    "agentsite.approval.via": approval.via,
                    "agentsite.step.id": step.step_id,
                    "gen_ai.tool.name": approval.tool,
                },
            )
            span.end(end_time=end)

    def run_finished(self, run: Run) -> None:
        with _never_raises("run"):
            trace_id = self._trace_id(run)
            end = _ns(run.finished_at) if run.finished_at else _now_ns()
            plans = list(Plan.objects.filter(run_id=run.pk).order_by("version"))
            for index, plan in enumerate(plans):
                plan_end = _ns(plans[index + 1].created_at) if index + 1 < len(plans) else end
                with self._preset(self._plan_span_id(trace_id, plan.pk)):
                    span = self.tracer.start_span(
                        f"plan v{plan.version}",
                        context=self._parent(trace_id, self._run_span_id(run)),
                        start_time=_ns(plan.created_at),
                        attributes={
                            "agentsite.plan.version": plan.version,
                            "agentsite.plan.source": plan.source,
                            "agentsite.plan.valid": plan.is_valid,
                            "openinference.span.kind": "CHAIN",
                        },
                    )
                span.end(end_time=max(plan_end, _ns(plan.created_at)))
            self._emit_run_span(run, trace_id, end)
            with self._lock:
                self._trace_ids.pop(run.pk, None)

    # --- ids -------------------------------------------------------------------------------

    def _emit_run_span(self, run: Run, trace_id: int, end: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "agentsite",
            "agentsite.run.id": run.pk,
            "agentsite.run.status": run.status,
            "gen_ai.usage.input_tokens": run.input_tokens,
            "gen_ai.usage.output_tokens": run.output_tokens,
            "agentsite.cost_usd": float(run.cost_usd),
            "agentsite.model_calls": run.model_call_count,
            "openinference.span.kind": "AGENT",
        }
        if _capture_content():
            attributes["agentsite.goal"] = _content(run.goal.text)
        with self._preset(self._run_span_id(run), trace_id=trace_id):
            span = self.tracer.start_span(
                "invoke_agent agentsite",
                context=None,
                start_time=_ns(run.created_at),
                attributes=attributes,
            )
        if run.status not in (Run.Status.COMPLETED,):
            span.set_status(Status(StatusCode.ERROR, run.error[:CONTENT_MAX_CHARS] or run.status))
        span.end(end_time=end)

    def _trace_id(self, run: Run) -> int:
        """The run's trace id: kept on the run, set once by whichever worker traces it first."""
        with self._lock:
            known = self._trace_ids.get(run.pk)
        if known is not None:
            return known
        if not run.trace_id:
            fresh = secrets.token_hex(16)
            Run.objects.filter(pk=run.pk, trace_id="").update(trace_id=fresh)
            run.trace_id = Run.objects.filter(pk=run.pk).values_list("trace_id", flat=True)[0]
        value = int(run.trace_id, 16)
        with self._lock:
            self._trace_ids[run.pk] = value
        return value

    def _run_span_id(self, run: Run) -> int:
        return _derived_id(self._trace_id(run), "run")

    def _plan_span_id(self, trace_id: int, plan_id: int) -> int:
        return _derived_id(trace_id, f"plan:{plan_id}")

    def _step_span_id(self, trace_id: int, step: Step) -> int:
        return _derived_id(trace_id, f"step:{step.pk}")

    def _parent(self, trace_id: int, span_id: int) -> Any:
        parent = SpanContext(
            trace_id=trace_id,
            span_id=span_id,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(NonRecordingSpan(parent))

    @contextmanager
    def _preset(self, span_id: int, *, trace_id: int | None = None) -> Iterator[None]:
        if self._ids is None:
            yield
            return
        with self._ids.preset(span_id=span_id, trace_id=trace_id):
            yield


def _derived_id(trace_id: int, what: str) -> int:
    digest = hashlib.sha256(f"{trace_id:032x}:{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _capture_content() -> bool:
    return bool(getattr(settings, "AGENTSITE_TRACE_CONTENT", False))


def _content(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(redact(value), ensure_ascii=False)
    text = redact(text) if isinstance(value, str) else text
    return text if len(text) <= CONTENT_MAX_CHARS else text[:CONTENT_MAX_CHARS] + "..."


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _now_ns() -> int:
    import time

    return time.time_ns()


@contextmanager
def _never_raises(what: str) -> Iterator[None]:
    # Tracing must never fail a run: a span that cannot be written is logged and dropped.
    try:
        yield
    except Exception:
        logger.exception("tracing: the %s span could not be written", what)
