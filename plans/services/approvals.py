"""Where approvals are decided: reviewers' decisions on destructive steps, and expiry.

The executor's side, the gate a destructive call must pass, is plans.runtime.gate; decisions
on whole plans are plans.services.plans.plan_decide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from plans.engine import args_sha256, canonical_json, check_args, preview_token, unstorable_in
from plans.journal.events import INBOX_GROUP, append_events, group_send
from plans.journal.rollup import approval_decided
from plans.journal.tasks import run_enqueue
from plans.models import Approval, ApprovalVote, Run
from plans.roles import PEOPLES_CHANNELS, four_eyes_forbids, may_decide, routing_forbids
from plans.selectors.approvals import approvals_visible
from plans.services.refusals import Refused, text_clean
from plans.tools import ToolSpec, get_registry

# Takes the preview of a reviewer's edited arguments and records it (keyword arguments
# approval, spec, args; returns its stored form): plans.runtime.previews.preview_for_edit,
# bound at start-up by PlansConfig.ready, as previews are taken on the worker side's threads.
EditPreviewer = Callable[..., dict[str, Any]]
_edit_previewer: EditPreviewer | None = None


def edit_previewer_bind(previewer: EditPreviewer) -> None:
    """Name the function that takes the preview of an edit (see EditPreviewer)."""
    global _edit_previewer
    _edit_previewer = previewer


class ApprovalRefused(Refused):
    """A decision that cannot be recorded; nothing was changed. Codes: signed_out,
    not_a_reviewer, reason_required, text_invalid, already_decided, run_ended, four_eyes,
    not_in_group, already_approved, claimed, stale_hash, preview_unseen, tool_unknown,
    args_invalid; through the API also listed_twice, not_found and edit_with_reject."""


class StaleArgs(ApprovalRefused):
    """stale_hash: arguments changed since their reviewer saw them; holds the approvals as they
    are now, so the edge can show the current arguments with their hash."""

    def __init__(self, approvals: list[Approval]) -> None:
        named = ", ".join(f"{a.pk} (their hash is now {a.args_sha256})" for a in approvals)
        plural = "s" if len(approvals) > 1 else ""
        super().__init__(
            "stale_hash",
            f"Approval{plural} {named}: the arguments are not the ones you saw; read the "
            "current ones before deciding again. Nothing was decided.",
        )
        self.approvals = approvals


@dataclass(frozen=True)
class ShownPreview:
    """The preview of the arguments an approval would be decided on, as taken now: an edit's,
    or the approval's own; its token is what a decision bound to it names."""

    approval: Approval
    args: dict[str, Any]
    preview: dict[str, Any] | None
    edited: bool

    @property
    def token(self) -> str:
        return preview_token(args_sha256(self.approval.tool, self.args), self.preview)


class PreviewUnseen(ApprovalRefused):
    """preview_unseen: approving would bind a call to a preview its reviewer was not shown (that
    of their edit, or one taken again since); holds those previews, to show before deciding."""

    def __init__(self, previews: list[ShownPreview]) -> None:
        steps = " and ".join(
            f"step {shown.approval.step.step_id} ({shown.approval.tool})" for shown in previews
        )
        edited = all(shown.edited for shown in previews)
        what = "your edited arguments of" if edited else "the arguments of"
        super().__init__(
            "preview_unseen",
            f"Nothing was decided: read the preview of {what} {steps}, taken just now, then "
            "approve again to confirm it. The call will be held to that preview's target.",
        )
        self.previews = previews


