"""What the notification emails say and to whom: reviewers when a decision waits (each their
own email, with their own signed decision links), authors when their run ends. Rendered when
sent, so an email shows the round as it is then."""

from __future__ import annotations

from collections.abc import Collection
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
from plans.roles import DECIDE, four_eyes_forbids, routing_forbids
from plans.selectors.approvals import approvals_queue
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


def deciders(
    run: Run, *, wants: str = Prefs.EACH_ROUND, routed_to: Collection[str] | None = None
) -> QuerySet[Any]:
    """Everyone who may decide this run's approvals and wants these emails (with an address);
    routed_to: only members of these groups (an approval rule routed the requests there)."""
    app_label, codename = DECIDE.split(".")
    perm = Permission.objects.get(content_type__app_label=app_label, codename=codename)
    users = get_user_model().objects.filter(
        Q(is_superuser=True) | Q(user_permissions=perm) | Q(groups__permissions=perm),
        is_active=True,
    )
    if routed_to is not None:  # roles.routing_forbids, as a filter on people
        users = users.filter(pk__in=get_user_model().objects.filter(groups__name__in=routed_to))
    if settings.AGENTSITE_FOUR_EYES:  # roles.four_eyes_forbids, as a filter on people
        users = users.exclude(pk=run.goal.author_id)
    chosen = Q(notification_preference__approval_emails=wants)
    if wants == Prefs.EACH_ROUND:
        chosen |= Q(notification_preference__isnull=True)  # the default
    return users.filter(chosen).exclude(email="").distinct().order_by("pk")


def preview_text(preview: dict[str, Any] | None) -> list[str]:
    """A stored preview as plain lines: its summary, facts and warnings, or why there is none."""
    if not preview:
        return ["no preview"]
    if "error" in preview:
        return [f"no preview: {preview['error']}"]
    lines = [str(preview.get("summary", ""))]
    lines += [f"{label}: {value}" for label, value in preview.get("facts", [])]
    lines += [f"Warning: {warning}" for warning in preview.get("warnings", [])]
    return lines


def decider(
    run: Run,
    user_id: int,
    *,
    wants: str = Prefs.EACH_ROUND,
    routed_to: Collection[str] | None = None,
) -> User | None:
    """The one person, if they (still) may decide this run's approvals and want these emails."""
    return deciders(run, wants=wants, routed_to=routed_to).filter(pk=user_id).first()


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
        ).select_related("step", "supersedes")
    )
    # Requests an approval rule routed go to their groups' members only; one that anyone may
    # decide brings in every reviewer.
    routed = None if any(not a.groups for a in waiting) else {g for a in waiting for g in a.groups}
    reviewer = decider(run, user_id, routed_to=routed)
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
                "preview": [redact(line) for line in preview_text(a.preview)],
                "changes": [redact(str(change)) for change in a.changes],
                "approved_preview": (
                    [redact(line) for line in preview_text(a.supersedes.preview)]
                    if a.supersedes
                    else []
                ),
                "why": approval_why(a),
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


def approval_chase_email(
    approval_id: int, *, escalated: bool, user_id: int, reminder: int = 1
) -> Email | None:
    """A request still undecided, to one reviewer: a reminder (the `reminder`th) if they may
    decide it, or, escalated, word to an escalation group's member. None once it is decided."""
    approval = (
        Approval.objects.select_related("run__goal__author", "step").filter(pk=approval_id).first()
    )
    if approval is None or approval.decision != Approval.Decision.PENDING:
        return None
    run = approval.run
    if escalated:
        routed: Collection[str] | None = approval.escalate_to
    else:
        routed = approval.groups or None
    reviewer = decider(run, user_id, routed_to=routed)
    if reviewer is None:
        return None
    step = approval.step
    context = {
        "run": run,
        "goal": run.goal.text,
        "author": run.goal.author.get_username(),
        "round": step.round,
        "steps": [
            {
                "step": step.step_id,
                "tool": approval.tool,
                "args": _pretty(redact(approval.args)),
                "preview": [redact(line) for line in preview_text(approval.preview)],
                "why": approval_why(approval),
                **decision_links(approval, reviewer),
            }
        ],
        "link_hours": settings.AGENTSITE_DECISION_LINK_TTL_S / 3600,
        "inbox_url": absolute(reverse("plans:inbox")) + f"?scope=all#approval-{approval.pk}",
        "run_url": absolute(reverse("plans:run_detail", args=[run.pk])),
    }
    what = "escalated to you" if escalated else "still waits for a decision"
    if not escalated and reminder > 1:
        what += f" (reminder {reminder})"
    subject = f"Run {run.pk}: step {step.step_id} ({approval.tool}) {what}"
    if approval.rule:
        subject += f" (rule {approval.rule})"
    return _email([reviewer.email], subject, "approval_round", context)


def approval_why(approval: Approval) -> str:
    """What an e-mail says of a request's rule: its name, routing and n-of-m progress."""
    parts = [f"rule {approval.rule}"] if approval.rule else []
    if approval.groups:
        parts.append(f"routed to {' or '.join(approval.groups)}")
    if approval.approvals_needed > 1:
        parts.append(f"{approval.approvals_counted} of {approval.approvals_needed} approvals")
    return " · ".join(parts)


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
        for a in approvals_queue(user, scope="mine")
        if not four_eyes_forbids(run=a.run, reviewer=user, via="web")
        and not routing_forbids(user=user, groups=a.groups)
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
