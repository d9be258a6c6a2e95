"""Batches a run's writes and commits them in order, mostly off the thread that schedules steps.

Each batch (step updates, audit rows, events, run fields) is committed in one transaction,
fenced by the run's lease, by a writer thread, so the advancing thread does not wait for the
database on the hot path. Callers wait (`flush(wait=True)`) only where durability matters:
before parking, at the end. Before calls start, the round's batch is committed on the
advancing thread itself when the writer has nothing to do (`flush_before_calls`): the calls
would wait for that commit anyway, and a hop to the writer and back costs more than it.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connections,
    transaction,
)
from django.utils import timezone

from plans.bulk import (
    JSONText,
    KeptConnection,
    connection_lost,
    connection_used,
    connection_wait,
    insert_new,
    insert_rows,
    rows_where,
    update_rows,
)
from plans.engine import args_sha256
from plans.guards.redaction import redact, redacted_json
from plans.journal.events import LeaseLost, announce_committed, append_events
from plans.journal.leases import Lease
from plans.journal.rollup import approvals_recorded, model_calls_recorded, tool_calls_recorded
from plans.models import (
    Approval,
    HumanQuestion,
    ModelCall,
    RunEvent,
    Step,
    ToolCall,
    ToolPreview,
)

# Group commit: writes wait at most this long, so a burst of steps costs one transaction.
FLUSH_DELAY_S = 0.005

# A writer thread with nothing to commit for this long exits and closes its connection.
IDLE_EXIT_S = 30.0
logger = logging.getLogger(__name__)


@dataclass
class Batch:
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    late_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    started_model_calls: list[ModelCall] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    stale_approvals: list[Approval] = field(default_factory=list)  # approved, target changed
    previews: list[ToolPreview] = field(default_factory=list)
    questions: list[HumanQuestion] = field(default_factory=list)
    run_fields: dict[str, Any] = field(default_factory=dict)
    oldest: float | None = None  # monotonic time of its oldest write
    urgent: bool = False  # someone waits for it: commit without waiting for more
    durables: list[Durable] = field(default_factory=list)  # told once it is committed (or not)


class Durable:
    """Whether a batch handed to the writer is committed: wait() blocks until that is known."""

    __slots__ = ("_known", "committed")

    def __init__(self) -> None:
        self._known = threading.Event()
        self.committed = False

    def settle(self, *, committed: bool) -> None:
        """Say whether the batch was committed; the first word stands (the writer settles
        each at its COMMIT, and again, to no effect, once the batch is done)."""
        if self._known.is_set():
            return
        self.committed = committed
        self._known.set()

    def wait(self) -> bool:
        """True once committed; False if it never will be (the writer failed)."""
        self._known.wait()
        return self.committed


class RunRecorder:
    """Collects a run's writes; flush() hands them to the writer as one batch."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self._batch = Batch()
        self._steps: dict[int, tuple[Step, set[str]]] = {}  # step id -> (step, changed fields)
        self._oldest: float | None = None  # monotonic time of the oldest unflushed write
        self._writer = _Writer.begin(lease)

    @property
    def cancel_requested(self) -> bool:
        return self._writer.cancel_requested

    def flush_due_in(self) -> float | None:
        """Seconds until the buffered writes must be handed over; None when nothing is buffered."""
        if self._oldest is None:
            return None
        return max(0.0, self._oldest + FLUSH_DELAY_S - time.monotonic())

    def event(self, kind: str, **payload: Any) -> None:
        self._touch()
        self._batch.events.append((kind, payload))

    def step_changed(self, step: Step, *fields: str) -> None:
        """These fields of the step changed; their values are read when the batch is taken."""
        self._touch()
        self._steps.setdefault(step.id, (step, set()))[1].update(fields)

    def tool_call(self, **row: Any) -> None:
        """A ToolCall row, given as column attributes (run_id, step_id, ...); text is redacted."""
        self._touch()
        self._batch.tool_calls.append(row)

    def tool_call_late(self, *, step_id: int, attempt: int, **late: Any) -> None:
        """What a call given up on as timed out returned after all (late_result, ...)."""
        self._touch()
        self._batch.late_tool_calls.append({"step_id": step_id, "attempt": attempt, **late})

    def model_call(self, call: ModelCall) -> None:
        """A finished model call: a new row, or the update of the row recorded as started."""
        self._touch()
        self._batch.model_calls.append(call)

    def model_call_started(self, call: ModelCall) -> None:
        """A model call about to be made; its row (and pk) exist once this is committed."""
        self._touch()
        self._batch.started_model_calls.append(call)

    def approval_requested(self, approval: Approval) -> None:
        self._touch()
        self._batch.approvals.append(approval)

    def approval_stale(self, approval: Approval, *, fresh: Approval) -> None:
        """An approval whose target changed before its call: marked stale, and asked afresh."""
        self._touch()
        self._batch.stale_approvals.append(approval)
        self._batch.approvals.append(fresh)

    def tool_preview(self, preview: ToolPreview) -> None:
        """A ToolPreview row: a preview hook's run (arguments and answer redacted as stored)."""
        self._touch()
        self._batch.previews.append(preview)

    def question_asked(self, question: HumanQuestion) -> None:
        self._touch()
        self._batch.questions.append(question)

    def run_changed(self, **fields: Any) -> None:
        self._touch()
        self._batch.run_fields.update(fields)

    def flush(self, *, run_fields: Mapping[str, Any] | None = None, wait: bool = False) -> bool:
        """Hand over what was collected; with wait, return once it is committed (on this
        thread, if the writer has nothing queued: this thread waits for it anyway).

        Raises the writer's error (LeaseLost, a database error) if an earlier batch failed.
        Returns whether a cancel was requested, as of the last committed batch.
        """
        batch = self._take(run_fields)
        if wait and self._writer.idle_here():
            self._writer.commit_here(batch)
            return self._writer.cancel_requested
        batch.urgent = wait
        self._writer.submit(batch)
        if wait:
            self._writer.wait_idle()
        self._writer.raise_failure()
        return self._writer.cancel_requested

    def flush_before_calls(self) -> Durable | None:
        """Commit what was collected before calls start: here, at once, if the writer has
        nothing queued or committing (None: committed; the calls start without a hop to the
        writer and back), else as flush_durable() does (the calls wait on its Durable).

        Raises what the commit raised (LeaseLost, a database error): then no call may start.
        """
        if self._writer.idle_here():
            self._writer.commit_here(self._take(None))
            return None
        return self.flush_durable()

    def flush_durable(self) -> Durable:
        """Hand over what was collected to be committed at once; without waiting for it, the
        returned Durable tells when it is (for a tool thread to wait on, not this one)."""
        batch = self._take(None)
        batch.urgent = True
        durable = Durable()
        batch.durables.append(durable)
        self._writer.submit(batch)
        self._writer.raise_failure()
        return durable

    def close(self) -> None:
        """Commit everything still queued and free the writer."""
        self._writer.end()

    def _touch(self) -> None:
        if self._oldest is None:
            self._oldest = time.monotonic()

    def _take(self, run_fields: Mapping[str, Any] | None) -> Batch:
        batch, self._batch = self._batch, Batch()
        # Snapshot the steps' fields now: the scheduler keeps changing the objects.
        batch.steps = [
            {"id": step.id, **{name: getattr(step, name) for name in fields}}
            for step, fields in self._steps.values()
        ]
        batch.run_fields.update(run_fields or {})
        batch.oldest = self._oldest
        self._steps = {}
        self._oldest = None
        return batch