@dataclass(frozen=True)
class Seen:
    """An approval as its reviewer saw it (the API): the hash of its arguments, any edit, and
    the token of the preview shown with them (plans.engine.preview_token; None: not said)."""

    approval_id: int
    args_sha256: str
    args: Mapping[str, Any] | None = None
    preview_token: str | None = None


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
    seen_sha256: str | None = None,
    seen_preview: str | None = None,
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
        seen={approval.pk: seen_sha256} if seen_sha256 is not None else None,
        previews_seen={approval.pk: seen_preview} if seen_preview is not None else None,
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
    changes_requested: bool = False,
    seen: Mapping[int, str] | None = None,
    previews_seen: Mapping[int, str] | None = None,
) -> list[Approval]:
    """Decide several approvals together, all or nothing.

    seen: by approval, the hash of the arguments its reviewer was shown; a decision on other
    arguments is refused (stale_hash). An approval needing n distinct approvals (an approval
    rule) is decided by the n-th approval of the same arguments; a reject is always final.
    An approved edit of a tool with a preview hook has its preview taken, and the approval is
    bound to that one. previews_seen: by approval, the token of the preview its reviewer was
    shown; given, an approval that does not name the preview it would bind is refused
    (preview_unseen, with that preview): an edit is refused once, with its own preview, and
    binds when approved again. Not given (the command line), an edit binds its preview at once.
    changes_requested: declined by a reviewer's request for changes (plans.services.changes).
    """
    if via in PEOPLES_CHANNELS:
        reviewer_check(reviewer)
    reason = reason_clean(reason)
    rejection_reason_check(approve=approve, reason=reason)
    edited_args = edited_args or {}
    edit_previews: dict[int, ShownPreview] = {}
    if approve:
        edit_previews = _edit_previews_take(approvals, reviewer, via, edited_args, seen=seen)
    if previews_seen is not None:
        unseen = [
            shown
            for shown in edit_previews.values()
            if previews_seen.get(shown.approval.pk) != shown.token
        ]
        if unseen:
            raise PreviewUnseen(unseen)
    decided: list[Approval] = []
    runs_to_resume: set[int] = set()
    with transaction.atomic():
        for approval in approvals:
            locked = (
                # OF: PostgreSQL cannot lock the nullable side of the reviewer's outer join.
                # The lock also orders concurrent approvals: each counts once, in turn.
                Approval.objects.select_for_update(of=("self", "run"))
                .select_related("run__goal__author", "reviewer", "step", "claimed_by")
                .get(pk=approval.pk)
            )
            _check_decision_allowed(locked, reviewer, via)
            if seen is not None:
                approval_seen_check(locked, seen.get(locked.pk))
            args = edited_args.get(locked.pk)
            if args is not None and approve:
                locked.args = _validated_edit(locked.tool, args, step_id=locked.step.step_id)
                if locked.pk in edit_previews:
                    # What the call is held to at launch: the target as this edit's preview saw it.
                    locked.preview = edit_previews[locked.pk].preview
            elif approve and previews_seen is not None and locked.pk in previews_seen:
                _preview_seen_check(locked, previews_seen[locked.pk])
            locked.args_sha256 = args_sha256(locked.tool, locked.args)
            if approve and not _approval_counts_enough(locked, reviewer, via, edited=args):
                locked.save(update_fields=["args", "args_sha256", "preview"])
                append_events(locked.run_id, [counted_event(locked, reviewer)])
                decided.append(locked)
                continue
            locked.decision = Approval.Decision.APPROVED if approve else Approval.Decision.REJECTED
            locked.reviewer = reviewer
            locked.via = via
            locked.reason = reason
            locked.decided_at = timezone.now()
            locked.save()
            approval_decided(locked)
            append_events(
                locked.run_id,
                [
                    decided_event(
                        locked,
                        decided_by=reviewer.get_username() if reviewer else via,
                        changes_requested=changes_requested,
                    )
                ],
            )
            if locked.run.status == Run.Status.AWAITING_APPROVAL:
                runs_to_resume.add(locked.run_id)
            decided.append(locked)
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
        if resume:
            for run_id in sorted(runs_to_resume):
                run_enqueue(run_id)
    return decided


def _edit_previews_take(
    approvals: list[Approval],
    reviewer: User | None,
    via: str,
    edited_args: Mapping[int, Mapping[str, Any]],
    *,
    seen: Mapping[int, str] | None,
) -> dict[int, ShownPreview]:
    """The previews of the approved edits of tools with a preview hook, by approval: taken
    before the decision's transaction (a hook may take its whole limit, with no row locked
    meanwhile), and only for a decision that would otherwise be made."""
    taken: dict[int, ShownPreview] = {}
    for approval in approvals:
        args = edited_args.get(approval.pk)
        spec = get_registry().get(approval.tool) if args is not None else None
        if args is None or spec is None or spec.preview is None:
            continue  # no edit, or no preview (an unknown tool is refused in the transaction)
        current = Approval.objects.select_related(
            "run__goal__author", "reviewer", "step", "claimed_by"
        ).get(pk=approval.pk)
        _check_decision_allowed(current, reviewer, via)
        if seen is not None:
            approval_seen_check(current, seen.get(current.pk))
        valid = _validated_edit(current.tool, args, step_id=current.step.step_id)
        taken[approval.pk] = ShownPreview(
            current, valid, _edit_preview(current, spec, valid), edited=True
        )
    return taken


