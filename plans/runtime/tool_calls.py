"""One tool call on a tool thread: the call, its outcome, and a reconcile hook's answer.

The executor (plans.runtime.steps) decides which calls to make; this is how one is made.
"""

from __future__ import annotations

import json
import math
import queue
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from plans.engine import (
    preview_failed,
    storable,
    unstorable_in,
)
from plans.guards.circuits import CIRCUIT_OPEN_MESSAGE, circuit_admits, circuit_record
from plans.models import Approval, Step, ToolPreview
from plans.runtime.gate import (
    approval_is_valid_for_call,
    approval_target_stale,
)
from plans.runtime.recorder import Durable
from plans.runtime.tool_threads import Call, ToolThreads, tool_threads
from plans.tools import ToolError, ToolSpec
from plans.tools.results import RunResults, calling_run


@dataclass
class PreviewTaken:
    """A preview hook's run: its stored form (an {"error"} one if it failed), and when."""

    preview: dict[str, Any]
    error: str
    started_at: datetime
    duration_ms: float
    args: dict[str, Any]  # what it was taken for

    def row(self, *, run_id: int, step: Step, purpose: str) -> ToolPreview:
        """Its ToolPreview row, to record (redacted when stored: recorder.preview_row_redacted)."""
        return ToolPreview(
            run_id=run_id,
            step=step,
            tool=step.tool,
            purpose=purpose,
            args=self.args,
            preview=None if self.error else self.preview,
            error=self.error,
            started_at=self.started_at,
            duration_ms=self.duration_ms,
        )


@dataclass
class ToolOutcome:
    result: Any
    error: str
    idempotency_key: str
    started_at: datetime
    duration_ms: float
    retryable: bool = False
    tool_fault: bool = False  # the tool misbehaved (not a refusal of its input): breaker counts it
    # The preview taken again just before the call, and, if the target changed since the
    # reviewer saw it, what changed (the call was then not made).
    recheck: PreviewTaken | None = None
    stale: list[str] | None = None


def invoke_tool(
    spec: ToolSpec,
    args: dict[str, Any],
    *,
    key: str,
    approval: Approval | None,
    step_pk: int,
    results: RunResults | None = None,
) -> ToolOutcome:
    """Call a tool in a pool thread; a destructive one needs an approval of these exact args
    for this very step (step_pk): another step's or another run's approval never counts.
    result_slice reads these results (the run's own) only."""
    started_at = timezone.now()
    t0 = time.perf_counter()
    allowed = approval_is_valid_for_call(approval, tool=spec.name, args=args, step_pk=step_pk)
    if spec.destructive and not allowed:
        refusal = f"{spec.name} is destructive and has no approval for these arguments"
        return ToolOutcome(None, refusal, key, started_at, 0.0)
    recheck = None
    if spec.destructive and spec.preview is not None and approval is not None:
        recheck, stale = _target_recheck(spec, approval, key=key)
        if stale is not None:
            refusal = "not called: its target changed since it was approved"
            elapsed = (time.perf_counter() - t0) * 1000
            return ToolOutcome(
                None, refusal, key, started_at, elapsed, recheck=recheck, stale=stale
            )
    result: Any = None
    error = ""
    retryable = fault = False
    try:
        with calling_run(results):
            result, size = _jsonable(spec.call(args, idempotency_key=key))
        if size > settings.AGENTSITE_TOOL_RESULT_MAX_CHARS:
            result = None
            raise ToolError(
                f"the result is too large: {size:,} characters of JSON, at most "
                f"{settings.AGENTSITE_TOOL_RESULT_MAX_CHARS:,} (AGENTSITE_TOOL_RESULT_MAX_CHARS)"
            )
    except BaseException as exc:  # even SystemExit from a tool ends only its step
        error = error_text(exc)
        retryable = bool(spec.retryable) and isinstance(exc, spec.retryable)
        fault = retryable or not isinstance(exc, ToolError)
    finally:
        if connection.connection is not None:
            connection.close()
    duration_ms = (time.perf_counter() - t0) * 1000
    return ToolOutcome(result, error, key, started_at, duration_ms, retryable, fault, recheck)


def _target_recheck(
    spec: ToolSpec, approval: Approval, *, key: str
) -> tuple[PreviewTaken | None, list[str] | None]:
    """Ask the preview again, just before the call, when its reviewer saw one (gate's rule).

    It is asked of the arguments called, which are those its preview was taken for (an edit's
    preview is taken again when it is decided: plans.runtime.previews).
    """
    if approval.target_version is None:
        return None, None  # approved without a preview: no target version to hold it to
    taken = preview_take(spec, approval.args, pool=tool_threads(), idempotency_key=key)
    return taken, approval_target_stale(approval=approval, current=taken.preview)


def preview_breaker(tool: str) -> str:
    """The circuit breaker a tool's preview hook counts against: its own, not the tool's."""
    return f"preview:{tool}"


def preview_take(
    spec: ToolSpec, args: dict[str, Any], *, pool: ToolThreads, idempotency_key: str = ""
) -> PreviewTaken:
    """Run the tool's preview hook on a tool thread within its own limit and breaker.

    A hook that fails, hangs past its limit or has its circuit open gives an {"error"} preview:
    the caller shows "no preview: <error>" and goes on, never blocked by it.
    """
    return _preview_taken(_preview_started(spec, args, pool=pool, idempotency_key=idempotency_key))