class _Writer:
    """A thread that commits batches in order, each in one transaction fenced by the lease.

    One per advancing thread, reused run after run so that its database connection is too
    (opening one per run cost more than a small run's commits). It serves one run at a time,
    between begin() and end(); after IDLE_EXIT_S without work the thread exits (closing its
    connection) and the next batch starts a new one.
    """

    _per_thread = threading.local()

    def __init__(self) -> None:
        self.lease: Lease | None = None
        self.cancel_requested = False
        self.failure: BaseException | None = None
        self._queue: queue.Queue[Batch] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._connection = KeptConnection("the recorder")
        # The advancing thread's own connection (the one its reads use, opened by its lease and
        # closed by the thread's owner, a worker at its end), when it commits a batch itself
        # (commit_here); checked like the writer's before a use after an idle spell.
        self._here = KeptConnection("the recorder, on the advancing thread")
        # Within the attempt being committed: the events it appended, and whether it reached
        # COMMIT (a commit whose answer was lost may have happened).
        self._appended: list[dict[str, Any]] = []
        self._at_commit = False

    @classmethod
    def begin(cls, lease: Lease) -> _Writer:
        """This thread's writer, now serving the run of this lease (a new one if it is busy)."""
        writer = getattr(cls._per_thread, "writer", None)
        if writer is None or writer.lease is not None:
            writer = cls()
            if getattr(cls._per_thread, "writer", None) is None:
                cls._per_thread.writer = writer
        writer.lease = lease
        writer.cancel_requested = False
        writer.failure = None
        return writer

    def end(self) -> None:
        """Wait for the run's batches to be committed; the writer is free for another run."""
        self.wait_idle()
        self.lease = None

    def submit(self, batch: Batch) -> None:
        with self._lock:
            self._queue.put(batch)
            if self._thread is None:
                name = f"recorder-{threading.current_thread().name}"
                self._thread = threading.Thread(target=self._run, name=name, daemon=True)
                self._thread.start()

    def wait_idle(self) -> None:
        self._queue.join()

    def idle_here(self) -> bool:
        """Whether the calling thread may commit a batch itself: the writer has no batch queued
        or in progress (only the run's advancing thread hands it batches, so it stays idle),
        and the thread is in no transaction of its own (where a commit would not be one)."""
        with self._queue.mutex:
            if self._queue.unfinished_tasks:
                return False
        return self.failure is None and not connections[DEFAULT_DB_ALIAS].in_atomic_block

    def commit_here(self, batch: Batch) -> None:
        """Commit the batch on the calling thread (idle_here() said it may), as the writer
        would; a failure is raised here and stops the writer too, as its own would."""
        try:
            self._commit_retrying(batch, self._here)
        except BaseException as error:
            self.failure = error
            connections.close_all()  # a broken connection is not reused
            raise

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        try:
            while batches := self._take_waiting():
                batch, committed = _merged(batches), False
                try:
                    if self.failure is None:
                        self._commit_retrying(batch, self._connection)
                        committed = True
                except BaseException as error:
                    # Nothing after a failed batch may be written: the run's log stays a prefix.
                    self.failure = error
                    connections.close_all()  # a broken connection is not reused
                finally:
                    for durable in batch.durables:
                        durable.settle(committed=committed)
                    for _ in batches:
                        self._queue.task_done()
        finally:
            connections.close_all()

    def _take_waiting(self) -> list[Batch]:
        """The next batches to commit as one transaction; [] to exit when idle.

        Group commit: a batch handed over young (say at the end of a run's steps, just before
        the answer) waits until its oldest write is FLUSH_DELAY_S old, so the batches that
        follow share its transaction, unless someone waits for it.
        """
        try:
            batches = [self._queue.get(timeout=IDLE_EXIT_S)]
        except queue.Empty:
            with self._lock:
                if self._queue.empty():
                    self._thread = None  # the next submit starts a new thread
                    return []
            batches = [self._queue.get()]
        oldest = batches[0].oldest
        due = (oldest if oldest is not None else time.monotonic()) + FLUSH_DELAY_S
        while not batches[-1].urgent and (left := due - time.monotonic()) > 0:
            try:
                batches.append(self._queue.get(timeout=left))
            except queue.Empty:
                break
        while not self._queue.empty():
            batches.append(self._queue.get_nowait())
        return batches

    def _commit_retrying(self, batch: Batch, kept: KeptConnection) -> None:
        """Commit the batch; on a lost connection, reconnect and try once more (in the lease).

        No retry can write a batch twice. A failed transaction was rolled back as a whole, so a
        second attempt starts clean: it allocates the next seqs (the UPDATE of the run row,
        fenced by the lease) and chains onto whatever hash is then the last. Only a failure of
        COMMIT itself is in doubt (the server may have committed and its answer been lost):
        then the batch's last event decides. (run, seq) is unique, and nothing but this writer
        writes under this lease's token, so an event at that seq with this token is this very
        batch, committed; no such event means the transaction (events included) never was. A
        batch in doubt without events has no such witness, and is not retried: the advance ends
        and another take-up reads what the database holds.
        """
        lease = self.lease
        assert lease is not None, "a batch was submitted outside begin() and end()"
        kept.check()
        used = None
        try:
            used = connection_used()
            self._commit(batch)
            return
        except (OperationalError, InterfaceError) as error:
            if used is not None and not connection_lost(used=used):
                raise  # the server answered (a lock timeout, a deadlock): not retried here
            logger.warning("run %s: the recorder lost its connection (%s)", lease.run_id, error)
            lost, in_doubt, appended = error, self._at_commit, self._appended
            connections.close_all()
            if not connection_wait(lease.valid_until):
                raise
            if lease.lost.is_set():
                raise LeaseLost(f"run {lease.run_id}: lease {lease.token} was lost") from error
        if in_doubt:
            if not appended:
                raise lost
            last = appended[-1]["seq"]
            if RunEvent.objects.filter(
                run_id=lease.run_id, seq=last, lease_token=lease.token
            ).exists():
                logger.warning("run %s: the commit in doubt had happened", lease.run_id)
                announce_committed(lease.run_id, appended)
                return
        self._commit(batch)
        logger.warning("run %s: the recorder's retry committed", lease.run_id)

    def _commit(self, batch: Batch) -> None:
        lease = self.lease
        assert lease is not None, "a batch was submitted outside begin() and end()"
        self._appended, self._at_commit = [], False
        started = time.monotonic()
        fields = {
            "lease_expires_at": timezone.now() + timedelta(seconds=lease.seconds),
            **batch.run_fields,
        }
        with transaction.atomic():
            if batch.durables:
                # The first hook after COMMIT: a call waiting for it starts before the events
                # are published (the websockets, the notifier), not after.
                transaction.on_commit(functools.partial(_settle_committed, batch.durables))
            # Fence first: the run row stays locked until commit, and a lost lease writes nothing.
            self._appended, self.cancel_requested = append_events(
                lease.run_id, batch.events, lease_token=lease.token, run_fields=fields
            )
            for names, rows in _by_fields(batch.steps).items():
                update_rows(Step, rows, names)
            tool_calls = [_redacted(row) for row in batch.tool_calls]
            insert_rows(ToolCall, tool_calls)
            tool_calls_recorded(tool_calls)
            for late in batch.late_tool_calls:
                record_late_tool_call(**late)
            # Every priced model call is written here when it starts and again when it ends:
            # prepared, since the ORM's save, in_bulk and update cost several times the statements.
            for call in batch.started_model_calls:
                insert_new(call)
            model_calls_recorded(lease.run_id, batch.started_model_calls)
            new_calls = [call for call in batch.model_calls if call.pk is None]
            insert_rows(ModelCall, [_model_call_row(call) for call in new_calls])
            model_calls_recorded(lease.run_id, new_calls)
            if updated_calls := [call for call in batch.model_calls if call.pk is not None]:
                # Started at their estimate: the rollup takes the difference.
                before = {
                    stored.pk: stored
                    for call in updated_calls
                    for stored in rows_where(ModelCall, id=call.pk)
                }
                rows = [{"id": call.pk, **_model_call_row(call)} for call in updated_calls]
                update_rows(ModelCall, rows, [name for name in rows[0] if name != "id"])
                model_calls_recorded(lease.run_id, updated_calls, before=before)
            for stale in batch.stale_approvals:
                # Before the fresh request: one pending approval per step.
                Approval.objects.filter(pk=stale.pk).update(decision=Approval.Decision.STALE)
            if batch.approvals:
                Approval.objects.bulk_create(batch.approvals)
                approvals_recorded(batch.approvals)  # those a rule decided as they were asked
            if batch.previews:
                ToolPreview.objects.bulk_create([preview_row_redacted(p) for p in batch.previews])
            if batch.questions:
                HumanQuestion.objects.bulk_create(batch.questions)
            self._at_commit = True
        lease.extend_from(started)  # the fenced commit renewed the lease


