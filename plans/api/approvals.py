"""/api/v1/approvals/: what waits for a reviewer, and deciding it bound to the hash seen."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja import Router

from plans.api.errors import ErrorOut, not_found
from plans.api.runs import run_out, run_url, visible_run
from plans.api.schemas import (
    ApprovalClaimOut,
    ApprovalOut,
    ClaimIn,
    DecisionIn,
    DecisionOut,
    PlanDecisionIn,
    RunOut,
)
from plans.engine import preview_token
from plans.models import Approval
from plans.roles import four_eyes_forbids, may_decide, routing_forbids
from plans.selectors.approvals import approval_inputs, approvals_visible, approvals_waiting
from plans.services.approvals import Seen, approval_claim, approvals_decide_seen
from plans.services.plans import plan_decide_seen

router = Router(tags=["approvals"])

DECISION_ERRORS: dict[int, type[ErrorOut]] = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
}


def approval_rule_out(approval: Approval) -> dict[str, str] | None:
    """The rule that matched the approval's call, as the API shows it (None: no rule)."""
    if not approval.rule:
        return None
    return {
        "name": approval.rule,
        "version": approval.rule_version,
        "outcome": approval.rule_outcome,
        "error": approval.rule_error,
    }


def approval_claim_out(approval: Approval) -> dict[str, Any] | None:
    until = approval.claim_until
    if until is None or approval.claimed_by is None:
        return None
    return {"by": approval.claimed_by.get_username(), "since": approval.claimed_at, "until": until}


def approval_progress_out(approval: Approval) -> dict[str, Any]:
    votes = approval.current_votes
    return {
        "needed": approval.approvals_needed,
        "counted": len(votes),
        "approved_by": [vote.reviewer.get_username() for vote in votes],
    }


@router.get(
    "/approvals/",
    response={200: list[ApprovalOut], 401: ErrorOut},
    summary="Destructive steps waiting for a decision, with the results that fed them",
)
def list_approvals(request: HttpRequest) -> list[dict[str, Any]]:
    viewer: User = request.user  # type: ignore[assignment]
    waiting = list(approvals_waiting(request.user))
    inputs_of = approval_inputs(waiting)
    listed = []
    for approval in waiting:
        step = approval.step
        listed.append(
            {
                "id": approval.pk,
                "run": approval.run_id,
                "run_url": run_url(request, approval.run_id),
                "goal": approval.run.goal.text,
                "author": approval.run.goal.author.get_username(),
                "step": step.step_id,
                "round": step.round,
                "tool": approval.tool,
                "args": approval.args,
                "args_sha256": approval.args_sha256,
                "requested_at": approval.requested_at,
                "rule": approval_rule_out(approval),
                "progress": approval_progress_out(approval),
                "groups": approval.groups,
                "may_decide": may_decide(viewer)
                and not four_eyes_forbids(run=approval.run, reviewer=viewer, via="api")
                and not routing_forbids(user=viewer, groups=approval.groups),
                "claim": approval_claim_out(approval),
                "deadline": approval.deadline,
                "escalated_to": approval.escalate_to if approval.escalated_at else [],
                "inputs": [
                    {
                        "step": upstream.step_id,
                        "tool": upstream.tool,
                        "status": upstream.status,
                        "result": upstream.result,
                        "error": upstream.error,
                    }
                    for upstream in inputs_of[approval.pk]
                ],
                "preview": preview_out(approval.preview),
                "preview_token": preview_token(approval.args_sha256, approval.preview),
                "supersedes": _superseded_out(approval),
            }
        )
    return listed


def preview_out(preview: dict[str, Any] | None) -> dict[str, Any]:
    """A stored preview (plans.engine.previews) as the API's PreviewOut."""
    if not preview or "error" in preview:
        return {"available": False, "error": (preview or {}).get("error", "")}
    return {
        "available": True,
        "summary": preview.get("summary", ""),
        "facts": [{"label": label, "value": value} for label, value in preview.get("facts", [])],
        "warnings": list(preview.get("warnings", [])),
        "target_version": preview.get("target_version"),
    }


def _superseded_out(approval: Approval) -> dict[str, Any] | None:
    before = approval.supersedes
    if before is None:
        return None
    return {
        "approval": before.pk,
        "reviewer": before.reviewer.get_username() if before.reviewer else None,
        "decided_at": before.decided_at,
        "preview": preview_out(before.preview),
        "changes": list(approval.changes),
    }


@router.post(
    "/approvals/decide/",
    response={200: DecisionOut, **DECISION_ERRORS},
    summary="Approve (optionally with edited arguments) or reject, all or nothing",
    description="Each approval names the args_sha256 the reviewer saw; if it is not the "
    "approval's, nothing is decided: 409 stale_hash, with the current arguments and their hash "
    "in 'current', to show the reviewer before deciding again. Under four-eyes the goal's "
    "author may not decide (403 four_eyes).",
)
def decide(request: HttpRequest, body: DecisionIn) -> dict[str, Any]:
    reviewer: User = request.user  # type: ignore[assignment]
    decided = approvals_decide_seen(
        seen=[
            Seen(choice.id, choice.args_sha256, choice.args, choice.preview_token)
            for choice in body.approvals
        ],
        reviewer=reviewer,
        approve=body.decision == "approve",
        reason=body.reason,
    )
    return {
        "decided": [
            {
                "id": approval.pk,
                "run": approval.run_id,
                "tool": approval.tool,
                "decision": approval.decision,
                "args": approval.args,
                "args_sha256": approval.args_sha256,
                "edited": approval.args != approval.requested_args,
                "reviewer": reviewer.get_username(),
                "reason": approval.reason,
                "decided_at": approval.decided_at,
                "progress": approval_progress_out(approval),
            }
            for approval in decided
        ]
    }


@router.post(
    "/approvals/{int:approval_id}/claim/",
    response={200: ApprovalClaimOut, **DECISION_ERRORS},
    summary='Claim a waiting approval ("I\'m on it"), or take a live claim over',
    description="Others may not decide it while the claim lives (409 claimed) unless they take "
    "it over, which the run's audit records. A claim lapses after AGENTSITE_APPROVAL_CLAIM_S.",
)
def claim(request: HttpRequest, approval_id: int, body: ClaimIn) -> dict[str, Any]:
    reviewer: User = request.user  # type: ignore[assignment]
    in_range = 0 < approval_id < 2**63  # a larger id names no row (and overflows SQLite)
    approval = approvals_visible(reviewer, [approval_id]).get(approval_id) if in_range else None
    if approval is None:
        raise not_found("approval")
    claimed = approval_claim(
        approval=approval, reviewer=reviewer, take_over=body.take_over, via="api"
    )
    out = approval_claim_out(claimed)
    assert out is not None
    return out


@router.post(
    "/runs/{int:run_id}/plan/decide/",
    response={200: RunOut, **DECISION_ERRORS},
    summary="Approve or reject the run's whole plan (the plan-approval policy)",
)
def decide_plan(request: HttpRequest, run_id: int, body: PlanDecisionIn) -> dict[str, Any]:
    reviewer: User = request.user  # type: ignore[assignment]
    run = visible_run(request, run_id)
    plan_decide_seen(
        run=run,
        version=body.version,
        reviewer=reviewer,
        approve=body.decision == "approve",
        reason=body.reason,
    )
    return run_out(request, run)
