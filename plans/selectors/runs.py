"""Which runs someone may see (the one rule), and the runs list's filters and sorts."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Value,
    When,
    prefetch_related_objects,
)
from django.utils import timezone

from plans.journal.events import event_message
from plans.models import Goal, Run, RunEvent, Step
from plans.roles import may_decide
from plans.tools.human import ASK_HUMAN

# --- who sees what: the one rule ---------------------------------------------------------


def run_visibility(user: User | AnonymousUser, *, through: str = "") -> Q | None:
    """Who may see a run, as a filter on runs (or on rows reaching a run ``through`` a path).

    A run is visible to its goal's author, to operators and reviewers (plans.view_all_runs),
    and to anyone who may decide approvals (a reviewer sees what they decide). None: no run.
    """
    if not user.is_authenticated:
        return None
    if user.has_perm("plans.view_all_runs") or may_decide(user):
        return Q()
    return Q(**{f"{through}goal__author": user})


def runs_visible_to(user: User | AnonymousUser) -> QuerySet[Run]:
    """The runs the user may see, goal and author joined."""
    rule = run_visibility(user)
    runs = Run.objects.select_related("goal__author")
    return runs.none() if rule is None else runs.filter(rule)


def run_visible_get(*, user: User | AnonymousUser, run_id: int) -> Run | None:
    """The run, if it exists and the user may see it (whether it exists is not told apart)."""
    return runs_visible_to(user).filter(pk=run_id).first()


DERIVED_SHOWN = 20
DERIVED_KEPT = "derived_visible"  # where runs_derived_read keeps a run's derived runs


def runs_derived(*, run: Run, user: User | AnonymousUser) -> list[Run]:
    """The forks and re-runs of this run the user may see, oldest first (at most
    DERIVED_SHOWN + 1, so a page can tell there are more); as runs_derived_read kept them."""
    kept = getattr(run, DERIVED_KEPT, None)
    if kept is not None:
        return kept
    runs_derived_read([run], user=user)
    return getattr(run, DERIVED_KEPT)


def runs_derived_read(runs: list[Run], *, user: User | AnonymousUser) -> None:
    """Read runs_derived for every run of a list in one query, kept on each run."""
    rule = run_visibility(user)
    if rule is None:
        for run in runs:
            setattr(run, DERIVED_KEPT, [])
        return
    derived = Run.objects.filter(rule).order_by("pk")
    derived = derived.only("pk", "origin_id", "origin_kind", "origin_plan_version")
    prefetch_related_objects(
        runs, Prefetch("derived_runs", queryset=derived[: DERIVED_SHOWN + 1], to_attr=DERIVED_KEPT)
    )


def run_get(run_id: int) -> Run:
    """The run with its goal and author (raises Run.DoesNotExist)."""
    return Run.objects.select_related("goal__author").get(pk=run_id)


def run_events_after(run: Run | int, after: int) -> list[dict[str, Any]]:
    """The run's events after seq `after`, oldest first, in the form they were published."""
    run_id = run if isinstance(run, int) else run.pk
    return [event_message(e) for e in RunEvent.objects.filter(run_id=run_id, seq__gt=after)]


def runs_recent_of(author: User, *, limit: int) -> QuerySet[Run]:
    """The author's latest runs, newest first, goal joined."""
    runs = Run.objects.filter(goal__author=author).select_related("goal")
    return runs.order_by("-created_at")[:limit]


def authors_with_goals() -> list[str]:
    """The usernames of everyone who has handed the agent a goal, in order."""
    users = get_user_model().objects.filter(Exists(Goal.objects.filter(author=OuterRef("pk"))))
    return list(users.order_by("username").values_list("username", flat=True))


# --- the runs list ---------------------------------------------------------------------------

# Each order ends with the primary key so pages never overlap or skip rows with equal keys.
# Every leading key has an index: created_at, cost_usd, and duration_ms (a stored generated
# column). Unfinished runs have no duration and sort after the finished ones either way.
RUN_SORTS: dict[str, tuple[Any, ...]] = {
    "-date": ("-created_at", "-pk"),
    "date": ("created_at", "pk"),
    "-cost": ("-cost_usd", "-pk"),
    "cost": ("cost_usd", "pk"),
    "-duration": (F("duration_ms").desc(nulls_last=True), "-pk"),
    "duration": (F("duration_ms").asc(nulls_last=True), "pk"),
}
DEFAULT_RUN_SORT = "-date"


