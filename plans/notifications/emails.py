"""What the notification emails say and to whom: reviewers when a decision waits (each their
own email, with their own signed decision links), authors when their run ends. Rendered when
sent, so an email shows the round as it is then."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission, User
from django.db.models import Q, QuerySet
from django.template.loader import render_to_string
from django.urls import reverse

from plans.guards.redaction import redact
from plans.models import Approval, Run
from plans.notifications.models import NotificationPreference
from plans.roles import DECIDE, four_eyes_forbids
from plans.selectors.approvals import approvals_waiting
from plans.services.decision_links import decision_link_token

Prefs = NotificationPreference.ApprovalEmails


@dataclass(frozen=True)
class Email:
    recipients: list[str]
    subject: str
    text: str
    html: str


def absolute(path: str) -> str:
    return settings.AGENTSITE_BASE_URL.rstrip("/") + path


def deciders(run: Run, *, wants: str = Prefs.EACH_ROUND) -> QuerySet[Any]:
    """Everyone who may decide this run's approvals and wants these emails (with an address)."""
    app_label, codename = DECIDE.split(".")
    perm = Permission.objects.get(content_type__app_label=app_label, codename=codename)
    users = get_user_model().objects.filter(
        Q(is_superuser=True) | Q(user_permissions=perm) | Q(groups__permissions=perm),
        is_active=True,
    )
    if settings.AGENTSITE_FOUR_EYES:  # roles.four_eyes_forbids, as a filter on people
        users = users.exclude(pk=run.goal.author_id)
    chosen = Q(notification_preference__approval_emails=wants)
    if wants == Prefs.EACH_ROUND:
        chosen |= Q(notification_preference__isnull=True)  # the default
    return users.filter(chosen).exclude(email="").distinct().order_by("pk")


def decider(run: Run, user_id: int, *, wants: str = Prefs.EACH_ROUND) -> User | None:
    """The one person, if they (still) may decide this run's approvals and want these emails."""
    return deciders(run, wants=wants).filter(pk=user_id).first()


def decision_links(approval: Approval, reviewer: User) -> dict[str, str]:
    """This reviewer's own signed approve and reject links for the approval as it is now."""
    return {
        f"{choice}_url": absolute(
            reverse(
                "plans:email_decision",
                args=[decision_link_token(approval=approval, reviewer=reviewer, choice=choice)],
            )
        )
        for choice in ("approve", "reject")
    }


def approval_round_email(run_id: int, round_no: int, user_id: int) -> Email | None:
    """The steps of one run round still waiting, for one reviewer, with their own links."""
    run = Run.objects.select_related("goal__author").get(pk=run_id)
    waiting = list(
        Approval.objects.filter(
            run=run, step__round=round_no, decision=Approval.Decision.PENDING
        ).select_related("step")
    )
    reviewer = decider(run, user_id)
    if not waiting or reviewer is None:
        return None
    context = {
        "run": run,
        "goal": run.goal.text,
        "author": run.goal.author.get_username(),
        "round": round_no,
        "steps": [
            {
                "step": a.step.step_id,
                "tool": a.tool,
                "args": _pretty(redact(a.args)),
                **decision_links(a, reviewer),
            }
            for a in sorted(waiting, key=lambda a: a.step.step_id)
        ],
        "inbox_url": absolute(reverse("plans:inbox")) + f"#group-{run.pk}-{round_no}",
        "run_url": absolute(reverse("plans:run_detail", args=[run.pk])),
        "link_hours": settings.AGENTSITE_DECISION_LINK_TTL_S / 3600,
    }
    count = len(waiting)
    subject = (
        f"Run {run.pk}: {count} step{'s' if count > 1 else ''} "
        f"({', '.join(sorted({a.tool for a in waiting}))}) wait for your decision"
    )
    return _email([reviewer.email], subject, "approval_round", context)


def plan_waiting_email(run_id: int, version: int, user_id: int) -> Email | None:
    run = Run.objects.select_related("goal__author").get(pk=run_id)
    if run.status != Run.Status.AWAITING_PLAN_APPROVAL:
        return None
    reviewer = decider(run, user_id)
    if reviewer is None:
        return None
    context = {
        "run": run,
        "goal": run.goal.text,
        "author": run.goal.author.get_username(),
        "version": version,
        "run_url": absolute(reverse("plans:run_detail", args=[run.pk])),
    }
    subject = f"Run {run.pk}: plan v{version} waits for your decision"
    return _email([reviewer.email], subject, "plan_waiting", context)


def run_finished_email(run_id: int) -> Email | None:
    run = Run.objects.select_related("goal__author").get(pk=run_id)
    author: User = run.goal.author
    email = getattr(author, "email", "")
    preference = NotificationPreference.objects.filter(user=author).first()
    if not email or (preference is not None and not preference.run_finished_emails):
        return None
    context = {
        "run": run,
        "goal": run.goal.text,
        "status": run.status.replace("_", " "),
        "run_url": absolute(reverse("plans:run_detail", args=[run.pk])),
    }
    return _email([email], f"Run {run.pk} {context['status']}", "run_finished", context)


def digest_email(user: User) -> Email | None:
    """The daily digest: every approval waiting that this reviewer may decide."""
    waiting = [
        a
        for a in approvals_waiting(user)
        if not four_eyes_forbids(run=a.run, reviewer=user, via="web")
    ]
    if not waiting or not getattr(user, "email", ""):
        return None
    context = {
        "approvals": [
            {
                "run": a.run_id,
                "goal": a.run.goal.text,
                "step": a.step.step_id,
                "tool": a.tool,
                "args": _pretty(redact(a.args)),
                **decision_links(a, user),
            }
            for a in waiting
        ],
        "inbox_url": absolute(reverse("plans:inbox")),
        "link_hours": settings.AGENTSITE_DECISION_LINK_TTL_S / 3600,
    }
    subject = f"{len(waiting)} step{'s' if len(waiting) > 1 else ''} wait for your decision"
    return _email([user.email], subject, "digest", context)


def _email(recipients: list[str], subject: str, name: str, context: dict[str, Any]) -> Email:
    # A subject is one line: a goal's line breaks must not become header lines.
    subject = " ".join(subject.split())[:200]
    return Email(
        recipients=recipients,
        subject=subject,
        text=render_to_string(f"notifications/{name}.txt", context),
        html=render_to_string(f"notifications/{name}.html", context),
    )


def _pretty(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
