"""Deciding from an e-mail: signed links bound to one approval, its argument hash and one
reviewer, each usable once; the decision itself is approval_decide's, as on the pages.

A link is `signing.dumps` of {approval, reviewer, hash, decision} (SECRET_KEY, a salt of its own,
a timestamp checked against AGENTSITE_DECISION_LINK_TTL_S). Its use is a DecisionLinkUse row,
inserted in the decision's transaction: the unique key makes every later use, and the loser of
two at once, fail, and a refused decision rolls its use back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from django.conf import settings
from django.contrib.auth.models import User
from django.core import signing
from django.db import IntegrityError, transaction

from plans.models import Approval, DecisionLinkUse
from plans.roles import may_decide
from plans.services.approvals import approval_decide
from plans.services.refusals import Refused

SALT = "agentsite.approval-decision-link"
Choice = Literal["approve", "reject"]


class LinkRefused(Refused):
    """A decision link that cannot be used; nothing was decided. Codes: link_invalid,
    link_expired, link_other_user, not_a_reviewer, link_gone, link_used, link_stale,
    link_decided."""


@dataclass(frozen=True)
class DecisionLink:
    """What a valid link says: who may use it, on which approval, for which arguments."""

    approval_id: int
    reviewer_id: int
    args_sha256: str
    choice: Choice

    @property
    def approve(self) -> bool:
        return self.choice == "approve"


def decision_link_token(*, approval: Approval, reviewer: User, choice: Choice) -> str:
    """The signed token of one reviewer's approve or reject link for the approval as it is."""
    return signing.dumps(
        {"a": approval.pk, "u": reviewer.pk, "h": approval.args_sha256, "d": choice},
        salt=SALT,
        compress=True,
    )


def decision_link_read(token: str) -> DecisionLink:
    """The link a token is, if its signature holds and it is not past its time."""
    try:
        data = signing.loads(
            token, salt=SALT, max_age=timedelta(seconds=settings.AGENTSITE_DECISION_LINK_TTL_S)
        )
    except signing.SignatureExpired as expired:
        raise LinkRefused(
            "link_expired",
            "This link has expired. Decide in the approvals inbox, where the request (if it "
            "still waits) shows its arguments as they are now.",
        ) from expired
    except signing.BadSignature as bad:
        raise LinkRefused(
            "link_invalid", "This link is not one we sent (it may have been cut short)."
        ) from bad
    try:
        link = DecisionLink(int(data["a"]), int(data["u"]), str(data["h"]), data["d"])
    except (KeyError, TypeError, ValueError) as bad:
        raise LinkRefused("link_invalid", "This link is not one we sent.") from bad
    if link.choice not in ("approve", "reject"):
        raise LinkRefused("link_invalid", "This link is not one we sent.")
    return link


def decision_link_check(
    *, link: DecisionLink, user: User, approval: Approval | None = None
) -> Approval:
    """The approval the link may decide now, for this signed-in user; refuses (with its code)
    a link for someone else, one already used, one for a decided request or changed arguments."""
    _reviewer_check(link, user)
    if approval is None:
        approval = _approval(link)
    used = DecisionLinkUse.objects.filter(
        approval_id=link.approval_id, reviewer_id=link.reviewer_id, args_sha256=link.args_sha256
    ).first()
    if used is not None:
        raise LinkRefused(
            "link_used",
            f"This link was already used: you {used.decision} this step at "
            f"{used.used_at:%Y-%m-%d %H:%M} UTC. A link decides once.",
        )
    _state_check(link, approval)
    return approval


def approval_decide_by_link(
    *,
    link: DecisionLink,
    reviewer: User,
    seen_preview: str,
    reason: str = "",
    resume: bool = True,
) -> Approval:
    """Decide the link's approval as its reviewer, once: through approval_decide, so the same
    rules apply as on the pages (permission, four-eyes, a reason to reject, and an approval
    bound to the preview its page showed: seen_preview, that preview's token)."""
    _reviewer_check(link, reviewer)
    decision = Approval.Decision.APPROVED if link.approve else Approval.Decision.REJECTED
    with transaction.atomic():
        # The use first: on SQLite this write takes the database's write lock (PostgreSQL: the
        # row lock below), so nothing changes the approval between the checks and the decision.
        try:
            with transaction.atomic():
                DecisionLinkUse.objects.create(
                    approval_id=link.approval_id,
                    reviewer=reviewer,
                    args_sha256=link.args_sha256,
                    decision=decision,
                )
        except IntegrityError:
            decision_link_check(link=link, user=reviewer)  # raises, saying how it was used
            raise LinkRefused("link_used", "This link was already used.") from None
        approval = _approval(link, lock=True)
        _state_check(link, approval)
        return approval_decide(
            approval=approval,
            reviewer=reviewer,
            approve=link.approve,
            reason=reason,
            via=Approval.Via.EMAIL,
            resume=resume,
            seen_preview=seen_preview,
        )


def _reviewer_check(link: DecisionLink, user: User) -> None:
    if user.pk != link.reviewer_id:
        raise LinkRefused(
            "link_other_user",
            "This link was sent to another reviewer. Sign out and sign in as the person it was "
            "sent to, or decide in your own approvals inbox.",
        )
    if not may_decide(user):
        raise LinkRefused(
            "not_a_reviewer",
            "You are no longer a reviewer, so this link decides nothing.",
        )


def _approval(link: DecisionLink, *, lock: bool = False) -> Approval:
    approvals = Approval.objects.select_related("run__goal__author", "step", "reviewer")
    if lock:
        approvals = approvals.select_for_update(of=("self",))
    approval = approvals.filter(pk=link.approval_id).first()
    if approval is None:
        raise LinkRefused("link_gone", "The request this link was for no longer exists.")
    return approval


def _state_check(link: DecisionLink, approval: Approval) -> None:
    """Refuses a link whose request was decided (or expired) or whose arguments changed."""
    if settled := approval.settled_words():
        raise LinkRefused("link_decided", settled)
    if approval.args_sha256 != link.args_sha256:
        raise LinkRefused(
            "link_stale",
            "The arguments changed since this e-mail was sent, so this link no longer decides "
            "them. Read them again in the approvals inbox.",
        )
