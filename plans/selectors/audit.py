"""One run's records for its audit page and its JSON export."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections
from django.db.models import Count, DateTimeField, JSONField, Max, Min, Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from plans.engine.plan_diff import PlanDiff, plan_diff, reused_results
from plans.guards.audit import chain_problems
from plans.models import Approval, ModelCall, Plan, Run, RunEvent, Step, ToolCall, ToolPreview

# --- one run's audit -------------------------------------------------------------------------


@dataclass
class PlanVersion:
    plan: Plan
    # Every step (the export; an audit of several versions, which compares them). An audit of
    # one version reads only the page of steps it shows: see shown_steps and steps_total.
    steps: list[Step]
    # Set by run_audit_get for a replan: how this version differs from the one it replaced.
    diff: PlanDiff | None = None
    # Set by run_audit_get: the page of the steps its table and timeline show, of how many.
    shown_steps: list[Step] = field(default_factory=list)
    steps_total: int = 0


@dataclass
class RunRecords:
    """Everything recorded about a run, each list in the order it happened."""

    run: Run
    versions: list[PlanVersion]
    approvals: list[Approval]
    model_calls: list[ModelCall]
    tool_calls: list[ToolCall]
    events: list[RunEvent]


# A plan's fields of text (large for a large plan), left unread where only its version is shown.
PLAN_TEXTS = ("raw_output", "problems", "change_requests", "forecast")
# The steps' fields that hold tool values (large, JSON): read only for the steps shown.
STEP_VALUES = ("args", "resolved_args", "result")


@dataclass(frozen=True)
class ToolRow:
    """A tool call or a run of a destructive tool's preview hook, as the audit lists them."""

    call: ToolCall | None = None
    preview: ToolPreview | None = None


@dataclass(frozen=True)
class StepTimes:
    """When the run's steps ran, over every version (the timeline's axis, whatever it draws)."""

    first_started: datetime | None = None
    last_finished: datetime | None = None
    running: bool = False  # a step started and not finished: its bar runs on to now
    versions_started: int = 0  # versions with a started step


# Events the audit page shows at a time, as many as the run page's timeline: a 500-step run
# has thousands, and each row's payload is most of a page's rendering.
AUDIT_EVENTS_PAGE = 100
# Steps of each plan version (in its table and the timeline), and tool calls, the audit page
# shows at a time: rendering 500 of each with their arguments and results took most of a
# 500-step run's page.
AUDIT_ROWS_PAGE = 50


@dataclass
class RunAudit(RunRecords):
    chain_problems: list[str] = field(default_factory=list)
    events_total: int = 0
    # The events shown are those after seq events_after; the neighbouring pages' starts.
    events_after: int = 0
    events_next_after: int | None = None
    events_previous_after: int | None = None
    # Likewise each version's steps shown, those after its first steps_after, and tool calls.
    steps_after: int = 0
    steps_next_after: int | None = None
    steps_previous_after: int | None = None
    tool_calls_total: int = 0
    tool_calls_after: int = 0
    tool_calls_next_after: int | None = None
    tool_calls_previous_after: int | None = None
    # The page's tool calls with the previews taken between them, in the order they started.
    tool_rows: list[ToolRow] = field(default_factory=list)
    step_times: StepTimes = field(default_factory=StepTimes)
    # The answer check's citations of steps that succeeded are counted, not listed.
    citations_valid: int = 0
    citations_flagged: list[dict[str, Any]] = field(default_factory=list)

    @property
    def steps_paged(self) -> bool:
        return self.steps_next_after is not None or self.steps_previous_after is not None


def neighbour_pages(
    *, after: int, shown: int, total: int, size: int
) -> tuple[int | None, int | None]:
    """Where the next and the previous page of a list start, when a page shows `shown` rows
    after its first `after` of `total` (None where there is none)."""
    following = after + shown
    return (
        following if following < total else None,
        max(0, after - size) if after else None,
    )


