"""Approvals waiting for a decision, as the inbox and the nav badge show them."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Count, Prefetch, Q, QuerySet

from plans.engine import args_sha256
from plans.models import Approval, ApprovalVote, HumanQuestion, Plan, Run, Step
from plans.roles import may_decide
from plans.selectors.runs import run_visibility


def _with_votes(approvals: QuerySet[Approval]) -> QuerySet[Approval]:
    """The approvals with their n-of-m votes and voters, read in one more query."""
    return approvals.prefetch_related(
        Prefetch("votes", queryset=ApprovalVote.objects.select_related("reviewer"))
    )


def approvals_waiting(user: User | AnonymousUser) -> QuerySet[Approval]:
    """Undecided approvals of live runs the user may see, newest first."""
    rule = run_visibility(user, through="run__")
    waiting = (
        Approval.objects.filter(decision=Approval.Decision.PENDING)
        .exclude(run__status__in=Run.TERMINAL)
        .select_related("run__goal__author", "step", "reviewer")
        .order_by("-requested_at", "-pk")
    )
    return waiting.none() if rule is None else _with_votes(waiting.filter(rule))


def approvals_visible(user: User | AnonymousUser, ids: list[int]) -> dict[int, Approval]:
    """Of the approvals with these ids, those of runs the user may see, by id."""
    rule = run_visibility(user, through="run__")
    if rule is None:
        return {}
    approvals = Approval.objects.filter(pk__in=ids).filter(rule)
    return {a.pk: a for a in _with_votes(approvals.select_related("run__goal__author", "step"))}


def approval_inputs(approvals: list[Approval]) -> dict[int, list[Step]]:
    """By approval, the steps whose results fed its arguments (its step's dependencies)."""
    plan_ids = {approval.step.plan_id for approval in approvals}
    steps = {(s.plan_id, s.step_id): s for s in Step.objects.filter(plan_id__in=plan_ids)}
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
            "run__goal__author", "step"
        )
    )


def round_after_decision(*, run_id: int, round_no: int, decided: list[int]) -> list[Approval]:
    """The round's approvals just decided, with those of it still waiting."""
    return list(
        _with_votes(
            Approval.objects.filter(run_id=run_id, step__round=round_no)
            .filter(Q(pk__in=decided) | Q(decision=Approval.Decision.PENDING))
            .select_related("run__goal__author", "step", "reviewer")
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


# Waiting requests are counted up to here, more shown as "1,000+": at a million runs thousands
# wait, and counting them all (each joined to its run) on every page's nav badge took longer
# than the page.
WAITING_COUNT_CAP = 1_000


def pending_approvals_count(user: User | AnonymousUser) -> int:
    """What the nav badge shows: approvals a reviewer could act on, and questions this person
    is asked (ask_human steps waiting for them); above WAITING_COUNT_CAP, not exactly."""
    if not user.is_authenticated:
        return 0
    asked = len(questions_waiting(user))
    if not may_decide(user):
        return asked
    return asked + approvals_waiting(user).order_by().values("pk")[: WAITING_COUNT_CAP + 1].count()


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


def approvals_waiting_first(user: User | AnonymousUser, *, runs: int = INBOX_RUNS) -> InboxPage:
    """Every waiting request of the `runs` runs that asked most recently, newest first.

    Whole runs, so no decision group is cut in two; the rest are only counted, not loaded.
    """
    waiting = approvals_waiting(user)
    # Newest requests first; a run asking for several steps repeats, so read a few per run.
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
    if not user.is_superuser:
        roles = list(user.groups.values_list("name", flat=True))
        waiting = waiting.filter(
            Q(audience="author", run__goal__author=user) | Q(audience__in=roles)
        )
    return list(waiting)


def replans_left(run: Run) -> int:
    """How many more replans the run may have (AGENTSITE_MAX_REPLANS per run)."""
    used = Plan.objects.filter(run=run, source=Plan.Source.REPLAN).count()
    return max(0, settings.AGENTSITE_MAX_REPLANS - used)


def changes_refusal(run: Run) -> str:
    """Why changes may not be requested for this run now, or "" if they may."""
    if Plan.objects.filter(run=run, source=Plan.Source.FILE).exists():
        return "This run's plan was given as a file: it is run as given, never replanned."
    if run.goal.agent != "plan_execute":
        return "Only plan-and-execute runs can be replanned."
    if replans_left(run) == 0:
        return (
            f"The run has used its {settings.AGENTSITE_MAX_REPLANS} replan"
            f"{'s' if settings.AGENTSITE_MAX_REPLANS != 1 else ''} (AGENTSITE_MAX_REPLANS): "
            "approve or reject instead."
        )
    return ""
