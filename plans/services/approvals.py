"""Where approvals are decided: reviewers' decisions on destructive steps, and expiry.

The executor's side, the gate a destructive call must pass, is plans.runtime.gate; decisions
on whole plans are plans.services.plans.plan_decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from plans.engine import args_sha256, canonical_json, check_args, unstorable_in
from plans.journal.events import INBOX_GROUP, append_events, group_send
from plans.journal.rollup import approval_decided
from plans.journal.tasks import run_enqueue
from plans.models import Approval, Run
from plans.roles import PEOPLES_CHANNELS, four_eyes_forbids, may_decide
from plans.selectors.approvals import approvals_visible
from plans.services.refusals import Refused, text_clean
from plans.tools import get_registry


class ApprovalRefused(Refused):
    """A decision that cannot be recorded; nothing was changed. Codes: signed_out,
    not_a_reviewer, reason_required, text_invalid, already_decided, run_ended, four_eyes,
    tool_unknown, args_invalid; through the API also listed_twice, not_found, stale_hash and
    edit_with_reject."""


@dataclass(frozen=True)
class Seen:
    """An approval as its reviewer saw it (the API): the hash of its arguments, and any edit."""

    approval_id: int
    args_sha256: str
    args: Mapping[str, Any] | None = None


def four_eyes_refused(what: str) -> ApprovalRefused:
    """The four-eyes rule's refusal (roles.four_eyes_forbids) for the goal's steps or plan."""
    return ApprovalRefused(
        "four_eyes",
        f"Four-eyes rule: you submitted this goal, so another reviewer must decide its {what}.",
    )


def rejection_reason_check(*, approve: bool, reason: str, what: str = "") -> None:
    """A rejection says why: refused without a reason (what: " a plan", or "" for steps)."""
    if not approve and not reason.strip():
        raise ApprovalRefused("reason_required", f"A reason is required to reject{what}.")


def approval_decide(
    *,
    approval: Approval,
    reviewer: User | None,
    approve: bool,
    reason: str = "",
    edited_args: Mapping[str, Any] | None = None,
    via: str = "web",
    resume: bool = True,
) -> Approval:
    """Record a reviewer's decision; refuses (changing nothing) when it may not be made."""
    return approvals_decide(
        approvals=[approval],
        reviewer=reviewer,
        approve=approve,
        reason=reason,
        edited_args={approval.pk: edited_args} if edited_args is not None else None,
        via=via,
        resume=resume,
    )[0]


def approvals_decide(
    *,
    approvals: list[Approval],
    reviewer: User | None,
    approve: bool,
    reason: str = "",
    edited_args: Mapping[int, Mapping[str, Any]] | None = None,
    via: str = "web",
    resume: bool = True,
) -> list[Approval]:
    """Decide several approvals together, all or nothing."""
    if via in PEOPLES_CHANNELS:
        reviewer_check(reviewer)
    reason = reason_clean(reason)
    rejection_reason_check(approve=approve, reason=reason)
    edited_args = edited_args or {}
    decided: list[Approval] = []
    runs_to_resume: set[int] = set()
    with transaction.atomic():
        for approval in approvals:
            locked = (
                # OF: PostgreSQL cannot lock the nullable side of the reviewer's outer join.
                Approval.objects.select_for_update(of=("self", "run"))
                .select_related("run__goal__author", "reviewer", "step")
                .get(pk=approval.pk)
            )
            _check_decision_allowed(locked, reviewer, via)
            args = edited_args.get(locked.pk)
            if args is not None and approve:
                locked.args = _validated_edit(locked.tool, args, step_id=locked.step.step_id)
            locked.args_sha256 = args_sha256(locked.tool, locked.args)
            locked.decision = Approval.Decision.APPROVED if approve else Approval.Decision.REJECTED
            locked.reviewer = reviewer
            locked.via = via
            locked.reason = reason
            locked.decided_at = timezone.now()
            locked.save()
            approval_decided(locked)
            append_events(
                locked.run_id,
                [decided_event(locked, decided_by=reviewer.get_username() if reviewer else via)],
            )
            if locked.run.status == Run.Status.AWAITING_APPROVAL:
                runs_to_resume.add(locked.run_id)
            decided.append(locked)
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
        if resume:
            for run_id in sorted(runs_to_resume):
                run_enqueue(run_id)
    return decided


def approvals_decide_seen(
    *,
    seen: list[Seen],
    reviewer: User,
    approve: bool,
    reason: str = "",
    via: str = "api",
) -> list[Approval]:
    """Decide approvals named by id, each bound to the hash of the arguments its reviewer saw:
    if one is not its approval's (the arguments changed since), nothing is decided."""
    reviewer_check(reviewer)
    ids = [choice.approval_id for choice in seen]
    if len(set(ids)) != len(ids):
        raise ApprovalRefused("listed_twice", "Each approval may be listed once.")
    rejection_reason_check(approve=approve, reason=reason)
    found = approvals_visible(reviewer, ids)
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise ApprovalRefused("not_found", f"No such approval: {', '.join(missing)}.")
    chosen = [found[pk] for pk in ids]
    if any(four_eyes_forbids(run=a.run, reviewer=reviewer, via=via) for a in chosen):
        raise four_eyes_refused("destructive steps")
    edited: dict[int, Mapping[str, Any]] = {}
    for choice in seen:
        approval = found[choice.approval_id]
        if approval.decision == Approval.Decision.PENDING and (
            choice.args_sha256 != approval.args_sha256
        ):
            raise ApprovalRefused(
                "stale_hash",
                f"Approval {approval.pk}: the arguments are not the ones you saw (their hash is "
                f"{approval.args_sha256}); read them again. Nothing was decided.",
            )
        if choice.args is not None:
            if not approve:
                raise ApprovalRefused("edit_with_reject", "Edited arguments only go with approve.")
            if choice.args != approval.args:
                edited[approval.pk] = choice.args
    return approvals_decide(
        approvals=chosen,
        reviewer=reviewer,
        approve=approve,
        reason=reason,
        edited_args=edited or None,
        via=via,
    )