def _settle_committed(durables: list[Durable]) -> None:
    for durable in durables:
        durable.settle(committed=True)


def _merged(batches: list[Batch]) -> Batch:
    """One batch doing what the given ones do in order (later step and run values win)."""
    if len(batches) == 1:
        return batches[0]
    merged = Batch()
    steps: dict[int, dict[str, Any]] = {}
    for batch in batches:
        merged.events += batch.events
        for step in batch.steps:
            steps.setdefault(step["id"], {}).update(step)
        merged.tool_calls += batch.tool_calls
        merged.late_tool_calls += batch.late_tool_calls
        merged.model_calls += batch.model_calls
        merged.started_model_calls += batch.started_model_calls
        merged.approvals += batch.approvals
        merged.stale_approvals += batch.stale_approvals
        merged.previews += batch.previews
        merged.questions += batch.questions
        merged.run_fields.update(batch.run_fields)
        merged.durables += batch.durables
    merged.steps = list(steps.values())
    return merged


def _model_call_row(call: ModelCall) -> dict[str, Any]:
    """The call as {attname: value}, stamped now if unsaved (what auto_now_add would do)."""
    if call.created_at is None:
        call.created_at = timezone.now()
    fields = [f for f in ModelCall._meta.concrete_fields if not f.primary_key]
    return {f.attname: getattr(call, f.attname) for f in fields}