def _edit_preview(approval: Approval, spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    if _edit_previewer is None:
        raise RuntimeError("no edit previewer bound: plans.apps.PlansConfig.ready() has not run")
    return _edit_previewer(approval=approval, spec=spec, args=args)


def _preview_seen_check(approval: Approval, token: str) -> None:
    """Refuse approving arguments whose preview is not the one the reviewer was shown (one
    taken for another reviewer's edit since): preview_unseen, showing the current one."""
    shown = ShownPreview(approval, approval.args, approval.preview, edited=False)
    if token != shown.token:
        raise PreviewUnseen([shown])


def _approval_counts_enough(
    approval: Approval, reviewer: User | None, via: str, *, edited: Mapping[str, Any] | None
) -> bool:
    """Count this approval towards the n distinct ones the approval needs; True if it is the
    n-th on the current arguments and their preview (an edit starts the count again, at this
    approval, so the next reviewer decides on the edit's preview).

    The command line (the operator's own shell, with no person named) decides outright.
    """
    if approval.approvals_needed <= 1 or reviewer is None or via not in PEOPLES_CHANNELS:
        return True
    if approval.run.goal.author_id == reviewer.pk:
        # Whatever AGENTSITE_FOUR_EYES says, the author is never one of the n.
        raise four_eyes_refused("destructive steps")
    votes = ApprovalVote.objects.filter(
        approval=approval,
        args_sha256=approval.args_sha256,
        target_version=approval.target_version or "",
    )
    if votes.filter(reviewer=reviewer).exists():
        raise ApprovalRefused(
            "already_approved",
            f"You already approved these arguments of step {approval.step.step_id} "
            f"({approval.tool}); it needs {approval.approvals_needed} distinct reviewers, so "
            "another one must approve.",
        )
    ApprovalVote.objects.create(
        approval=approval,
        reviewer=reviewer,
        args_sha256=approval.args_sha256,
        target_version=approval.target_version or "",
        args=approval.args,
        edited=edited is not None and dict(edited) != approval.requested_args,
        via=via,
    )
    return votes.count() >= approval.approvals_needed


def approval_seen_check(approval: Approval, seen_sha256: str | None) -> None:
    """Refuse a decision on arguments other than those the reviewer was shown (stale_hash)."""
    if approval.decision == Approval.Decision.PENDING and seen_sha256 != approval.args_sha256:
        raise ApprovalRefused(
            "stale_hash",
            f"Approval {approval.pk} (step {approval.step.step_id}, {approval.tool}): the "
            f"arguments are not the ones you saw (their hash is {approval.args_sha256}); read "
            "them again. Nothing was decided.",
        )


def counted_event(approval: Approval, reviewer: User | None) -> tuple[str, dict[str, Any]]:
    """The run event of one approval counted towards the n distinct ones a rule requires."""
    return (
        "approval_counted",
        {
            "approval": approval.pk,
            "step": approval.step.step_id,
            "tool": approval.tool,
            "reviewer": reviewer.get_username() if reviewer else "",
            "counted": approval.approvals_counted,
            "needed": approval.approvals_needed,
            "args": approval.args,
            "args_sha256": approval.args_sha256,
            "edited": approval.args != approval.requested_args,
            **edit_preview_payload(approval),
            "rule": approval.rule,
        },
    )


def edit_preview_payload(approval: Approval) -> dict[str, Any]:
    """What a decision event says of the preview an edit was bound to (nothing for no edit)."""
    if approval.args == approval.requested_args or approval.preview is None:
        return {}
    return {"preview": approval.preview}


def approvals_decide_seen(
    *,
    seen: list[Seen],
    reviewer: User,
    approve: bool,
    reason: str = "",
    via: str = "api",
) -> list[Approval]:
    """Decide approvals named by id, each bound to the hash of the arguments its reviewer saw:
    if one is not its approval's (the arguments changed since), nothing is decided. An edit of
    a tool with a preview hook must also name its preview's token (preview_unseen hands it)."""
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
    stale = [
        found[choice.approval_id]
        for choice in seen
        if found[choice.approval_id].decision == Approval.Decision.PENDING
        and choice.args_sha256 != found[choice.approval_id].args_sha256
    ]
    if stale:
        raise StaleArgs(stale)
    edited: dict[int, Mapping[str, Any]] = {}
    for choice in seen:
        approval = found[choice.approval_id]
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
        seen={choice.approval_id: choice.args_sha256 for choice in seen},
        previews_seen={
            choice.approval_id: choice.preview_token
            for choice in seen
            if choice.preview_token is not None
        },
    )


