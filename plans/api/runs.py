"""/api/v1/runs/: hand the agent goals, list and read runs, follow their events, cancel them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Query, Router, Status

from plans.api.auth import Credential
from plans.api.cursor import after_cursor, cursor_for
from plans.api.errors import ApiError, ErrorOut, not_found
from plans.api.models import IdempotencyKey
from plans.api.schemas import (
    EventsOut,
    RunCreateIn,
    RunFiltersIn,
    RunListOut,
    RunOut,
)
from plans.asyncdb import db_async
from plans.engine import canonical_json
from plans.guards.budgets import bucket_take
from plans.journal.events import bind_server_loop, run_group, user_group
from plans.models import Run, RunEvent
from plans.selectors.audit import run_export_json
from plans.selectors.runs import RunFilters, run_events_after, run_visible_get, runs_matching
from plans.services.plans import plan_check
from plans.services.runs import author_check, run_cancel, run_create, run_start, run_summary

logger = logging.getLogger(__name__)
router = Router(tags=["runs"])

ERRORS: dict[int, type[ErrorOut]] = {
    401: ErrorOut,
    404: ErrorOut,
    422: ErrorOut,
}
# A followed run's events come through its channel-layer group; its log is read again after
# this long without a message all the same (delivery is best-effort: a dropped message, or a
# run advanced by a process the layer does not reach). An idle stream sends a comment every
# STREAM_HEARTBEAT_S so proxies keep it open, and re-reads its credential at most this often.
STREAM_POLL_S = 2.0
STREAM_HEARTBEAT_S = 15.0
STREAM_RECHECK_MIN_S = 0.1
EVENT_STREAM = "text/event-stream"
# Headers the views read themselves, declared so generated clients can send them.
IDEMPOTENCY_KEY_HEADER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Any string of up to 200 characters: a retry with the same key and body "
    "returns the first run (200) instead of creating another.",
    "schema": {"type": "string", "maxLength": 200},
}
LAST_EVENT_ID_HEADER = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "description": "With Accept: text/event-stream, resume after this seq (the last id: "
    "received); the later of it and ?after= wins. A value that is not a seq is ignored, as "
    "the server-sent events standard has a browser send back whatever id it last saw.",
    "schema": {"type": "string"},
}


def visible_run(request: HttpRequest, run_id: int) -> Run:
    run = run_visible_get(user=request.user, run_id=run_id) if 0 < run_id < 2**63 else None
    if run is None:
        raise not_found()
    return run


def run_url(request: HttpRequest, run_id: int) -> str:
    return request.build_absolute_uri(reverse("plans:run_detail", args=[run_id]))


def run_out(request: HttpRequest, run: Run) -> dict[str, Any]:
    """The run as the API shows it: the CLI's summary plus its versions, calls and budget."""
    run.refresh_from_db()
    summary = run_summary(run)
    versions = run.plans.order_by("version")
    calls = run.model_calls.order_by("created_at", "pk")
    return {
        **summary,
        "id": run.pk,
        "url": run_url(request, run.pk),
        "author": run.goal.author.get_username(),
        "cancel_requested": run.cancel_requested,
        "route": run.route,
        "plan_versions": [
            {
                "version": plan.version,
                "source": plan.source,
                "is_valid": plan.is_valid,
                "problems": plan.problems,
                "decision": plan.decision,
                "created_at": plan.created_at,
                "forecast": plan.forecast,
            }
            for plan in versions
        ],
        "model_call_list": [
            {
                "purpose": call.purpose,
                "model": call.model,
                "input_tokens": call.input_tokens,
                "output_tokens": call.output_tokens,
                "cost_usd": format(call.cost_usd, "f"),
                "latency_ms": call.latency_ms,
                "error": call.error,
                "created_at": call.created_at,
            }
            for call in calls
        ],
        "cost_usd": format(run.cost_usd, "f"),
        "forecast_usd": _usd_or_none(run.forecast_usd),
        "forecast_tools_usd": _usd_or_none(run.forecast_tools_usd),
        "budget_usd": format(run.budget_usd, "f"),
        "budget_tokens": run.budget_tokens,
        "last_seq": run.last_seq,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def _usd_or_none(value: Decimal | None) -> str | None:
    return None if value is None else format(value, "f")


# --- create ----------------------------------------------------------------------------------


@router.post(
    "/runs/",
    response={
        200: RunOut,
        201: RunOut,
        400: ErrorOut,
        401: ErrorOut,
        403: ErrorOut,
        413: ErrorOut,
        422: ErrorOut,
        429: ErrorOut,
    },
    summary="Hand the agent a goal (optionally with a plan)",
    description="201 with the new run, already handed to a worker. With an Idempotency-Key "
    "header a retry returns the first run (200); the same key with another body is a 422. "
    "An invalid plan is a 422 listing every problem, and nothing is created. A body over "
    "AGENTSITE_MAX_BODY_BYTES (1 MiB by default) is a 413 body_too_large.",
    openapi_extra={"parameters": [IDEMPOTENCY_KEY_HEADER]},
)
def create_run(request: HttpRequest, body: RunCreateIn) -> Status[dict[str, Any]]:
    user: User = request.user  # type: ignore[assignment]
    author_check(user, via="api")  # first: an outsider learns nothing of keys, limits or plans
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > 200:
        raise ApiError(422, "invalid_idempotency_key", "The Idempotency-Key is over 200 chars.")
    fingerprint = hashlib.sha256(canonical_json(body.model_dump(mode="json")).encode()).hexdigest()
    if key:
        replay = _replayed(user, key, fingerprint)
        if replay is not None:
            return Status(200, run_out(request, replay))
    _rate_limit(request, user)
    if body.plan is not None:
        _, problems = plan_check(body.plan, max_steps=settings.AGENTSITE_MAX_PLAN_STEPS)
        if problems:
            raise ApiError(
                422,
                "plan_invalid",
                f"The plan is invalid ({len(problems)} problem{'s' if len(problems) > 1 else ''}).",
                problems=problems,
            )
    options = body.options
    try:
        with transaction.atomic():
            run = run_create(
                author=user,
                goal_text=body.goal,
                plan_data=body.plan,
                require_plan_approval=options.require_plan_approval,
                run_dependants_of_failures=options.run_dependants_of_failures,
                budget_usd=options.budget_usd,
                budget_tokens=options.budget_tokens,
                max_parallel_steps=options.max_parallel_steps,
                via="api",
            )
            if key:
                IdempotencyKey.objects.create(
                    user=user, key=key, request_sha256=fingerprint, run=run
                )
            run_start(run)
    except IntegrityError:
        # The same key raced in from another request: that request's run is the answer.
        replay = _replayed(user, key, fingerprint) if key else None
        if replay is None:
            raise
        return Status(200, run_out(request, replay))
    return Status(201, run_out(request, run))


def _replayed(user: User, key: str, fingerprint: str) -> Run | None:
    earlier = IdempotencyKey.objects.filter(user=user, key=key).select_related("run").first()
    if earlier is None:
        return None
    if earlier.request_sha256 != fingerprint:
        raise ApiError(
            422,
            "idempotency_key_reused",
            "This Idempotency-Key was used with a different request body; use a new key.",
        )
    return earlier.run


def _rate_limit(request: HttpRequest, user: User) -> None:
    per_minute = settings.AGENTSITE_API_RUNS_PER_MINUTE
    if per_minute <= 0:
        return
    token = getattr(request, "api_token", None)
    name = f"api-runs:token-{token.pk}" if token is not None else f"api-runs:user-{user.pk}"
    wait_s = bucket_take(name, per_minute=per_minute, burst=settings.AGENTSITE_API_RUNS_BURST)
    if wait_s > 0:
        retry_after = max(1, math.ceil(wait_s))
        raise ApiError(
            429,
            "rate_limited",
            f"Too many runs created with this token ({per_minute:g} per minute); "
            f"retry in {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )


# --- read ------------------------------------------------------------------------------------


@router.get("/runs/", response={200: RunListOut, **ERRORS}, summary="The runs you may see")
def list_runs(request: HttpRequest, filters: Query[RunFiltersIn]) -> dict[str, Any]:
    runs = runs_matching(
        viewer=request.user,
        filters=RunFilters(
            status=filters.status,
            author=filters.author or None,
            date_from=filters.date_from,
            date_to=filters.date_to,
            tool=filters.tool or None,
            sort=filters.sort,
        ),
    )
    if filters.cursor:
        runs = after_cursor(runs, filters.sort, filters.cursor)
    page = list(runs[: filters.limit + 1])
    more = len(page) > filters.limit
    page = page[: filters.limit]
    return {
        "results": [
            {
                "id": run.pk,
                "url": run_url(request, run.pk),
                "status": run.status,
                "goal": run.goal.text,
                "author": run.goal.author.get_username(),
                "cost_usd": format(run.cost_usd, "f"),
                "total_tokens": run.total_tokens,
                "created_at": run.created_at,
                "started_at": run.started_at,
                "finished_at": run.finished_at,
                "duration_ms": run.duration_ms,
            }
            for run in page
        ],
        "next_cursor": cursor_for(page[-1], filters.sort) if more and page else None,
    }


@router.get("/runs/{int:run_id}/", response={200: RunOut, **ERRORS}, summary="One run in full")
def get_run(request: HttpRequest, run_id: int) -> dict[str, Any]:
    return run_out(request, visible_run(request, run_id))


@router.post(
    "/runs/{int:run_id}/cancel/",
    response={200: RunOut, 403: ErrorOut, **ERRORS},  # 403: a session without the CSRF token
    summary="Stop a run: nothing new starts; steps in flight finish and are recorded",
)
def cancel_run(request: HttpRequest, run_id: int) -> dict[str, Any]:
    run = run_cancel(run=visible_run(request, run_id), user=request.user)  # type: ignore[arg-type]
    return run_out(request, run)


@router.get(
    "/runs/{int:run_id}/export/",
    response={200: dict[str, Any], **ERRORS},
    summary="The run's whole record, as the audit page exports it",
)
def export_run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = visible_run(request, run_id)
    response = HttpResponse(run_export_json(run=run), content_type="application/json")
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- events ----------------------------------------------------------------------------------


@router.get(
    "/runs/{int:run_id}/events/",
    response={200: EventsOut, **ERRORS},
    summary="The run's event log after a seq; text/event-stream follows it live",
    description="With 'Accept: text/event-stream' the response is a stream of server-sent "
    "events (id: seq, event: kind, data: the event as JSON) that ends after the run's last "
    "event; Last-Event-ID resumes it. The stream re-reads its token (or session) before each "
    "batch of events and every AGENTSITE_STREAM_RECHECK_S (5 s by default): once it is "
    "revoked, expired or signed out, an 'error' event ({code, detail}) ends the stream.",
    openapi_extra={
        "parameters": [LAST_EVENT_ID_HEADER],
        "responses": {
            200: {
                "description": "The events",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/EventsOut"}},
                    EVENT_STREAM: {"schema": {"type": "string"}},
                },
            }
        },
    },
)
def run_events(request: HttpRequest, run_id: int, after: int = 0) -> Any:
    run = visible_run(request, run_id)
    if not 0 <= after < 2**63:
        raise ApiError(422, "invalid_request", "after must be a seq: a whole number from 0.")
    if EVENT_STREAM in request.headers.get("Accept", ""):
        resume = request.headers.get("Last-Event-ID", "")
        if resume.isascii() and resume.isdecimal() and len(resume) < 19:
            after = max(after, int(resume))
        response = StreamingHttpResponse(
            _event_stream(run.pk, after, Credential.of(request)), content_type=EVENT_STREAM
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    events = run_events_after(run, after)
    return {
        "events": events,
        "last_seq": run.last_seq,
        "finished": run.is_terminal and (not events or events[-1]["seq"] == run.last_seq),
    }


def _events_after(run_id: int, after: int) -> tuple[list[dict[str, Any]], bool]:
    run = Run.objects.only("status", "last_seq").get(pk=run_id)
    events = run_events_after(run_id, after)
    seen = events[-1]["seq"] if events else after
    return events, run.is_terminal and seen >= run.last_seq


def _stream_read(
    run_id: int,
    after: int,
    credential: Credential,
    *,
    live: list[dict[str, Any]] | None,
    recheck: bool,
) -> tuple[list[dict[str, Any]], bool, bool]:
    """The events after a seq, whether the run has ended, and whether the credential holds.

    `live` are the events the run's group delivered (None: read the log). They are used as they
    are when they follow `after` without a gap and do not end the run; otherwise the log is read.
    The credential is read after the events, and whenever there are events to send: nothing
    read after a revocation committed leaves (one lookup by key per batch).
    """
    fresh = _following(live, after) if live is not None else None
    if fresh is not None:
        events, finished = fresh, False
    else:
        events, finished = _events_after(run_id, after)
    holds = credential.holds() if events or recheck else True
    return events, finished, holds


def _following(live: list[dict[str, Any]], after: int) -> list[dict[str, Any]] | None:
    """The delivered events after `after`, in order and once each, if they continue it without
    a gap and none ends the run (whose end the log confirms); else None."""
    fresh = {event["seq"]: event for event in live if event["seq"] > after}
    events = [fresh[seq] for seq in sorted(fresh)]
    if [event["seq"] for event in events] != list(range(after + 1, after + 1 + len(events))):
        return None
    if any(event["kind"] == RunEvent.Kind.RUN_FINISHED for event in events):
        return None
    return events


class GroupInbox:
    """Channel-layer groups followed by one stream: a channel of its own joined to them, and
    the messages it receives, queued until the stream asks for them."""

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups
        self.layer = get_channel_layer()
        self.channel = ""
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GroupInbox:
        # The in-memory layer's queues belong to this loop: publish committed events on it.
        bind_server_loop(asyncio.get_running_loop())
        self.channel = await self.layer.new_channel()
        for group in self.groups:
            await self.layer.group_add(group, self.channel)
        # One long receive, never cancelled mid-stream (a cancelled Redis receive may drop a
        # message): a wait that times out waits on the queue instead.
        self.reader = asyncio.ensure_future(self._read())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.reader is not None:
            self.reader.cancel()
        for group in self.groups:
            await self.layer.group_discard(group, self.channel)

    async def _read(self) -> None:
        try:
            while True:
                self.queue.put_nowait(await self.layer.receive(self.channel))
        except Exception:
            # The stream carries on, reading the log every STREAM_POLL_S.
            logger.exception("could not receive from %s", self.groups)

    async def wait(self, timeout: float) -> list[dict[str, Any]]:
        """Every message received so far, waiting up to `timeout` for the first (none: [])."""
        messages = []
        if self.queue.empty():
            try:
                messages.append(await asyncio.wait_for(self.queue.get(), timeout))
            except TimeoutError:
                return []
        while not self.queue.empty():
            messages.append(self.queue.get_nowait())
        return messages


def _ended_frame(credential: Credential) -> str:
    code, detail = credential.ended()
    return f"event: error\ndata: {json.dumps({'code': code, 'detail': detail})}\n\n"


async def _event_stream(run_id: int, after: int, credential: Credential) -> AsyncIterator[str]:
    """Server-sent events until the run has ended and its last event was sent, or until the
    stream's token (or session) no longer holds: then an error event ends it.

    It follows the run's group as the websocket consumer does: joined before the log is read,
    so nothing committed after the read is missed, and events at or below the last seq sent are
    dropped. The log is read again on a gap, on the run's end, and after STREAM_POLL_S without
    a message (the layer's delivery is best-effort).
    """
    read = db_async(_stream_read)
    loop = asyncio.get_running_loop()
    groups = [run_group(run_id)]
    if credential.session_key is not None:
        groups.append(user_group(credential.user.pk))  # a logout is announced there
    async with GroupInbox(groups) as inbox:
        quiet_since = checked_at = loop.time()
        yield "retry: 2000\n\n"
        live: list[dict[str, Any]] | None = None  # the first read is the log's
        recheck = False
        while True:
            events: list[dict[str, Any]] = []
            finished, holds = False, True
            if live != [] or recheck:  # a message with no event (answer tokens) reads nothing
                events, finished, holds = await read(
                    run_id, after, credential, live=live, recheck=recheck
                )
            if not holds:
                yield _ended_frame(credential)
                return
            if events or recheck:
                checked_at = loop.time()
            for event in events:
                after = event["seq"]
                data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
                yield f"id: {event['seq']}\nevent: {event['kind']}\ndata: {data}\n\n"
            if finished:
                return
            if events:
                quiet_since = loop.time()
            elif loop.time() - quiet_since >= STREAM_HEARTBEAT_S:
                quiet_since = loop.time()
                yield ": still running\n\n"
            recheck_every = max(STREAM_RECHECK_MIN_S, settings.AGENTSITE_STREAM_RECHECK_S)
            timeout = min(
                STREAM_POLL_S,
                checked_at + recheck_every - loop.time(),
                quiet_since + STREAM_HEARTBEAT_S - loop.time(),
            )
            messages = await inbox.wait(max(0.0, timeout))
            recheck = loop.time() - checked_at >= recheck_every
            if not messages:
                live = None  # a quiet spell: read the log
                continue
            kinds = {message.get("type") for message in messages}
            if "session.ended" in kinds:
                # The user logged out (announced before the session is gone): as their sockets.
                yield _ended_frame(credential)
                return
            recheck = recheck or "session.changed" in kinds  # a new password? re-read it now
            live = [
                event
                for message in messages
                if message.get("type") == "run.events"
                for event in message["events"]
            ]