def approvals_expire() -> list[int]:
    """Expire approvals pending longer than AGENTSITE_APPROVAL_TTL_S; returns their runs' ids.

    Their steps are then blocked with "approval expired" when the run is continued.
    """
    ttl = settings.AGENTSITE_APPROVAL_TTL_S
    cutoff = timezone.now() - timedelta(seconds=ttl)
    stale = list(
        Approval.objects.filter(decision=Approval.Decision.PENDING, requested_at__lt=cutoff)
        .exclude(run__status__in=Run.TERMINAL)
        .values_list("pk", flat=True)
    )
    runs: set[int] = set()
    for approval_id in stale:
        with transaction.atomic():
            approval = (
                Approval.objects.select_for_update(of=("self",))
                .select_related("step", "run")
                .get(pk=approval_id)
            )
            if approval.decision != Approval.Decision.PENDING:
                continue  # a reviewer decided in the meantime
            approval.decision = Approval.Decision.EXPIRED
            approval.reason = f"approval expired: no decision within {_duration(ttl)}"
            approval.decided_at = timezone.now()
            approval.via = "ttl"
            approval.save()
            append_events(
                approval.run_id,
                [decided_event(approval, decided_by="ttl")],
            )
            approval_decided(approval)  # after the event, which locks the run row first
            if approval.run.status == Run.Status.AWAITING_APPROVAL:
                run_enqueue(approval.run_id)
            runs.add(approval.run_id)
    if stale:
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
    return sorted(runs)


def _duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:g} h" if hours >= 1 else f"{seconds:g} s"


def decided_event(approval: Approval, *, decided_by: str) -> tuple[str, dict[str, Any]]:
    """The run event recording a decision on an approval."""
    return (
        "approval_decided",
        {
            "approval": approval.pk,
            "step": approval.step.step_id,
            "tool": approval.tool,
            "decision": approval.decision,
            "reviewer": decided_by,
            "reason": approval.reason,
            "args": approval.args,
            "edited": approval.args != approval.requested_args,
            "args_sha256": approval.args_sha256,
        },
    )


def reviewer_check(reviewer: User | None) -> None:
    """Refuse a decision by someone signed out or who is not a reviewer (roles.may_decide)."""
    if reviewer is None or not reviewer.is_authenticated:
        raise ApprovalRefused("signed_out", "You must be signed in to decide approvals.")
    if not may_decide(reviewer):
        raise ApprovalRefused(
            "not_a_reviewer", "You do not have permission to approve or reject destructive steps."
        )


def _check_decision_allowed(approval: Approval, reviewer: User | None, via: str) -> None:
    if approval.decision != Approval.Decision.PENDING:
        who = approval.reviewer.get_username() if approval.reviewer else approval.via or "someone"
        raise ApprovalRefused(
            "already_decided",
            f"This {approval.tool} step was already {approval.decision} by {who}; "
            "a decision is final.",
        )
    if approval.run.is_terminal:
        raise ApprovalRefused(
            "run_ended", f"The run has ended ({approval.run.status}); nothing to decide."
        )
    if approval.run.cancel_requested:
        # Its step will be skipped: an "approved" on the record would say otherwise.
        raise ApprovalRefused("run_ended", "The run is being cancelled; nothing to decide.")
    if four_eyes_forbids(run=approval.run, reviewer=reviewer, via=via):
        raise four_eyes_refused("destructive steps")


def reason_clean(reason: str) -> str:
    """The reason as stored: trimmed, and refused if the database could not keep its text."""
    return text_clean(
        reason, refused=ApprovalRefused, code="text_invalid", holds="The reason holds"
    )


def _validated_edit(tool: str, args: Mapping[str, Any], *, step_id: int) -> dict[str, Any]:
    spec = get_registry().get(tool)
    if spec is None:
        raise ApprovalRefused("tool_unknown", f"Tool {tool!r} is no longer registered.")
    problems = check_args(spec.schema, dict(args))
    unstorable = unstorable_in(args)
    if unstorable is not None:
        problems.append(f"they hold text that cannot be stored: {unstorable}")
    try:
        canonical_json(args)  # what the approval's hash is taken of
    except ValueError as exc:  # NaN, or an integer too long to write out
        problems.append(f"they cannot be written as JSON: {exc}")
    if problems:
        raise ApprovalRefused(
            "args_invalid",
            f"Step {step_id} ({tool}): the edited arguments are invalid: "
            + "; ".join(problems)
            + ".",
        )
    return dict(args)