def _tool_calls_in_order(run: Run) -> QuerySet[ToolCall]:
    """The run's tool calls as they started, each with its step's number and plan version:
    not their values and text (large, and read once per row)."""
    unread = [f"step__{name}" for name in STEP_VALUES]
    unread += [f"step__plan__{name}" for name in PLAN_TEXTS]
    calls = run.tool_calls.select_related("step__plan").defer(*unread)
    return calls.order_by("started_at", "pk")


def run_audit_get(
    *,
    run: Run,
    events_after: int = 0,
    events_page: int | None = None,
    steps_after: int = 0,
    tool_calls_after: int = 0,
) -> RunAudit:
    """The run's records with a page of its event log, of each version's steps and of its tool
    calls, and a check of its whole event hash chain."""
    events_page = events_page or AUDIT_EVENTS_PAGE
    rows_page = AUDIT_ROWS_PAGE
    plans = list(run.plans.order_by("version").select_related("decided_by"))
    counts, step_times = _steps_counted(run)
    versions = [
        PlanVersion(plan=plan, steps=[], steps_total=counts.get(plan.pk, 0)) for plan in plans
    ]
    if len(versions) > 1:
        # Versions are compared whole (the diff), so every step is read.
        steps = Step.objects.filter(plan__run=run).order_by("plan_id", "step_id")
        by_plan: dict[int, list[Step]] = {}
        for step in steps:
            by_plan.setdefault(step.plan_id, []).append(step)
        for version in versions:
            version.steps = by_plan.get(version.plan.pk, [])
            version.shown_steps = version.steps[steps_after : steps_after + rows_page]
    elif versions:
        # One version: only the page of steps shown is read, arguments and results included.
        (version,) = versions
        shown = version.plan.steps.order_by("step_id")[steps_after : steps_after + rows_page]
        version.shown_steps = list(shown)
    events = list(run.events.filter(seq__gt=events_after).order_by("seq")[:events_page])
    tool_calls = list(_tool_calls_in_order(run)[tool_calls_after : tool_calls_after + rows_page])
    records = RunRecords(
        run=run,
        versions=versions,
        approvals=list(
            run.approvals.select_related("reviewer", "step__plan").order_by("requested_at", "pk")
        ),
        model_calls=list(run.model_calls.order_by("created_at", "pk")),
        tool_calls=tool_calls,
        events=events,
    )
    # The event log is read after a seq; seqs run from 1 without gaps, so seq is a position.
    last_shown = events[-1].seq if events else events_after
    events_next_after, events_previous_after = neighbour_pages(
        after=events_after, shown=last_shown - events_after, total=run.last_seq, size=events_page
    )
    steps_next_after, steps_previous_after = neighbour_pages(
        after=steps_after,
        shown=max((len(version.shown_steps) for version in versions), default=0),
        total=max((version.steps_total for version in versions), default=0),
        size=rows_page,
    )
    tool_calls_total = run.tool_calls.count()
    tool_calls_next_after, tool_calls_previous_after = neighbour_pages(
        after=tool_calls_after,
        shown=len(tool_calls),
        total=tool_calls_total,
        size=rows_page,
    )
    previews = _previews_beside_calls(
        run,
        tool_calls,
        after=tool_calls_after,
        last_page=tool_calls_next_after is None,
    )
    citations = (run.answer_check or {}).get("citations", [])
    audit = RunAudit(
        **vars(records),
        chain_problems=chain_problems(run),
        events_total=run.last_seq,
        events_after=events_after,
        events_next_after=events_next_after,
        events_previous_after=events_previous_after,
        steps_after=steps_after,
        steps_next_after=steps_next_after,
        steps_previous_after=steps_previous_after,
        tool_calls_total=tool_calls_total,
        tool_calls_after=tool_calls_after,
        tool_calls_next_after=tool_calls_next_after,
        tool_calls_previous_after=tool_calls_previous_after,
        tool_rows=_in_start_order(tool_calls, previews),
        step_times=step_times,
        citations_valid=sum(1 for citation in citations if citation.get("valid")),
        citations_flagged=[citation for citation in citations if not citation.get("valid")],
    )
    _compare_versions(records)
    return audit


