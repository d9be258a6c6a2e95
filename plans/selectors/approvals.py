"""Approvals waiting for a decision, as the inbox and the nav badge show them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import (
    Count,
    DateTimeField,
    ExpressionWrapper,
    F,
    Prefetch,
    Q,
    QuerySet,
)
from django.db.models.functions import Coalesce

from plans.engine import args_sha256
from plans.models import Approval, ApprovalVote, HumanQuestion, Plan, Run, Step
from plans.roles import group_names, may_decide, questions_answerable
from plans.selectors.runs import run_visibility


def _with_votes(approvals: QuerySet[Approval]) -> QuerySet[Approval]:
    """The approvals with their n-of-m votes and voters, read in one more query."""
    return approvals.prefetch_related(
        Prefetch("votes", queryset=ApprovalVote.objects.select_related("reviewer"))
    )


def _as_cards(approvals: QuerySet[Approval]) -> QuerySet[Approval]:
    """With all an inbox card shows: the run and its author, the step's plan and the version it
    replaced (what a card says of a replan), who decided or claimed it, what it superseded."""
    return _with_votes(
        approvals.select_related(
            "run__goal__author",
            "step__plan__parent",
            "reviewer",
            "claimed_by",
            "supersedes__reviewer",
        )
    )


def approvals_waiting(user: User | AnonymousUser) -> QuerySet[Approval]:
    """Undecided approvals of live runs the user may see, newest first."""
    rule = run_visibility(user, through="run__")
    waiting = (
        Approval.objects.filter(decision=Approval.Decision.PENDING)
        .exclude(run__status__in=Run.TERMINAL)
        .order_by("-requested_at", "-pk")
    )
    return waiting.none() if rule is None else _as_cards(waiting.filter(rule))


# The reviewer's queue: what it holds (mine: I may decide it; my groups: routed to a group
# of mine; all: every request I may see, read-only where I may not decide).
QUEUE_SCOPES = ("mine", "groups", "all")


def approvals_queue(user: User | AnonymousUser, *, scope: str = "mine") -> QuerySet[Approval]:
    """Waiting requests of the scope, the soonest due first (deadline, then asked)."""
    waiting = approvals_waiting(user)
    if scope != "all":
        waiting = waiting.filter(_routed_to(user, mine=scope == "mine"))
        if scope == "mine" and settings.AGENTSITE_FOUR_EYES and user.is_authenticated:
            waiting = waiting.exclude(run__goal__author=user)  # roles.four_eyes_forbids
        if scope == "mine" and not may_decide(user):
            waiting = waiting.none()
    ttl = timedelta(seconds=settings.AGENTSITE_APPROVAL_TTL_S)
    due = Coalesce("expires_at", ExpressionWrapper(F("requested_at") + ttl, DateTimeField()))
    return waiting.annotate(due=due).order_by("due", "pk")


def _routed_to(user: User | AnonymousUser, *, mine: bool) -> Q:
    """Requests routed to one of the user's groups (mine: or to nobody in particular).

    A group matches by its JSON text (portable across SQLite and PostgreSQL, case aside);
    roles.routing_forbids decides exactly, and the card shows a near miss read-only.
    """
    names = group_names(user) if user.is_authenticated else frozenset()
    routed = Q(pk__in=[])
    for name in sorted(names):
        # As SQLite stores it (non-ASCII escaped) and as PostgreSQL writes jsonb out.
        routed |= Q(groups__icontains=json.dumps(name))
        routed |= Q(groups__icontains=json.dumps(name, ensure_ascii=False))
    return routed | Q(groups=[]) if mine else routed


def approvals_visible(user: User | AnonymousUser, ids: list[int]) -> dict[int, Approval]:
    """Of the approvals with these ids, those of runs the user may see, by id."""
    rule = run_visibility(user, through="run__")
    if rule is None:
        return {}
    approvals = Approval.objects.filter(pk__in=ids).filter(rule)
    approvals = approvals.select_related("run__goal__author", "step__plan__parent", "claimed_by")
    return {a.pk: a for a in _with_votes(approvals)}


def approval_inputs(approvals: list[Approval]) -> dict[int, list[Step]]:
    """By approval, the steps whose results fed its arguments (its step's dependencies)."""
    return _inputs_from(approvals, _steps_of(approvals, set()))


def _steps_of(approvals: list[Approval], also_plans: set[int]) -> dict[tuple[int, int], Step]:
    plan_ids = {approval.step.plan_id for approval in approvals} | also_plans
    return {(s.plan_id, s.step_id): s for s in Step.objects.filter(plan_id__in=plan_ids)}


def _inputs_from(
    approvals: list[Approval], steps: dict[tuple[int, int], Step]
) -> dict[int, list[Step]]:
    return {
        approval.pk: [
            steps[(approval.step.plan_id, dep)]
            for dep in approval.step.depends_on
            if (approval.step.plan_id, dep) in steps
        ]
        for approval in approvals
    }


def approvals_of_round(*, run_id: int, round_no: int, ids: list[int]) -> list[Approval]:
    """Of these approvals, those of the run's round (what one decision form may decide)."""
    return list(
        Approval.objects.filter(pk__in=ids, run_id=run_id, step__round=round_no).select_related(
            "run__goal__author", "step__plan__parent"
        )
    )


def round_after_decision(*, run_id: int, round_no: int, decided: list[int]) -> list[Approval]:
    """The round's approvals just decided, with those of it still waiting."""
    return list(
        _as_cards(
            Approval.objects.filter(run_id=run_id, step__round=round_no).filter(
                Q(pk__in=decided) | Q(decision=Approval.Decision.PENDING)
            )
        )
    )


def approval_args_seen(approval: Approval, seen_sha256: str) -> tuple[dict | None, str]:
    """The arguments a card with this hash showed (None if unknown), and who edited them into
    what they are now ("" if nobody did): the run's request or a reviewer's edit."""
    versions = list(
        ApprovalVote.objects.filter(approval=approval)
        .select_related("reviewer")
        .order_by("at", "pk")
    )
    shown = None
    if args_sha256(approval.tool, approval.requested_args) == seen_sha256:
        shown = approval.requested_args
    shown = next((v.args for v in versions if v.args_sha256 == seen_sha256), shown)
    editors = [v for v in versions if v.args_sha256 == approval.args_sha256 and v.edited]
    return shown, editors[0].reviewer.get_username() if editors else ""


@dataclass
class RuleCounts:
    """How often a rule matched, by decision, and under which of its versions."""

    matched: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)