@dataclass(frozen=True)
class RunFilters:
    """What the runs list is narrowed to; None means no constraint."""

    status: str | None = None
    author: str | None = None  # username
    date_from: date | None = None  # created on or after this day
    date_to: date | None = None  # created on or before this day
    tool: str | None = None  # the run's current plan calls this tool
    sort: str = DEFAULT_RUN_SORT
    include_evals: bool = False  # eval_planner's runs are listed on the evals page instead


def runs_matching(
    *, viewer: User | AnonymousUser, filters: RunFilters, to_count: bool = False
) -> QuerySet[Run]:
    """The viewer's runs narrowed by the filters, in the requested order, goal and author joined.

    to_count: the same runs, for counting (in no order): a prolific author's are then found
    through the author index rather than in the list's order.
    """
    runs = runs_visible_to(viewer)
    if not filters.include_evals:
        runs = runs.filter(experiment__isnull=True)
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.author:
        runs = _by_author(runs, filters.author, in_order=not to_count)
    # Day bounds become timestamps so the created_at index serves the range.
    if filters.date_from:
        runs = runs.filter(created_at__gte=start_of_day(filters.date_from))
    if filters.date_to and filters.date_to < date.max:  # up to date.max is no bound at all
        runs = runs.filter(created_at__lt=start_of_day(filters.date_to + timedelta(days=1)))
    if filters.tool:
        runs = runs.filter(uses_tool(filters.tool))
    return runs.order_by(*RUN_SORTS.get(filters.sort, RUN_SORTS[DEFAULT_RUN_SORT]))


# --- keyset (cursor) pages ---------------------------------------------------------------------

# How far the runs list counts before it says "1,000+": counting every match is a scan.
RUNS_COUNT_CAP = 1_000


@dataclass(frozen=True)
class SortKey:
    """A runs list order: its leading column and direction, then the primary key the same way."""

    field: str
    descending: bool
    nullable: bool = False  # NULLs (unfinished runs) come after every value, either way


RUN_SORT_KEYS: dict[str, SortKey] = {
    "-date": SortKey("created_at", True),
    "date": SortKey("created_at", False),
    "-cost": SortKey("cost_usd", True),
    "cost": SortKey("cost_usd", False),
    "-duration": SortKey("duration_ms", True, nullable=True),
    "duration": SortKey("duration_ms", False, nullable=True),
}


@dataclass(frozen=True)
class RunsPage:
    """One page of the runs list and the cursors of its neighbours (None: there is none)."""

    object_list: list[Run]
    count: int
    count_capped: bool  # there are more than `count` matches
    next_cursor: str | None
    previous_cursor: str | None
    is_first: bool

    @property
    def has_other_pages(self) -> bool:
        return bool(self.next_cursor or self.previous_cursor)


def runs_page(
    *,
    viewer: User | AnonymousUser,
    filters: RunFilters,
    after: str | None = None,
    before: str | None = None,
    last: bool = False,
    size: int = 50,
) -> RunsPage:
    """A page of runs_matching by keyset: the rows after (or before) a cursor, never an OFFSET.

    Each page seeks in the index of its order from the cursor's row, so page 20,000 costs what
    page 1 does. An unreadable cursor is taken as no cursor (the first page).
    """
    runs = runs_matching(viewer=viewer, filters=filters)
    key = RUN_SORT_KEYS.get(filters.sort, RUN_SORT_KEYS[DEFAULT_RUN_SORT])
    after_key, before_key = _cursor_read(after, key), _cursor_read(before, key)
    backwards = before_key is not None or (last and after_key is None)
    cursor = before_key if backwards else after_key
    rows = _rows_beyond(runs, key, cursor, forwards=not backwards, limit=size + 1)
    more = len(rows) > size
    rows = rows[:size]
    if backwards:
        rows.reverse()
    first_key = _cursor_write(rows[0], key) if rows else None
    last_key = _cursor_write(rows[-1], key) if rows else None
    if backwards:
        previous_cursor = first_key if more else None
        next_cursor = last_key if before_key is not None else None
    else:
        next_cursor = last_key if more else None
        previous_cursor = first_key if after_key is not None else None
    counted = (
        runs_matching(viewer=viewer, filters=filters, to_count=True)
        .order_by()
        .values("pk")[: RUNS_COUNT_CAP + 1]
        .count()
    )
    return RunsPage(
        object_list=rows,
        count=min(counted, RUNS_COUNT_CAP),
        count_capped=counted > RUNS_COUNT_CAP,
        next_cursor=next_cursor,
        previous_cursor=previous_cursor,
        is_first=previous_cursor is None,
    )


