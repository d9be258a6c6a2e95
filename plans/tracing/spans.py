"""Spans for a run, its plan versions, model calls, steps, tool calls and approval waits.

Spans are written after the fact, with the start and end times the rows recorded, so a run
that parks and resumes in another worker stays one trace: its trace id is kept on the run, and
the ids of the run's and each plan version's span are derived from it, so any worker can
parent a span to them; the run's and the plans' spans are emitted when the run ends.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
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
from plans.journal.rollup import wait_seconds
from plans.models import Approval, ModelCall, Plan, Run, Step

logger = logging.getLogger(__name__)

TRACER_NAME = "agentsite"
# Attribute values past this are cut: a span is a summary, not a copy of the audit log.
CONTENT_MAX_CHARS = 4000
_PROVIDERS = {"anthropic": "anthropic", "offline": "agentsite.offline"}
# Notes waiting to become spans; past this many the newest are dropped (counted).
MAX_NOTES = 100_000
# The tracer's thread builds spans this often, or sooner once this many notes wait.
DRAIN_EVERY_S = 0.5
WAKE_AT_NOTES = 2_000
# After a failed export, notes are dropped unbuilt for this long, then one batch tries again.
RETRY_COLLECTOR_S = 30.0
# An export still under way after this long means the collector is down or drowning.
SLOW_EXPORT_S = 1.0


def otlp_tracer() -> RunTracer:
    """The run tracer exporting over OTLP/HTTP in batches, configured by the OTEL_* variables."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = HealthTrackingExporter(OTLPSpanExporter())
    provider = new_provider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return RunTracer(provider, exporter=exporter)


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
    """The runtime's observer (plans.runtime.telemetry) writing a run's spans.

    The worker's threads only note what happened (a tuple on a bounded deque, about a
    microsecond); a thread of the tracer's own builds the spans and hands them to the SDK's
    batching exporter. While the collector refuses exports, notes are dropped unbuilt, so a
    dead collector costs a run its deque appends and nothing more.
    """

    def __init__(
        self, provider: TracerProvider, *, exporter: HealthReporting | None = None
    ) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME)
        ids = provider.id_generator
        self._ids = ids if isinstance(ids, _PresetIds) else None
        self._exporter = exporter
        self._trace_ids: dict[int, int] = {}
        self._lock = threading.Lock()
        self._notes: deque[tuple[Any, ...]] = deque()
        self._wake = threading.Event()
        self._drained = threading.Condition()
        self._pending = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._drain_forever, name="tracing", daemon=True)
        self._thread.start()

    # --- the observer's calls (on the worker's threads: cheap) -------------------------------

    def model_call(self, run: Run, call: ModelCall, *, requested_model: str) -> None:
        self._note(
            self._emit_model_call,
            self._trace_id(run),
            self._run_span_id(run),
            call,
            requested_model,
            _now_ns(),
        )

    def tool_call(self, run: Run, step: Step, row: Mapping[str, Any]) -> None:
        self._note(self._emit_tool_call, self._trace_id(run), step.pk, step.step_id, dict(row))

    def step_finished(self, run: Run, step: Step) -> None:
        snapshot = _StepSnapshot(
            step.pk,
            step.plan_id,
            step.step_id,
            step.tool,
            step.status,
            step.attempts,
            step.destructive,
            step.error,
            step.started_at,
            step.finished_at,
        )
        self._note(self._emit_step, self._trace_id(run), snapshot)

    def approval_waited(self, run: Run, step: Step, approval: Approval) -> None:
        with _never_raises("approval"):
            who = approval.reviewer if approval.reviewer_id else None
            reviewer = who.get_username() if who is not None else ""
            self._note(
                self._emit_approval,
                self._trace_id(run),
                step.pk,
                step.step_id,
                approval.tool,
                approval.decision,
                reviewer or approval.via,
                approval.via,
                approval.requested_at,
                approval.decided_at,
                approval_rule_attributes(approval),
            )

    def run_finished(self, run: Run) -> None:
        with _never_raises("run"):
            trace_id = self._trace_id(run)
            plans = list(
                Plan.objects.filter(run_id=run.pk)
                .order_by("version")
                .values_list("pk", "version", "source", "is_valid", "created_at")
            )
            goal = run.goal.text if _capture_content() else ""
            snapshot = _RunSnapshot(
                run.pk,
                run.status,
                run.error,
                run.created_at,
                run.finished_at,
                run.input_tokens,
                run.output_tokens,
                float(run.cost_usd),
                run.model_call_count,
                goal,
            )
            self._note(self._emit_run, trace_id, self._run_span_id(run), snapshot, plans)
            with self._lock:
                self._trace_ids.pop(run.pk, None)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Build every span noted so far and export them now (tests, shutdown)."""
        with self._drained:
            self._wake.set()
            done = self._drained.wait_for(lambda: self._pending == 0, timeout_s)
        return done and self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        self.flush()
        self.provider.shutdown()

    # --- the tracer's thread -----------------------------------------------------------------

    def _note(self, emit: Any, *args: Any) -> None:
        if len(self._notes) >= MAX_NOTES:
            self.dropped += 1  # the builder is behind: a missing span, never a slower run
            return
        with self._drained:
            self._pending += 1
        self._notes.append((emit, args))
        if len(self._notes) >= WAKE_AT_NOTES:
            self._wake.set()

    def _drain_forever(self) -> None:
        while True:
            self._wake.wait(DRAIN_EVERY_S)
            self._wake.clear()
            built = 0
            while self._notes:
                emit, args = self._notes.popleft()
                if self._exporter is not None and self._exporter.failing():
                    self.dropped += 1
                else:
                    with _never_raises(emit.__name__):
                        emit(*args)
                built += 1
            if built:
                with self._drained:
                    self._pending -= built
                    self._drained.notify_all()

    # --- building spans (on the tracer's thread) ---------------------------------------------

    def _emit_model_call(
        self, trace_id: int, run_span_id: int, call: ModelCall, requested_model: str, end: int
    ) -> None:
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
            context=self._parent(trace_id, run_span_id),
            kind=SpanKind.CLIENT,
            start_time=start,
            attributes=attributes,
        )
        if call.error:
            span.set_attribute("error.type", "model_error")
            span.set_status(Status(StatusCode.ERROR, call.error[:CONTENT_MAX_CHARS]))
        span.end(end_time=end)

    def _emit_tool_call(
        self, trace_id: int, step_pk: int, step_id: int, row: dict[str, Any]
    ) -> None:
        start = _ns(row["started_at"])
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": row["tool"],
            "gen_ai.tool.call.id": row["idempotency_key"],
            "gen_ai.tool.type": "function",
            "agentsite.step.id": step_id,
            "agentsite.tool.attempt": row["attempt"],
            "openinference.span.kind": "TOOL",
            "tool.name": row["tool"],
        }
        if _capture_content():
            attributes["gen_ai.tool.call.arguments"] = _content(row["args"])
            if row["result"] is not None:
                attributes["gen_ai.tool.call.result"] = _content(row["result"])
        span = self.tracer.start_span(
            f"execute_tool {row['tool']}",
            context=self._parent(trace_id, _derived_id(trace_id, STEP, step_pk)),
            kind=SpanKind.INTERNAL,
            start_time=start,
            attributes=attributes,
        )
        if row["error"]:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, str(row["error"])[:CONTENT_MAX_CHARS]))
        span.end(end_time=start + int(float(row["duration_ms"]) * 1_000_000))

    def _emit_step(self, trace_id: int, step: _StepSnapshot) -> None:
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
        with self._preset(_derived_id(trace_id, STEP, step.pk)):
            span = self.tracer.start_span(
                f"step {step.step_id} {step.tool}",
                context=self._parent(trace_id, _derived_id(trace_id, PLAN, step.plan_id)),
                start_time=start,
                attributes=attributes,
            )
        if step.status in (Step.Status.FAILED, Step.Status.BLOCKED):
            span.set_attribute("error.type", step.status)
            span.set_status(Status(StatusCode.ERROR, step.error[:CONTENT_MAX_CHARS]))
        span.end(end_time=end)

    def _emit_approval(
        self,
        trace_id: int,
        step_pk: int,
        step_id: int,
        tool: str,
        decision: str,
        reviewer: str,
        via: str,
        requested_at: datetime,
        decided_at: datetime | None,
        rule: dict[str, Any],
    ) -> None:
        span = self.tracer.start_span(
            f"approval {tool}",
            context=self._parent(trace_id, _derived_id(trace_id, STEP, step_pk)),
            start_time=_ns(requested_at),
            attributes={
                "agentsite.approval.decision": decision,
                "agentsite.approval.reviewer": reviewer,
                "agentsite.approval.via": via,
                # Whole seconds from the request to its settling, as the review analytics count.
                "agentsite.approval.wait_s": (
                    wait_seconds(requested_at, decided_at) if decided_at else -1
                ),
                "agentsite.step.id": step_id,
                "gen_ai.tool.name": tool,
                **rule,
            },
        )
        span.end(end_time=_ns(decided_at) if decided_at else _now_ns())

    def _emit_run(
        self, trace_id: int, run_span_id: int, run: _RunSnapshot, plans: list[tuple[Any, ...]]
    ) -> None:
        end = _ns(run.finished_at) if run.finished_at else _now_ns()
        for index, (plan_pk, version, source, is_valid, created_at) in enumerate(plans):
            plan_end = _ns(plans[index + 1][4]) if index + 1 < len(plans) else end
            with self._preset(_derived_id(trace_id, PLAN, plan_pk)):
                span = self.tracer.start_span(
                    f"plan v{version}",
                    context=self._parent(trace_id, run_span_id),
                    start_time=_ns(created_at),
                    attributes={
                        "agentsite.plan.version": version,
                        "agentsite.plan.source": source,
                        "agentsite.plan.valid": is_valid,
                        "openinference.span.kind": "CHAIN",
                    },
                )
            span.end(end_time=max(plan_end, _ns(created_at)))
        self._emit_run_span(run, trace_id, run_span_id, end)

    def _emit_run_span(self, run: _RunSnapshot, trace_id: int, span_id: int, end: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "agentsite",
            "agentsite.run.id": run.run_id,
            "agentsite.run.status": run.status,
            "gen_ai.usage.input_tokens": run.input_tokens,
            "gen_ai.usage.output_tokens": run.output_tokens,
            "agentsite.cost_usd": float(run.cost_usd),
            "agentsite.model_calls": run.model_call_count,
            "openinference.span.kind": "AGENT",
        }
        if run.goal:
            attributes["agentsite.goal"] = _content(run.goal)
        with self._preset(span_id, trace_id=trace_id):
            span = self.tracer.start_span(
                "invoke_agent agentsite",
                context=None,
                start_time=_ns(run.created_at),
                attributes=attributes,
            )
        if run.status != Run.Status.COMPLETED:
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
        return _derived_id(self._trace_id(run), RUN, 0)

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


RUN, PLAN, STEP = 1, 2, 3
_MASK = (1 << 64) - 1


def _derived_id(trace_id: int, kind: int, pk: int) -> int:
    """A span id every worker derives alike from the trace id, for the run, a plan or a step.

    Not a hash of strings (Python's is salted per process): a 64-bit mix of integers
    (splitmix64's finaliser), so distinct (kind, pk) pairs of one trace do not collide.
    """
    x = (trace_id ^ (trace_id >> 64) ^ (kind << 56) ^ pk) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) or 1


class _StepSnapshot(NamedTuple):
    pk: int
    plan_id: int
    step_id: int
    tool: str
    status: str
    attempts: int
    destructive: bool
    error: str
    started_at: datetime | None
    finished_at: datetime | None


class _RunSnapshot(NamedTuple):
    run_id: int
    status: str
    error: str
    created_at: datetime
    finished_at: datetime | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    model_call_count: int
    goal: str


class HealthReporting(Protocol):
    def failing(self) -> bool: ...


class HealthTrackingExporter(SpanExporter):
    """The OTLP exporter, telling whether the collector is down: its last export failed, or
    the one under way has taken over SLOW_EXPORT_S (refused connections are retried with
    backoff inside the exporter, so a dead collector shows as an export that does not end).

    While it is failing, the tracer drops notes instead of building spans; after
    RETRY_COLLECTOR_S, spans are built again so the next batch finds out if it is back.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._failed_at: float | None = None
        self._exporting_since: float | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._exporting_since = time.monotonic()
        try:
            result = self.inner.export(spans)
        finally:
            self._exporting_since = None
        self._failed_at = None if result is SpanExportResult.SUCCESS else time.monotonic()
        return result

    def failing(self) -> bool:
        now = time.monotonic()
        since = self._exporting_since
        if since is not None and now - since > SLOW_EXPORT_S:
            return True
        failed_at = self._failed_at
        if failed_at is None:
            return False
        if now - failed_at > RETRY_COLLECTOR_S:
            self._failed_at = None  # let the next batch try
            return False
        return True

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def approval_rule_attributes(approval: Approval) -> dict[str, Any]:
    """The approval rule on an approval's span: which rule matched its call (and its version),
    what it decided, and who it asked for (none when no rule matched)."""
    if not approval.rule:
        return {}
    attributes: dict[str, Any] = {
        "agentsite.approval.rule": approval.rule,
        "agentsite.approval.rule_version": approval.rule_version,
        "agentsite.approval.rule_outcome": approval.rule_outcome,
        "agentsite.approval.approvals_needed": approval.approvals_needed,
    }
    if approval.groups:
        attributes["agentsite.approval.groups"] = list(approval.groups)
    if approval.rule_error:
        attributes["agentsite.approval.rule_error"] = approval.rule_error[:CONTENT_MAX_CHARS]
    return attributes


def _capture_content() -> bool:
    return bool(getattr(settings, "AGENTSITE_TRACE_CONTENT", False))


def _content(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(redact(value), ensure_ascii=False)
    text = redact(text) if isinstance(value, str) else text
    return text if len(text) <= CONTENT_MAX_CHARS else text[:CONTENT_MAX_CHARS] + "..."


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _now_ns() -> int:
    return time.time_ns()


@contextmanager
def _never_raises(what: str) -> Iterator[None]:
    # Tracing must never fail a run: a span that cannot be written is logged and dropped.
    try:
        yield
    except Exception:
        logger.exception("tracing: the %s span could not be written", what)