def _steps_counted(run: Run) -> tuple[dict[int, int], StepTimes]:
    """How many steps each version has (by plan id), and when the run's steps ran: one
    grouped read, whatever the number of steps."""
    rows = (
        Step.objects.filter(plan__run=run)
        .values("plan_id")
        .annotate(
            n=Count("pk"),
            first=Min("started_at"),
            last=Max("finished_at"),
            running=Count("pk", filter=Q(started_at__isnull=False, finished_at__isnull=True)),
        )
        .order_by()
    )
    counts: dict[int, int] = {}
    firsts, lasts, running = [], [], False
    for row in rows:
        counts[row["plan_id"]] = row["n"]
        if row["first"] is not None:
            firsts.append(row["first"])
        if row["last"] is not None:
            lasts.append(row["last"])
        running = running or bool(row["running"])
    times = StepTimes(
        first_started=min(firsts, default=None),
        last_finished=max(lasts, default=None),
        running=running,
        versions_started=len(firsts),
    )
    return counts, times


def _previews_beside_calls(
    run: Run, calls: list[ToolCall], *, after: int, last_page: bool
) -> list[ToolPreview]:
    """The previews taken between the page's tool calls: after the previous page's last call,
    up to this page's last (the first page from the start, the last page to the end)."""
    if after and not calls:
        return []  # past the last call: its page shows the rest
    previews = run.tool_previews.select_related("step__plan").order_by("started_at", "pk")
    if after:
        # The calls are paged in this order: the one before the page is its lower bound.
        before = run.tool_calls.order_by("started_at", "pk")[after - 1]
        previews = previews.filter(started_at__gt=before.started_at)
    if not last_page:
        previews = previews.filter(started_at__lte=calls[-1].started_at)
    return list(previews)


def _in_start_order(calls: list[ToolCall], previews: list[ToolPreview]) -> list[ToolRow]:
    rows = [ToolRow(call=call) for call in calls] + [ToolRow(preview=p) for p in previews]
    # Stable: calls keep their (started_at, pk) order, and a preview started at the same
    # instant as a call goes first (a re-check is taken before its call).
    return sorted(rows, key=lambda row: (_row_started(row), row.call is not None))


def _row_started(row: ToolRow) -> Any:
    shown = row.call if row.call is not None else row.preview
    assert shown is not None
    return shown.started_at


def _compare_versions(records: RunRecords) -> None:
    """Give every version after the first a diff against its parent (else the one before it)."""
    if len(records.versions) < 2:
        return
    by_pk = {version.plan.pk: version for version in records.versions}
    # Read apart: the records may hold one page of the event log only.
    reused = reused_results(
        records.run.events.filter(kind__in=("plan_created", "step_finished")).order_by("seq")
    )
    for previous, version in zip(records.versions, records.versions[1:], strict=False):
        parent = version.plan.parent_id
        base = by_pk.get(parent, previous) if parent is not None else previous
        version.diff = PlanDiff(
            old_version=base.plan.version,
            new_version=version.plan.version,
            changes=plan_diff(
                base.steps,
                version.steps,
                reused_from=reused.get(version.plan.version),
                old_version=base.plan.version,
            ),
        )


EXPORT_FORMAT = "agentsite.run-export/1"