def _rows_beyond(
    runs: QuerySet[Run], key: SortKey, cursor: tuple[Any, int] | None, *, forwards: bool, limit: int
) -> list[Run]:
    """Up to `limit` rows past the cursor in the key's order (or its reverse).

    A nullable key is read in two segments, values then NULLs (the reverse: NULLs, then values),
    each a plain range in one index: an OR across them, or NULLS LAST, would defeat the index.
    """
    descending = key.descending == forwards
    op = "lt" if descending else "gt"
    pk_order = "-pk" if descending else "pk"
    field_order = f"-{key.field}" if descending else key.field
    segments = ["values", "nulls"] if key.nullable else ["values"]
    if not forwards:
        segments.reverse()
    rows: list[Run] = []
    for segment in segments:
        if len(rows) >= limit:
            break
        if segment == "values":
            part = runs.filter(**{f"{key.field}__isnull": False}) if key.nullable else runs
            if cursor is not None:
                value, pk = cursor
                if value is None:  # the cursor is among the NULLs
                    if forwards:
                        continue  # values come before them
                else:
                    part = part.filter(
                        Q(**{f"{key.field}__{op}e": value})
                        & (
                            Q(**{f"{key.field}__{op}": value})
                            | Q(**{key.field: value, f"pk__{op}": pk})
                        )
                    )
            part = part.order_by(field_order, pk_order)
        else:
            part = runs.filter(**{f"{key.field}__isnull": True})
            if cursor is not None:
                value, pk = cursor
                if value is not None and not forwards:
                    continue  # backwards from a value: the NULLs come after it
                if value is None:
                    part = part.filter(**{f"pk__{op}": pk})
            part = part.order_by(pk_order)
        rows.extend(part[: limit - len(rows)])
    return rows


def _cursor_write(run: Run, key: SortKey) -> str:
    value = getattr(run, key.field)
    shown = value.isoformat() if isinstance(value, datetime) else value
    raw = json.dumps([None if shown is None else str(shown), run.pk])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _cursor_read(cursor: str | None, key: SortKey) -> tuple[Any, int] | None:
    """The (value, pk) a cursor names, typed for its key; None if absent or unreadable."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = json.loads(raw)
        if not isinstance(pk, int) or (value is not None and not isinstance(value, str)):
            return None
        if value is None:
            return (None, pk) if key.nullable else None
        if key.field == "created_at":
            parsed: Any = datetime.fromisoformat(value)
        elif key.field == "cost_usd":
            parsed = Decimal(value)
            if not parsed.is_finite():
                return None
        else:
            parsed = int(value)
        return parsed, pk
    except (ValueError, TypeError, binascii.Error, InvalidOperation, json.JSONDecodeError):
        return None


# An author with more goals than this has the runs list read in its own order (the run_list
# index), passing over other authors' runs; one with fewer, from the goals' author index, then
# sorted. SQLite cannot weigh the two: it always took the author index, and at a million runs
# sorted the 50,000 runs of one author in 20 for each page (1.2 s).
AUTHOR_WALKS_ORDER_OVER_GOALS = 1_000


def _by_author(runs: QuerySet[Run], username: str, *, in_order: bool) -> QuerySet[Run]:
    author_id = User.objects.filter(username=username).values_list("pk", flat=True).first()
    if author_id is None:
        return runs.none()
    goals = Goal.objects.filter(author_id=author_id).values("pk")
    if (
        not in_order
        or goals[: AUTHOR_WALKS_ORDER_OVER_GOALS + 1].count() <= AUTHOR_WALKS_ORDER_OVER_GOALS
    ):
        return runs.filter(goal__author_id=author_id)
    # Unary plus: the same number, but an expression no index covers, so neither database
    # reads the author index; each walks the index of the page's order instead.
    unindexed = Func(
        F("goal__author_id"), template="(+%(expressions)s)", output_field=IntegerField()
    )
    return runs.alias(author_unindexed=unindexed).filter(author_unindexed=author_id)


def uses_tool(tool: str) -> Q:
    """Runs whose current plan calls the tool, matched exactly on the element of tools_used."""
    # tools_used is denormalised for this filter: one short column per run, no join. (A join
    # through steps was tried: without ANALYZE statistics SQLite probed every step using the
    # tool once per run, and one author's page did not finish in ten minutes at 100,000 runs.)
    if connection.vendor == "postgresql":
        return Q(tools_used__contains=[tool])  # jsonb @>: exact, and 4x faster than text search
    # SQLite has no JSON containment: search the JSON text for the quoted name (as Django's
    # JSONField writes it), so "price" does not match "flight_price". LIKE ignores ASCII case:
    # two tools named alike but for case would match each other (tool names are lowercase).
    return Q(tools_used__icontains=json.dumps(tool))


def start_of_day(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


# --- progress ------------------------------------------------------------------------------

# An ask_human step waiting for a person's answer: stored as awaiting_approval, but what it
# waits for is an answer, not a decision.
AWAITING_ANSWER = "awaiting_answer"


# A run parked on a reviewer's decision and a person's answer at once.
AWAITING_APPROVAL_AND_ANSWER = "awaiting_approval_and_answer"

# What a wait is in words, where the status's own name would say "approval" for a question.
_STATUS_WORDS = {
    AWAITING_ANSWER: "waiting for an answer",
    AWAITING_APPROVAL_AND_ANSWER: "awaiting approval and an answer",
}


def progress_status(status: str, tool: str) -> str:
    """A step's status as progress counts it: a question's wait is its own."""
    if tool == ASK_HUMAN and status == Step.Status.AWAITING_APPROVAL:
        return AWAITING_ANSWER
    return status


def run_progress_status(status: str, progress: StepProgress | None) -> str:
    """A run's status as its pill shows it: a run parked only on questions waits for an
    answer, one parked on questions and reviewers on both."""
    if status == Run.Status.AWAITING_APPROVAL and progress is not None and progress.answers:
        return AWAITING_APPROVAL_AND_ANSWER if progress.waiting else AWAITING_ANSWER
    return status


def status_words(status: str) -> str:
    """A run's or step's status (or progress_status) as people write it: "awaiting_approval" ->
    "awaiting approval", a question's wait -> "waiting for an answer"."""
    return _STATUS_WORDS.get(status) or str(status).replace("_", " ")


