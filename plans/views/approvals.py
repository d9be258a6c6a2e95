"""The approvals inbox: destructive steps waiting for a reviewer, decided in place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from plans.engine import preview_token
from plans.engine.parsing import JSONUnreadable, read_json
from plans.engine.plan_diff import ArgChange, args_changes
from plans.engine.text import whole_number
from plans.models import Approval, Run, Step
from plans.roles import may_decide, routing_forbids
from plans.selectors.approvals import (
    INBOX_RUNS,
    QUEUE_SCOPES,
    ReplanNote,
    approval_args_seen,
    approval_cards_context,
    approvals_of_round,
    approvals_visible,
    approvals_waiting,
    approvals_waiting_first,
    changes_refusals,
    pending_approvals_count,
    questions_waiting,
    queue_count,
    round_after_decision,
)
from plans.selectors.runs import run_visible_get
from plans.services.approvals import (
    ApprovalRefused,
    PreviewUnseen,
    ShownPreview,
    approval_claim,
    approvals_decide,
)
from plans.services.changes import changes_request
from plans.templatetags.agentsite import pretty_json
from plans.ui.effects import effect_line
from plans.views.forms import RoundDecisionForm
from plans.views.params import SignedInRequest
from plans.views.refusals import refusal_status


@dataclass
class ApprovalCard:
    approval: Approval
    args_text: str  # what the edit box holds: the arguments as JSON, or the reviewer's draft
    inputs: list[Step]  # the steps whose results fed the arguments
    effect: str = ""  # what approving it does, in one line (plans.ui.effects)
    # A decision refused as stale: the arguments changed since the card was shown, and how.
    stale: bool = False
    changes: list[ArgChange] = field(default_factory=list)
    changed_by: str = ""
    routed_away: bool = False  # an approval rule routed it to groups the viewer is not in
    replan: ReplanNote | None = None  # a reviewer's request for changes made this version
    # The token of the preview the card shows, sent back with the decision to be bound to it.
    preview_token: str = ""
    # An approval refused as preview_unseen: the preview of the reviewer's edit (or the
    # approval's, taken since), shown before they approve again.
    unseen: ShownPreview | None = None


@dataclass
class DecisionGroup:
    """The destructive steps of one run's round: decided together with one form."""

    run: Run
    round: int
    cards: list[ApprovalCard] = field(default_factory=list)
    error: str = ""
    reason: str = ""  # what the reviewer typed, shown again with a refusal
    changes_refused: str = ""  # why "Request changes" is not offered ("" if it is)

    @property
    def key(self) -> str:
        return f"{self.run.pk}-{self.round}"

    @property
    def confirming(self) -> bool:
        """Refused only to show a preview first (preview_unseen): to confirm, not an error."""
        return any(card.unseen for card in self.cards)

    @property
    def pending(self) -> list[ApprovalCard]:
        return [
            c
            for c in self.cards
            if c.approval.decision == Approval.Decision.PENDING and not c.routed_away
        ]


@require_GET
def inbox(request: SignedInRequest) -> HttpResponse:
    """Every destructive step waiting for a decision, grouped by run and round."""
    # The newest runs' requests only (?runs= asks for more): thousands rendered at once took
    # seconds. The rest are counted, not loaded.
    runs = min(max(whole_number(request.GET.get("runs", "")) or INBOX_RUNS, 1), 50 * INBOX_RUNS)
    scope = request.GET.get("scope", "")
    if scope not in QUEUE_SCOPES:
        scope = "mine" if may_decide(request.user) else "all"
    page = approvals_waiting_first(request.user, runs=runs, scope=scope)
    groups = decision_groups(page.approvals, viewer=request.user)
    template = "plans/inbox.html#inbox_list" if request.htmx else "plans/inbox.html"
    context = _inbox_context(
        request, groups=groups, inbox=page, more_runs=runs + INBOX_RUNS, scope=scope
    )
    # The badge (selectors.approvals.pending_approvals_count) from what the page read already.
    waiting = 0
    if may_decide(request.user):
        waiting = page.waiting if scope == "mine" else queue_count(request.user)
    context["pending_approvals"] = len(context["questions"]) + waiting
    return render(request, template, context)


def _inbox_context(request: SignedInRequest, **context: Any) -> dict[str, Any]:
    return {
        "scope": "mine",
        **context,
        "scopes": QUEUE_SCOPES,
        "may_decide": may_decide(request.user),
        "questions": questions_waiting(request.user),
    }


def _inbox_with_drafts(
    request: SignedInRequest,
    group: tuple[int, int],
    drafts: dict[int, str],
    error: str,
    status: int,
    *,
    reason: str,
    stale: dict[int, str] | None = None,
    unseen: list[ShownPreview] | None = None,
) -> HttpResponse | None:
    """The whole inbox, the refused group showing its error and what the reviewer typed.

    None when the group no longer waits (decided meanwhile): nothing typed has a place then.
    """
    groups = decision_groups(list(approvals_waiting(request.user)), drafts, viewer=request.user)
    refused = [shown for shown in groups if (shown.run.pk, shown.round) == group]
    if not refused:
        return None
    refused[0].error, refused[0].reason = error, reason
    _mark_stale(refused[0].cards, stale or {})
    _mark_unseen(refused[0].cards, unseen or [])
    context = _inbox_context(request, groups=groups)
    return render(request, "plans/inbox.html", context, status=status)