class _ExportEncoder(DjangoJSONEncoder):
    """Decimals in plain notation (a zero cost is "0.00000000", not str(Decimal)'s "0E-8"), and
    times to the microsecond: an event's hash covers its time whole, so the export's event log
    verifies on its own (DjangoJSONEncoder cuts times to the millisecond)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, Decimal):
            return format(o, "f")
        if isinstance(o, datetime):
            text = o.isoformat()
            return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text
        return super().default(o)


def run_export_chunks(*, run: Run, size: int = 64 * 1024) -> Iterator[str]:
    """The export as JSON text in pieces of about `size`, encoded as the rows are read.

    One record a line (each encoded by json's C encoder: an indented whole goes through its
    Python one, most of a 500-step run's export). No byte of it could open a tag were it
    sniffed as HTML.
    """
    buffer: list[str] = []
    held = 0
    for piece in _export_lines(run_export_data(run=run)):
        buffer.append(piece)
        held += len(piece)
        if held >= size:
            yield _unsniffable("".join(buffer))
            buffer, held = [], 0
    if buffer:
        yield _unsniffable("".join(buffer))


def _export_lines(data: dict[str, Any]) -> Iterator[str]:
    """The export's text: its sections in order, each list one record a line."""
    yield "{"
    for index, (name, value) in enumerate(data.items()):
        yield ("\n" if index == 0 else ",\n") + f"  {_encode(name)}: "
        if isinstance(value, list):
            rows = iter(value)
            first = next(rows, _NOTHING)
            if first is _NOTHING:
                yield "[]"
                continue
            yield "[\n    " + _json(first)
            for row in rows:
                yield ",\n    " + _json(row)
            yield "\n  ]"
        else:
            yield _json(value)
    yield "\n}"


class Encoded(str):
    """JSON text already written: a record encoded as it was read, or a JSON column's value
    as the database spells it (valid JSON, spliced in as it is rather than decoded and
    encoded again)."""


_encode = _ExportEncoder(ensure_ascii=False).encode
_encode_datetime = _ExportEncoder().default


def _json(value: Any) -> str:
    """value as JSON, as _ExportEncoder writes it; Encoded text spliced in as it is."""
    kind = type(value)
    if kind is Encoded:
        return value
    if kind is str:
        return encode_basestring(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is datetime:
        return encode_basestring(_encode_datetime(value))
    if kind is dict and any(type(item) is Encoded for item in value.values()):
        return "{" + ", ".join(f"{_encode(k)}: {_json(item)}" for k, item in value.items()) + "}"
    return _encode(value)


def _records(rows: QuerySet[Any], columns: tuple[tuple[str, str], ...]) -> Iterator[Encoded]:
    """Each row of the query as one JSON object of these (name, column) pairs, in order."""
    return (record for _, record in _records_beside(rows, columns))


def _records_beside(
    rows: QuerySet[Any], columns: tuple[tuple[str, str], ...], beside: str = "pk"
) -> Iterator[tuple[Any, Encoded]]:
    """_records, each with the row's value of the column `beside`.

    Tuples, not model instances; a JSON column as its stored text, and on SQLite a time as its
    stored text too: a 500-step run's export spent most of its time making instances, decoding
    and encoding those values, and reading times into datetimes only to write them out again.
    """
    fields = {field.name: field for field in rows.model._meta.get_fields()}
    times_as_text = connections[rows.db].vendor == "sqlite"
    read = [beside]
    as_text = {}
    writers: list[Callable[[Any], str]] = []
    for name, column in columns:
        kind = fields.get(column)
        if isinstance(kind, JSONField):
            writers.append(_stored_json)
        elif times_as_text and isinstance(kind, DateTimeField):
            writers.append(_stored_time)
        else:
            read.append(column)
            writers.append(_json)
            continue
        as_text[f"exported_{name}"] = Cast(column, TextField())
        read.append(f"exported_{name}")
    keys = [f"{_encode(name)}: " for name, _ in columns]
    for extra, *values in rows.annotate(**as_text).values_list(*read).iterator(chunk_size=1000):
        pairs = zip(keys, writers, values, strict=True)
        record = ", ".join(key + write(value) for key, write, value in pairs)
        yield extra, Encoded("{" + record + "}")


def _stored_json(text: str | None) -> str:
    return "null" if text is None else text


# How Django's SQLite backend stores a time: in UTC, without its offset.
_SQLITE_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})?")