@dataclass(frozen=True)
class StepProgress:
    """How far a run's current plan has got: steps done (succeeded), how the others ended, and
    what they wait for."""

    total: int = 0
    done: int = 0
    failed: int = 0
    not_approved: int = 0
    skipped: int = 0
    waiting: int = 0
    answers: int = 0
    running: int = 0

    @classmethod
    def of(cls, statuses: dict[str, int]) -> StepProgress:
        """From a count of steps per status (progress_status: a question's wait counts apart)."""
        return cls(
            total=sum(statuses.values()),
            done=statuses.get("succeeded", 0),
            failed=statuses.get("failed", 0),
            not_approved=statuses.get("blocked", 0),
            skipped=statuses.get("skipped", 0),
            waiting=statuses.get("awaiting_approval", 0),
            answers=statuses.get(AWAITING_ANSWER, 0),
            running=statuses.get("running", 0),
        )

    @property
    def text(self) -> str:
        """ "1 of 3 steps done, 1 not approved, 1 skipped" (empty without steps).

        Done means succeeded: a run that ended blocked never reads "3 of 3 steps done".
        """
        if not self.total:
            return ""
        parts = [f"{self.done} of {self.total} step{'s' if self.total != 1 else ''} done"]
        for count, words in (
            (self.failed, "failed"),
            (self.not_approved, "not approved"),
            (self.skipped, "skipped"),
            (self.waiting, "waiting for a reviewer"),
            (self.answers, "waiting for an answer"),
            (self.running, "running"),
        ):
            if count:
                parts.append(f"{count} {words}")
        return ", ".join(parts)


def runs_progress(run_ids: list[int]) -> dict[int, StepProgress]:
    """Each run's progress through its latest valid plan, in one query."""
    rows = (
        Step.objects.filter(plan__run_id__in=run_ids, plan__is_valid=True)
        .annotate(
            state=Case(
                When(
                    tool=ASK_HUMAN,
                    status=Step.Status.AWAITING_APPROVAL,
                    then=Value(AWAITING_ANSWER),
                ),
                default=F("status"),
            )
        )
        .values("plan__run_id", "plan__version", "state")
        .annotate(count=Count("pk"))
    )
    latest: dict[int, int] = {}
    counts: dict[int, dict[str, int]] = {}
    for row in rows:
        run_id, version = row["plan__run_id"], row["plan__version"]
        if version > latest.get(run_id, 0):
            latest[run_id] = version
            counts[run_id] = {}
        if version == latest[run_id]:
            counts[run_id][row["state"]] = row["count"]
    return {run_id: StepProgress.of(statuses) for run_id, statuses in counts.items()}