def rule_match_counts() -> dict[str, RuleCounts]:
    """Every rule that ever matched a call (by name): its matches (one grouped read)."""
    counts: dict[str, RuleCounts] = {}
    rows = (
        Approval.objects.exclude(rule="")
        .values_list("rule", "rule_version", "decision")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for rule, version, decision, n in rows:
        counted = counts.setdefault(rule, RuleCounts())
        counted.matched += n
        counted.decisions[decision] = counted.decisions.get(decision, 0) + n
        counted.versions[version] = counted.versions.get(version, 0) + n
    return counts


def question_get(question_id: int) -> HumanQuestion | None:
    return HumanQuestion.objects.filter(pk=question_id).first()


def question_visible(user: User | AnonymousUser, question_id: int) -> HumanQuestion | None:
    """The question, if it is of a run the user may see (else None, as if there were none)."""
    rule = run_visibility(user, through="run__")
    if rule is None:
        return None
    visible = HumanQuestion.objects.filter(rule, pk=question_id)
    return visible.select_related("run__goal__author", "step", "answered_by").first()


# Waiting requests are counted up to here, more shown as "1,000+": at a million runs thousands
# wait, and counting them all (each joined to its run) on every page's nav badge took longer
# than the page.
WAITING_COUNT_CAP = 1_000


def pending_approvals_count(user: User | AnonymousUser) -> int:
    """What the nav badge shows: the requests in this person's queue they may decide (routing
    and four-eyes applied), and the questions they are asked; above WAITING_COUNT_CAP, not
    exactly."""
    if not user.is_authenticated:
        return 0
    asked = len(questions_waiting(user))
    if not may_decide(user):
        return asked
    return asked + queue_count(user)


def queue_count(user: User | AnonymousUser) -> int:
    """The requests in the person's own queue (scope "mine"), up to WAITING_COUNT_CAP + 1."""
    mine = approvals_queue(user, scope="mine").order_by().values("pk")
    return mine[: WAITING_COUNT_CAP + 1].count()


def step_decisions(plan: Plan) -> dict[int, Approval]:
    """Each step's latest approval in the plan (decided or not), by step id, reviewer joined."""
    approvals = _with_votes(
        Approval.objects.filter(step__plan=plan)
        .select_related("reviewer", "step")
        .order_by("requested_at", "pk")
    )
    return {approval.step.step_id: approval for approval in approvals}


# Runs whose requests the inbox shows at first; the rest come a page at a time on demand.
INBOX_RUNS = 20


@dataclass(frozen=True)
class InboxPage:
    """The requests of the runs that asked most recently (whole runs), and what is left."""

    approvals: list[Approval]
    waiting: int  # requests waiting in all, counted up to WAITING_COUNT_CAP + 1
    runs_waiting: int  # runs they belong to (of those counted)
    runs_shown: int

    @property
    def counts_capped(self) -> bool:
        return self.waiting > WAITING_COUNT_CAP

    @property
    def more(self) -> bool:
        return self.counts_capped or self.runs_shown < self.runs_waiting


def approvals_waiting_first(
    user: User | AnonymousUser, *, runs: int = INBOX_RUNS, scope: str = "all"
) -> InboxPage:
    """Every waiting request in the queue's scope of the `runs` runs whose requests fall due
    first, the soonest due first.

    Whole runs, so no decision group is cut in two; the rest are only counted, not loaded.
    """
    waiting = approvals_queue(user, scope=scope)
    # Soonest due first; a run asking for several steps repeats, so read a few per run.
    # The same read counts them, up to the cap.
    read = max(runs * 8, WAITING_COUNT_CAP + 1)
    run_ids = list(waiting.values_list("run_id", flat=True)[:read])
    newest = list(dict.fromkeys(run_ids))[:runs]
    counted = run_ids[: WAITING_COUNT_CAP + 1]
    approvals = list(waiting.filter(run_id__in=newest)) if newest else []
    return InboxPage(
        approvals=approvals,
        waiting=len(counted),
        runs_waiting=len(set(counted)),
        runs_shown=len(newest),
    )


def questions_waiting(user: User | AnonymousUser) -> list[HumanQuestion]:
    """Unanswered ask_human questions of live runs that this person may answer, newest first."""
    if not user.is_authenticated:
        return []
    waiting = (
        HumanQuestion.objects.filter(state=HumanQuestion.State.PENDING)
        .exclude(run__status__in=Run.TERMINAL)
        .select_related("run__goal__author", "step")
        .order_by("-asked_at", "-pk")
    )
    return list(waiting.filter(questions_answerable(user)))


def replans_left(run: Run) -> int:
    """How many more replans the run may have (AGENTSITE_MAX_REPLANS per run)."""
    used = Plan.objects.filter(run=run, source=Plan.Source.REPLAN).count()
    return max(0, settings.AGENTSITE_MAX_REPLANS - used)


def changes_refusal(run: Run) -> str:
    """Why changes may not be requested for this run now, or "" if they may."""
    return changes_refusals([run])[run.pk]


def changes_refusals(runs: list[Run]) -> dict[int, str]:
    """changes_refusal for each of these runs (goals joined), in one read of their plans."""
    counts = {
        row["run_id"]: row
        for row in Plan.objects.filter(run__in=[run.pk for run in runs])
        .values("run_id")
        .annotate(
            files=Count("pk", filter=Q(source=Plan.Source.FILE)),
            replans=Count("pk", filter=Q(source=Plan.Source.REPLAN)),
        )
        .order_by()
    }
    refusals = {}
    for run in runs:
        counted = counts.get(run.pk, {"files": 0, "replans": 0})
        refusals[run.pk] = _changes_refusal(run, files=counted["files"], used=counted["replans"])
    return refusals


def _changes_refusal(run: Run, *, files: int, used: int) -> str:
    if files:
        return "This run's plan was given as a file: it is run as given, never replanned."
    if run.goal.agent != "plan_execute":
        return "Only plan-and-execute runs can be replanned."
    if max(0, settings.AGENTSITE_MAX_REPLANS - used) == 0:
        return (
            f"The run has used its {settings.AGENTSITE_MAX_REPLANS} replan"
            f"{'s' if settings.AGENTSITE_MAX_REPLANS != 1 else ''} (AGENTSITE_MAX_REPLANS): "
            "approve or reject instead."
        )
    return ""


@dataclass(frozen=True)
class ReplanNote:
    """Why a step of a replanned version is asked about: the version it replaced, the
    reviewers' requests that changed it, and the earlier version's call of that step."""

    version: int
    replaced: int
    requests: list[dict]
    earlier_tool: str = ""
    earlier_args: dict | None = None


def approval_cards_context(
    approvals: list[Approval],
) -> tuple[dict[int, list[Step]], dict[int, ReplanNote]]:
    """What cards show beside an approval, by approval: the steps that fed its arguments, and
    for a step of a version a reviewer's request for changes produced, what it replaced.

    One read of steps for both (the steps' plans and their parents are joined already).
    """
    replanned = [
        approval
        for approval in approvals
        if approval.step.plan.source == Plan.Source.REPLAN
        and approval.step.plan.parent is not None
        and approval.step.plan.parent.change_requests
    ]
    parents = {approval.step.plan.parent_id for approval in replanned}
    steps = _steps_of(approvals, {pk for pk in parents if pk is not None})
    notes = {}
    for approval in replanned:
        plan = approval.step.plan
        parent = plan.parent
        assert parent is not None
        before = steps.get((parent.pk, approval.step.step_id))
        notes[approval.pk] = ReplanNote(
            version=plan.version,
            replaced=parent.version,
            requests=list(parent.change_requests),
            earlier_tool=before.tool if before is not None else "",
            earlier_args=(before.resolved_args or before.args) if before is not None else None,
        )
    return _inputs_from(approvals, steps), notes