def _stored_time(text: str | None) -> str:
    """A time as SQLite stores it, written as _ExportEncoder writes the datetime it stands for."""
    if text is None:
        return "null"
    if _SQLITE_TIME.fullmatch(text):
        return f'"{text[:10]}T{text[11:]}Z"'
    # Written some other way (by hand, or a raw statement): read as Django's backend reads it.
    moment = parse_datetime(text)
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _json(moment)


_NOTHING = object()


def run_export_json(*, run: Run) -> str:
    """The whole export as one JSON text (for the API's response)."""
    return "".join(run_export_chunks(run=run))


def _unsniffable(text: str) -> str:
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


class Streamed(list[Any]):
    """Rows read as they are encoded: to json's encoder (with an indent, its Python one) a
    list, whose items come from a database cursor a chunk at a time, not loaded first."""

    def __init__(self, rows: Callable[[], Iterator[Any]]) -> None:
        super().__init__()
        self._rows = rows
        self._started: Iterator[Any] | None = None

    def __bool__(self) -> bool:
        # The encoder asks first (an empty list is written apart): read the first row to know.
        rows = self._rows()
        try:
            first = next(rows)
        except StopIteration:
            return False
        self._started = itertools.chain([first], rows)
        return True

    def __iter__(self) -> Iterator[Any]:
        started, self._started = self._started, None
        return started if started is not None else self._rows()


# The fields each record is exported with, in order (the names are the models' own).
RUN_FIELDS = (
    "status", "answer", "answer_check", "origin_id", "origin_kind", "origin_plan_version",
    "error", "budget_usd", "budget_tokens", "max_parallel_steps", "cancel_requested",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd",
    "model_call_count", "round_count", "tools_used", "created_at", "started_at", "finished_at",
    "duration_ms", "last_seq", "last_event_hash",
)  # fmt: skip
STEP_FIELDS = (
    "tool", "args", "depends_on", "destructive", "round", "status", "resolved_args", "result",
    "error", "attempts", "reused_from", "started_at", "finished_at",
)  # fmt: skip
MODEL_CALL_FIELDS = (
    "purpose", "model", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "prices", "cost_usd", "latency_ms", "error", "created_at",
)  # fmt: skip
TOOL_CALL_FIELDS = (
    "tool", "attempt", "args", "result", "error", "idempotency_key", "started_at",
    "duration_ms", "late_result", "late_error", "late_arrived_at",
)  # fmt: skip
TOOL_PREVIEW_FIELDS = (
    "tool", "purpose", "args", "args_sha256", "preview", "error", "started_at", "duration_ms",
)  # fmt: skip
EVENT_FIELDS = ("seq", "kind", "payload", "at", "prev_hash", "hash")

# The same as (exported name, column) pairs for _records: a record's step is named by its plan
# version and step id.
STEP_COLUMNS = (("id", "step_id"), *((name, name) for name in STEP_FIELDS))
_OF_STEP = (("plan_version", "step__plan__version"), ("step", "step__step_id"))
TOOL_CALL_COLUMNS = (("id", "id"), *_OF_STEP, *((name, name) for name in TOOL_CALL_FIELDS))
TOOL_PREVIEW_COLUMNS = (("id", "id"), *_OF_STEP, *((name, name) for name in TOOL_PREVIEW_FIELDS))
EVENT_COLUMNS = tuple((name, name) for name in EVENT_FIELDS)