@require_POST
def decide(request: SignedInRequest) -> HttpResponse:
    """Approve or reject the ticked steps of one run's round together, all or nothing."""
    form = RoundDecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("expected a group (run-round) and a decision", status=400)
    run_id, round_no = form.cleaned_data["group"]
    approve, reason = form.approve, form.cleaned_data["reason"]
    chosen = approvals_of_round(run_id=run_id, round_no=round_no, ids=form.cleaned_data["approval"])
    drafts = {a.pk: draft for a in chosen if (draft := form.draft_for(a.pk)) is not None}

    error, status = "", 200
    edited: dict[int, dict[str, Any]] = {}
    decided: list[Approval] = []
    stale: dict[int, str] = {}
    unseen: list[ShownPreview] = []
    if not chosen:
        error, status = "Tick at least one step to decide.", 422
    elif approve:
        edited, error = _parse_edits(chosen, drafts)
        status = 422 if error else 200
    if not error and form.changes:
        try:
            changes_request(approvals=chosen, reviewer=request.user, instructions=reason)
        except ApprovalRefused as refused:
            error, status = str(refused), refusal_status(refused)
    elif not error:
        seen = {a.pk: form.seen_for(a.pk) or "" for a in chosen}
        previews_seen = {
            a.pk: token for a in chosen if (token := form.preview_seen_for(a.pk)) is not None
        }
        try:
            decided = approvals_decide(
                approvals=chosen,
                reviewer=request.user,
                approve=approve,
                reason=reason,
                edited_args=edited or None,
                seen=seen,
                previews_seen=previews_seen,
            )
        except ApprovalRefused as refused:
            error, status = str(refused), refusal_status(refused)
            if isinstance(refused, PreviewUnseen):
                unseen = refused.previews  # shown on their cards; the drafts are kept
            if refused.code == "stale_hash":
                # The cards show the arguments as they are now, and what changed: no draft of
                # the old ones is kept.
                stale = seen
                drafts = {}

    if not request.htmx:
        # Without JavaScript: post, then redirect back to the inbox with the outcome; a refused
        # edit shows the inbox again at once instead, so what the reviewer typed is kept.
        typed = _typed_drafts(chosen, drafts)
        if error and (typed or reason.strip() or stale or unseen):
            refused_group = (run_id, round_no)
            shown = _inbox_with_drafts(
                request,
                refused_group,
                typed,
                error,
                status,
                reason=reason,
                stale=stale,
                unseen=unseen,
            )
            if shown is not None:
                return shown
        if error:
            messages.error(request, error)
        elif form.changes:
            messages.success(request, "Changes requested: the run replans with your instructions.")
        else:
            messages.success(request, _decided_message(decided, approve=approve))
        return redirect("plans:inbox")
    group = _group_after_decision(request, run_id, round_no, chosen, drafts)
    if group is None:
        return render(request, "plans/inbox.html#refusal", {"error": error}, status=status)
    group.error = error
    _mark_stale(group.cards, stale)
    _mark_unseen(group.cards, unseen)
    context = _inbox_context(request, group=group)
    return render(request, "plans/inbox.html#decision_group", context, status=status)


@require_POST
def claim(request: SignedInRequest, approval_id: int) -> HttpResponse:
    """ "I'm on it" on one request (take_over=1: take another reviewer's live claim over)."""
    approval = approvals_visible(request.user, [approval_id]).get(approval_id)
    if approval is None:
        return HttpResponse("No such approval.", status=404)
    try:
        approval_claim(
            approval=approval, reviewer=request.user, take_over=request.POST.get("take_over") == "1"
        )
    except ApprovalRefused as refused:
        if not request.htmx:
            messages.error(request, str(refused))
            return redirect(reverse("plans:inbox") + f"?scope=all#approval-{approval_id}")
        return render(
            request,
            "plans/inbox.html#refusal",
            {"error": str(refused)},
            status=refusal_status(refused),
        )
    if not request.htmx:
        messages.success(request, f"You are on step {approval.step.step_id} ({approval.tool}).")
        return redirect(reverse("plans:inbox") + f"?scope=all#approval-{approval_id}")
    group = _group_after_decision(request, approval.run_id, approval.step.round, [approval], {})
    if group is None:
        return HttpResponse("No such approval.", status=404)
    return render(request, "plans/inbox.html#decision_group", _inbox_context(request, group=group))


@require_GET
def pending_count(request: SignedInRequest) -> HttpResponse:
    """The nav badge, for clients that poll instead of holding a websocket."""
    return render(
        request,
        "base.html#pending_badge",
        {"pending_approvals": pending_approvals_count(request.user)},
    )