def previews_take(
    wanted: list[tuple[ToolSpec, dict[str, Any], str]], *, pool: ToolThreads
) -> list[PreviewTaken]:
    """preview_take for each (spec, args, idempotency key), the hooks all running at once: a
    round's requests wait for the slowest preview, not for their sum."""
    started = [
        _preview_started(spec, args, pool=pool, idempotency_key=key) for spec, args, key in wanted
    ]
    return [_preview_taken(one) for one in started]


@dataclass
class _PreviewRunning:
    spec: ToolSpec
    args: dict[str, Any]
    started_at: datetime
    t0: float
    limit: float
    answered: queue.SimpleQueue[Call] | None  # None: not run (its circuit is open)


def _preview_started(
    spec: ToolSpec, args: dict[str, Any], *, pool: ToolThreads, idempotency_key: str
) -> _PreviewRunning:
    started_at = timezone.now()
    t0 = time.perf_counter()
    limit = spec.preview_timeout_s or settings.AGENTSITE_PREVIEW_TIMEOUT_S
    answered: queue.SimpleQueue[Call] | None = None
    if circuit_admits(preview_breaker(spec.name)):
        answered = queue.SimpleQueue()
        pool.submit(_run_preview, spec, args, idempotency_key, reply=answered.put)
    return _PreviewRunning(spec, args, started_at, t0, limit, answered)


def _preview_taken(running: _PreviewRunning) -> PreviewTaken:
    """The preview once its hook answered, failed or ran out of its limit (from its start)."""
    breaker = preview_breaker(running.spec.name)
    error = ""
    data: dict[str, Any] = {}
    if running.answered is None:
        error = CIRCUIT_OPEN_MESSAGE
    else:
        fault = False
        left = running.limit - (time.perf_counter() - running.t0)
        try:
            data = running.answered.get(timeout=max(left, 0.0)).result()
        except queue.Empty:
            # Its thread stays in the hook; the tool threads grow past it, as for a hung call.
            error, fault = f"timed out after {running.limit:g}s", True
        except BaseException as exc:  # a hook's failure is its preview's, never the run's
            error, fault = error_text(exc), not isinstance(exc, ToolError)
        circuit_record(breaker, failed=fault, error=error)
    duration_ms = (time.perf_counter() - running.t0) * 1000
    preview = data if not error else preview_failed(error)
    return PreviewTaken(preview, error, running.started_at, duration_ms, running.args)


def _run_preview(spec: ToolSpec, args: dict[str, Any], key: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = _jsonable(spec.take_preview(args, idempotency_key=key))[0]
        return data
    finally:
        if connection.connection is not None:
            connection.close()


def invoke_once_recorded(
    durable: Durable | None,
    spec: ToolSpec,
    args: dict[str, Any],
    *,
    key: str,
    approval: Approval | None,
    step_pk: int,
    results: RunResults | None = None,
) -> ToolOutcome:
    """invoke_tool once the commit holding the call's start is made (durable None: at once);
    never if it fails, which ends the advance (so this outcome is never recorded)."""
    if durable is not None and not durable.wait():
        return ToolOutcome(None, "not called: its start was not recorded", key, timezone.now(), 0)
    return invoke_tool(spec, args, key=key, approval=approval, step_pk=step_pk, results=results)


def reconcile_call(spec: ToolSpec, key: str) -> ToolOutcome:
    """Ask a destructive tool's reconcile hook what became of the call with this key."""
    started_at = timezone.now()
    t0 = time.perf_counter()
    result: Any = None
    error = ""
    try:
        assert spec.reconcile is not None
        answer = spec.reconcile(key)
        result = None if answer is None else _jsonable(answer)[0]
    except BaseException as exc:
        error = error_text(exc)
    finally:
        if connection.connection is not None:
            connection.close()
    return ToolOutcome(result, error, key, started_at, (time.perf_counter() - t0) * 1000)


def error_text(exc: BaseException) -> str:
    """What an exception (a tool's, a model backend's) says, storable and kept short."""
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    if not isinstance(exc, ToolError):
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = storable(message)
    if len(text) > TOOL_ERROR_MAX_CHARS:
        cut = len(text) - TOOL_ERROR_MAX_CHARS
        text = f"{text[:TOOL_ERROR_MAX_CHARS]}... ({cut:,} more characters not kept)"
    return text


def _jsonable(value: Any) -> tuple[Any, int]:
    """The result as storable JSON data (see plans.engine.text), and its length as JSON text.

    ValueError if it has no JSON form: NaN, infinities, integers too long to write out.
    """
    kind = type(value)
    if kind in _JSON_SCALARS:
        if kind is float and not math.isfinite(value):
            raise ValueError(f"the result {value} is not a JSON number")
        if kind is int and not -_JSON_INT_BOUND < value < _JSON_INT_BOUND:
            raise ValueError("the result is an integer too long to write out")
        return storable(value), len(value) if kind is str else 0
    text = json.dumps(value, default=str, ensure_ascii=False, allow_nan=False)
    data = json.loads(text)
    # The text keeps an unpaired surrogate as it is but writes a NUL as the escape \u0000.
    clean = unstorable_in(text) is None and "\\u0000" not in text
    return (data if clean else storable(data)), len(text)


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


# Python refuses to write out an int of more than 4,300 digits (sys.get_int_max_str_digits).
_JSON_INT_BOUND = 10**4000


# An error is an observation for the answer prompt: a traceback-sized text at most.
TOOL_ERROR_MAX_CHARS = 10_000