def _fields(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    # A foreign key's column exports under the relation's name ("origin", not "origin_id").
    return {name.removesuffix("_id"): getattr(row, name) for name in names}


def _username(user: Any) -> str | None:
    return user.get_username() if user else None


def run_export_data(*, run: Run) -> dict[str, Any]:
    """The whole run as JSON-ready data: run, goal, plans and steps, and every record.

    The steps, tool calls, previews and the event log (most of a big run) are Encoded records;
    the last three Streamed: read while encoded.
    """
    plans = list(run.plans.order_by("version").select_related("decided_by"))
    steps: dict[int, list[str]] = {}
    step_rows = Step.objects.filter(plan__run=run).order_by("plan_id", "step_id")
    for plan_id, record in _records_beside(step_rows, STEP_COLUMNS, "plan_id"):
        steps.setdefault(plan_id, []).append(record)
    approvals = run.approvals.select_related("reviewer", "step__plan")
    tool_calls = run.tool_calls.order_by("started_at", "pk")
    previews = run.tool_previews.order_by("started_at", "pk")
    events = run.events.order_by("seq")
    goal = run.goal
    version_of = {plan.pk: plan.version for plan in plans}
    return {
        "format": EXPORT_FORMAT,
        "exported_at": timezone.now(),
        "run": {"id": run.pk, **_fields(run, RUN_FIELDS)},
        "goal": {
            "id": goal.pk,
            "text": goal.text,
            "author": goal.author.get_username(),
            "run_dependants_of_failures": goal.run_dependants_of_failures,
            "require_plan_approval": goal.require_plan_approval,
            "created_at": goal.created_at,
        },
        "plans": [_exported_plan(plan, version_of, steps=steps.get(plan.pk, [])) for plan in plans],
        "approvals": [
            _exported_approval(approval) for approval in approvals.order_by("requested_at", "pk")
        ],
        "model_calls": [
            {"id": call.pk, **_fields(call, MODEL_CALL_FIELDS)}
            for call in run.model_calls.order_by("created_at", "pk")
        ],
        "tool_calls": Streamed(lambda: _records(tool_calls, TOOL_CALL_COLUMNS)),
        # Each run of a destructive tool's preview hook: at the request, for a reviewer's
        # edit, and re-checked just before the call.
        "tool_previews": Streamed(lambda: _records(previews, TOOL_PREVIEW_COLUMNS)),
        "events": Streamed(lambda: _records(events, EVENT_COLUMNS)),
    }


def _exported_plan(plan: Plan, version_of: dict[int, int], *, steps: list[str]) -> dict[str, Any]:
    return {
        "version": plan.version,
        "parent_version": version_of.get(plan.parent_id) if plan.parent_id else None,
        "source": plan.source,
        "is_valid": plan.is_valid,
        "problems": plan.problems,
        "raw_output": plan.raw_output,
        "created_at": plan.created_at,
        "decision": plan.decision,
        "decided_by": _username(plan.decided_by),
        "decision_reason": plan.decision_reason,
        "decided_at": plan.decided_at,
        "steps": Encoded("[" + ", ".join(steps) + "]"),
    }


def _exported_approval(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.pk,
        "plan_version": approval.step.plan.version,
        "step": approval.step.step_id,
        "tool": approval.tool,
        "requested_args": approval.requested_args,
        "args": approval.args,
        "edited": approval.args != approval.requested_args,
        "args_sha256": approval.args_sha256,
        "decision": approval.decision,
        "reviewer": _username(approval.reviewer),
        "via": approval.via,
        "reason": approval.reason,
        "requested_at": approval.requested_at,
        "decided_at": approval.decided_at,
        # The tool's preview the reviewer saw; a request made again names the stale one.
        "preview": approval.preview,
        "supersedes": approval.supersedes_id,
        "changes": approval.changes,
    }


def plan_diff_from_parent(plan: Plan | None) -> PlanDiff | None:
    """How a replanned version differs from the one it replaced (None for a first version)."""
    if plan is None or plan.parent_id is None:
        return None
    parent = Plan.objects.filter(pk=plan.parent_id).first()
    if parent is None:
        return None
    return PlanDiff(
        old_version=parent.version,
        new_version=plan.version,
        changes=plan_diff(
            list(parent.steps.all()), list(plan.steps.all()), old_version=parent.version
        ),
    )