def decision_groups(
    approvals: list[Approval], drafts: dict[int, str] | None = None, *, viewer: Any = None
) -> list[DecisionGroup]:
    """Cards grouped by run and round (in the order given), with the results that fed them."""
    drafts = drafts or {}
    inputs, replans = approval_cards_context(approvals)
    groups: dict[tuple[int, int], DecisionGroup] = {}
    for approval in approvals:
        step = approval.step
        group = groups.setdefault(
            (approval.run_id, step.round), DecisionGroup(run=approval.run, round=step.round)
        )
        group.cards.append(
            ApprovalCard(
                approval=approval,
                args_text=drafts.get(approval.pk) or pretty_json(approval.args),
                inputs=inputs[approval.pk],
                effect=effect_line(approval.tool, approval.args),
                routed_away=viewer is not None
                and routing_forbids(user=viewer, groups=approval.groups),
                replan=replans.get(approval.pk),
                preview_token=preview_token(approval.args_sha256, approval.preview),
            )
        )
    refusals = changes_refusals(
        list({group.run.pk: group.run for group in groups.values()}.values())
    )
    for group in groups.values():
        group.cards.sort(key=lambda card: card.approval.step.step_id)
        group.changes_refused = refusals[group.run.pk]
    return list(groups.values())


def _mark_stale(cards: list[ApprovalCard], seen: dict[int, str]) -> None:
    """Cards whose arguments are no longer those their reviewer saw: what changed, and who."""
    for card in cards:
        approval = card.approval
        if approval.pk not in seen or seen[approval.pk] == approval.args_sha256:
            continue
        card.stale = True
        shown, card.changed_by = approval_args_seen(approval, seen[approval.pk])
        if shown is not None:
            card.changes = args_changes(shown, approval.args)


def _mark_unseen(cards: list[ApprovalCard], unseen: list[ShownPreview]) -> None:
    """Cards refused as preview_unseen: the preview to read, and its token to approve with."""
    by_approval = {shown.approval.pk: shown for shown in unseen}
    for card in cards:
        shown = by_approval.get(card.approval.pk)
        if shown is not None:
            card.unseen, card.preview_token = shown, shown.token
            card.effect = effect_line(shown.approval.tool, shown.args)  # what approving runs


def _decided_message(decided: list[Approval], *, approve: bool) -> str:
    """What a decision did: steps approved or rejected, and approvals counted towards n."""
    if not approve:
        return f"Rejected {len(decided)} step{pluralize(len(decided))}."
    done = [a for a in decided if a.decision == Approval.Decision.APPROVED]
    counted = [a for a in decided if a.decision == Approval.Decision.PENDING]
    parts = [f"Approved {len(done)} step{pluralize(len(done))}."] if done else []
    for approval in counted:
        parts.append(
            f"Your approval of step {approval.step.step_id} counts: "
            f"{approval.approvals_counted} of {approval.approvals_needed} approvals."
        )
    return " ".join(parts)


def _typed_drafts(chosen: list[Approval], drafts: dict[int, str]) -> dict[int, str]:
    """The drafts the reviewer changed from the arguments the edit box was filled with."""
    # A browser sends a textarea's line breaks as CRLF.
    return {
        approval.pk: drafts[approval.pk]
        for approval in chosen
        if approval.pk in drafts
        and drafts[approval.pk].replace("\r\n", "\n") != pretty_json(approval.args)
    }


def _parse_edits(
    chosen: list[Approval], drafts: dict[int, str]
) -> tuple[dict[int, dict[str, Any]], str]:
    """The reviewer's edited arguments by approval; an error names the step whose JSON is bad."""
    edited: dict[int, dict[str, Any]] = {}
    for approval in chosen:
        draft = drafts.get(approval.pk)
        if draft is None:
            continue
        where = f"step {approval.step.step_id} ({approval.tool})"
        try:
            args = read_json(draft)
        except JSONUnreadable as bad:
            return {}, f"The arguments of {where} {bad.plural}. Nothing was decided."
        if not isinstance(args, dict):
            return {}, (
                f"The arguments of {where} must be a JSON object ({{...}}). Nothing was decided."
            )
        if args != approval.args:
            edited[approval.pk] = args
    return edited, ""


def _group_after_decision(
    request: SignedInRequest,
    run_id: int,
    round_no: int,
    chosen: list[Approval],
    drafts: dict[int, str],
) -> DecisionGroup | None:
    """The group re-read after a decision: what was just decided plus what in it still waits."""
    if run_visible_get(user=request.user, run_id=run_id) is None:
        return None  # someone who may not see the run gets the message, not its arguments
    approvals = round_after_decision(
        run_id=run_id, round_no=round_no, decided=[a.pk for a in chosen]
    )
    groups = decision_groups(approvals, drafts, viewer=request.user)
    return groups[0] if groups else None