def _by_fields(steps: list[dict[str, Any]]) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Step rows grouped by the fields they set, so each group is one executemany."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for step in steps:
        fields = tuple(sorted(name for name in step if name != "id"))
        groups.setdefault(fields, []).append(step)
    return groups


def record_late_tool_call(
    *, step_id: int, attempt: int, late_result: Any, late_error: str, late_arrived_at: Any
) -> None:
    """What a call given up on as timed out returned after all, on its ToolCall row (redacted)."""
    ToolCall.objects.filter(step_id=step_id, attempt=attempt).update(
        late_result=None if late_result is None else redacted_json(late_result)[0],
        late_error=redact(late_error),
        late_arrived_at=late_arrived_at,
    )


def preview_row_redacted(preview: ToolPreview) -> ToolPreview:
    """A ToolPreview row as stored: its arguments hashed first (an approval's hash), then it and
    the hook's answer redacted like a call's."""
    preview.args_sha256 = preview.args_sha256 or args_sha256(preview.tool, preview.args)
    preview.error = redact(preview.error)
    preview.args = redacted_json(preview.args)[0]
    if preview.preview is not None:
        preview.preview = redacted_json(preview.preview)[0]
    return preview


def _redacted(tool_call: dict[str, Any]) -> dict[str, Any]:
    # Here rather than when recorded: the writer's thread is off the scheduling path.
    row = {**tool_call, "error": redact(tool_call["error"])}
    for name in ("args", "result"):
        if row[name] is not None:  # None stays SQL NULL
            row[name] = JSONText(redacted_json(row[name])[1])
    return row
