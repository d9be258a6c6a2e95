"""Approvals waiting for a decision, as the inbox and the nav badge show them."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from plans.models import Approval, Plan, Run
from plans.selectors.runs import run_visibility


def approvals_waiting(user: User | AnonymousUser) -> QuerySet[Approval]:
    """Undecided approvals of live runs the user may see, newest first."""
    rule = run_visibility(user, through="run__")
    waiting = (
        Approval.objects.filter(decision=Approval.Decision.PENDING)
        .exclude(run__status__in=Run.TERMINAL)
        .select_related("run__goal__author", "step", "reviewer")
        .order_by("-requested_at", "-pk")
    )
    return waiting.none() if rule is None else waiting.filter(rule)


def pending_approvals_count(user: User | AnonymousUser) -> int:
    """What the nav badge shows: approvals a reviewer could act on (0 for everyone else)."""
    if not user.is_authenticated or not user.has_perm("plans.decide_approval"):
        return 0
    return approvals_waiting(user).count()


def step_decisions(plan: Plan) -> dict[int, Approval]:
    """Each step's latest approval in the plan (decided or not), by step id, reviewer joined."""
    approvals = (
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
    waiting: int  # requests waiting in all
    runs_waiting: int  # runs they belong to
    runs_shown: int

    @property
    def more(self) -> bool:
        return self.runs_shown < self.runs_waiting


def approvals_waiting_first(user: User | AnonymousUser, *, runs: int = INBOX_RUNS) -> InboxPage:
    """Every waiting request of the `runs` runs that asked most recently, newest first.

    Whole runs, so no decision group is cut in two; the rest are only counted, not loaded.
    """
    waiting = approvals_waiting(user)
    newest: list[int] = []
    # Newest requests first; a run asking for several steps repeats, so read a few per run.
    for run_id in waiting.values_list("run_id", flat=True)[: runs * 8]:
        if run_id not in newest:
            newest.append(run_id)
            if len(newest) == runs:
                break
    approvals = list(waiting.filter(run_id__in=newest)) if newest else []
    counts = waiting.order_by().values("run_id").distinct().count()
    return InboxPage(
        approvals=approvals,
        waiting=waiting.count(),
        runs_waiting=counts,
        runs_shown=len(newest),
    )
