"""Approvals waiting for a decision, as the inbox and the nav badge show them."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet

from plans.models import Approval, HumanQuestion, Plan, Run
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
    """What the nav badge shows: approvals a reviewer could act on, and questions this person
    is asked (ask_human steps waiting for them)."""
    if not user.is_authenticated:
        return 0
    asked = len(questions_waiting(user))
    if not user.has_perm("plans.decide_approval"):
        return asked
    return asked + approvals_waiting(user).count()


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