def approvals_expire() -> list[int]:
    """Expire approvals pending longer than AGENTSITE_APPROVAL_TTL_S; returns their runs' ids.

    Their steps are then blocked with "approval expired" when the run is continued.
    """
    ttl = settings.AGENTSITE_APPROVAL_TTL_S
    now = timezone.now()
    cutoff = now - timedelta(seconds=ttl)
    # Its own deadline (set when asked: the TTL or its rule's), else the TTL from when it was
    # asked (requests made before deadlines were stored).
    due = Q(expires_at__lt=now) | Q(expires_at__isnull=True, requested_at__lt=cutoff)
    stale = list(
        Approval.objects.filter(due, decision=Approval.Decision.PENDING)
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
            allowed = (
                (approval.expires_at - approval.requested_at).total_seconds()
                if approval.expires_at is not None
                else ttl
            )
            approval.reason = f"approval expired: no decision within {_duration(allowed)}"
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


def decided_event(
    approval: Approval, *, decided_by: str, changes_requested: bool = False
) -> tuple[str, dict[str, Any]]:
    """The run event recording a decision on an approval."""
    return (
        "approval_decided",
        {
            **({"changes_requested": True} if changes_requested else {}),
            "approval": approval.pk,
            "step": approval.step.step_id,
            "tool": approval.tool,
            "decision": approval.decision,
            "reviewer": decided_by,
            "via": approval.via,
            "reason": approval.reason,
            "args": approval.args,
            "edited": approval.args != approval.requested_args,
            "args_sha256": approval.args_sha256,
            **edit_preview_payload(approval),
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


def _check_decision_allowed(
    approval: Approval, reviewer: User | None, via: str, *, claim_check: bool = True
) -> None:
    if settled := approval.settled_words():
        raise ApprovalRefused("already_decided", settled)
    if approval.run.is_terminal:
        raise ApprovalRefused(
            "run_ended", f"The run has ended ({approval.run.status}); nothing to decide."
        )
    if approval.run.cancel_requested:
        # Its step will be skipped: an "approved" on the record would say otherwise.
        raise ApprovalRefused("run_ended", "The run is being cancelled; nothing to decide.")
    if four_eyes_forbids(run=approval.run, reviewer=reviewer, via=via):
        raise four_eyes_refused("destructive steps")
    if via in PEOPLES_CHANNELS and routing_forbids(user=reviewer, groups=approval.groups):
        raise ApprovalRefused(
            "not_in_group",
            f"Approval rule {approval.rule or '(none)'} routed this {approval.tool} step to "
            f"{' or '.join(approval.groups)}: only their members may decide it.",
        )
    if (
        claim_check
        and via in PEOPLES_CHANNELS
        and approval.claim_until is not None
        and reviewer is not None
        and approval.claimed_by_id != reviewer.pk
    ):
        raise claimed_refused(approval)


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


def approval_claim(
    *, approval: Approval, reviewer: User | None, take_over: bool = False, via: str = "web"
) -> Approval:
    """Claim a waiting request ("I'm on it"): others see who and since when, and may decide it
    only after taking the claim over, explicitly (audited), or once it lapses
    (AGENTSITE_APPROVAL_CLAIM_S). A claim never holds off expiry or escalation."""
    reviewer_check(reviewer)
    assert reviewer is not None
    with transaction.atomic():
        locked = (
            Approval.objects.select_for_update(of=("self", "run"))
            .select_related("run__goal__author", "step", "claimed_by")
            .get(pk=approval.pk)
        )
        _check_decision_allowed(locked, reviewer, via, claim_check=False)
        held_by = locked.claimed_by if locked.claim_until is not None else None
        if held_by is not None and held_by.pk != reviewer.pk and not take_over:
            raise claimed_refused(locked)
        locked.claimed_by, locked.claimed_at = reviewer, timezone.now()
        locked.save(update_fields=["claimed_by", "claimed_at"])
        took_over = held_by.get_username() if held_by and held_by.pk != reviewer.pk else ""
        append_events(
            locked.run_id,
            [
                (
                    "approval_claimed",
                    {
                        "approval": locked.pk,
                        "step": locked.step.step_id,
                        "tool": locked.tool,
                        "reviewer": reviewer.get_username(),
                        "took_over_from": took_over,
                        "until": locked.claim_until.isoformat() if locked.claim_until else "",
                        "via": via,
                    },
                )
            ],
        )
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
    return locked


def claimed_refused(approval: Approval) -> ApprovalRefused:
    """The refusal while another reviewer's claim is live: who, since when, and how to go on."""
    assert approval.claimed_by is not None and approval.claimed_at is not None
    return ApprovalRefused(
        "claimed",
        f"{approval.claimed_by.get_username()} claimed this {approval.tool} step at "
        f"{approval.claimed_at:%H:%M} UTC and is on it: take the claim over (it is recorded) "
        "to decide it yourself.",
    )


def approvals_chase(*, now: datetime | None = None) -> int:
    """Send the reminders and escalations that fell due (the rules' remind_after and
    escalate_after), each as an event (timeline, audit, webhooks, e-mail). A reminder repeats
    every remind_after until the request is decided, escalated or expires; an escalation goes
    out once and opens the request to the escalation groups. Run by every sweep; returns how
    many went out."""
    now = now or timezone.now()
    due = list(
        Approval.objects.filter(decision=Approval.Decision.PENDING, escalated_at__isnull=True)
        .filter(Q(remind_at__lte=now) | Q(escalate_at__lte=now))
        .exclude(run__status__in=Run.TERMINAL)
        .values_list("pk", flat=True)
    )
    sent = 0
    for approval_id in due:
        with transaction.atomic():
            locked = (
                Approval.objects.select_for_update(of=("self",))
                .select_related("step")
                .get(pk=approval_id)
            )
            if locked.decision != Approval.Decision.PENDING or locked.escalated_at is not None:
                continue  # decided or escalated meanwhile
            events = []
            base = {"approval": locked.pk, "step": locked.step.step_id, "tool": locked.tool}
            if locked.remind_at and locked.remind_at <= now:
                locked.reminders += 1
                locked.reminded_at = now
                # The next one a whole interval after this one, however late this one was.
                every = locked.remind_every
                locked.remind_at = now + every if every else None
                reminder = {**base, "round": locked.step.round, "reminder": locked.reminders}
                events.append(("approval_reminded", reminder))
            if locked.escalate_at and locked.escalate_at <= now:
                locked.escalated_at = now
                locked.remind_at = None  # the escalation takes over from the reminders
                before = list(locked.groups)
                if before:  # routed: the escalation groups join; unrouted stays open to all
                    locked.groups = list(dict.fromkeys([*before, *locked.escalate_to]))
                events.append(
                    (
                        "approval_escalated",
                        {
                            **base,
                            "round": locked.step.round,
                            "to": locked.escalate_to,
                            "groups": locked.groups,
                        },
                    )
                )
            if not events:
                continue  # another process's sweep sent them first
            locked.save(
                update_fields=[
                    "remind_at",
                    "reminded_at",
                    "reminders",
                    "escalated_at",
                    "groups",
                ]
            )
            append_events(locked.run_id, events)
            sent += len(events)
    if sent:
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
    return sent
