"""/api/v1/approvals/: what waits for a reviewer, and deciding it bound to the hash seen."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja import Router

from plans.api.errors import ApiError, ErrorOut
from plans.api.runs import run_out, run_url, visible_run
from plans.api.schemas import ApprovalOut, DecisionIn, DecisionOut, PlanDecisionIn, RunOut
from plans.models import Approval, Step
from plans.roles import four_eyes_forbids
from plans.selectors.approvals import approvals_waiting
from plans.selectors.runs import run_visibility
from plans.services.approvals import ApprovalRefused, approvals_decide
from plans.services.plans import plan_current, plan_decide

router = Router(tags=["approvals"])

DECISION_ERRORS: dict[int, type[ErrorOut]] = {
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
}
# What a refused decision's message is about, when the input (not the moment) is at fault.
UNPROCESSABLE = ("A reason is required", "The edited arguments", "The reason holds")


@router.get(
    "/approvals/",
    response={200: list[ApprovalOut], 401: ErrorOut},
    summary="Destructive steps waiting for a decision, with the results that fed them",
)
def list_approvals(request: HttpRequest) -> list[dict[str, Any]]:
    waiting = list(approvals_waiting(request.user))
    plan_ids = {approval.step.plan_id for approval in waiting}
    steps = {(s.plan_id, s.step_id): s for s in Step.objects.filter(plan_id__in=plan_ids)}
    listed = []
    for approval in waiting:
        step = approval.step
        inputs = [
            steps[(step.plan_id, dep)] for dep in step.depends_on if (step.plan_id, dep) in steps
        ]
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
                "inputs": [
                    {
                        "step": upstream.step_id,
                        "tool": upstream.tool,
                        "status": upstream.status,
                        "result": upstream.result,
                        "error": upstream.error,
                    }
                    for upstream in inputs
                ],
            }
        )
    return listed


@router.post(
    "/approvals/decide/",
    response={200: DecisionOut, **DECISION_ERRORS},
    summary="Approve (optionally with edited arguments) or reject, all or nothing",
    description="Each approval names the args_sha256 the reviewer saw; if it is not the "
    "approval's, nothing is decided (409 stale_hash). Under four-eyes the goal's author may not "
    "decide (403 four_eyes).",
)
def decide(request: HttpRequest, body: DecisionIn) -> dict[str, Any]:
    reviewer: User = request.user  # type: ignore[assignment]
    if not reviewer.has_perm("plans.decide_approval"):
        raise ApiError(403, "not_a_reviewer", "Only reviewers may decide (token role: reviewers).")
    ids = [choice.id for choice in body.approvals]
    if len(set(ids)) != len(ids):
        raise ApiError(422, "invalid_request", "Each approval may be listed once.")
    approve = body.decision == "approve"
    if not approve and not body.reason.strip():
        raise ApiError(422, "reason_required", "A reason is required to reject.")
    rule = run_visibility(reviewer, through="run__")
    found = {
        approval.pk: approval
        for approval in Approval.objects.filter(pk__in=ids)
        .filter(rule)
        .select_related("run__goal__author", "step")
    }
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise ApiError(404, "not_found", f"No such approval: {', '.join(missing)}.")
    chosen = [found[pk] for pk in ids]
    if any(four_eyes_forbids(run=a.run, reviewer=reviewer, via="api") for a in chosen):
        raise ApiError(
            403,
            "four_eyes",
            "Four-eyes rule: you submitted this goal, so another reviewer must decide its "
            "destructive steps.",
        )
    edited: dict[int, dict[str, Any]] = {}
    for choice in body.approvals:
        approval = found[choice.id]
        if approval.decision == Approval.Decision.PENDING and (
            choice.args_sha256 != approval.args_sha256
        ):
            raise ApiError(
                409,
                "stale_hash",
                f"Approval {approval.pk}: the arguments are not the ones you saw (their hash is "
                f"{approval.args_sha256}); read them again. Nothing was decided.",
            )
        if choice.args is not None:
            if not approve:
                raise ApiError(422, "invalid_request", "Edited arguments only go with approve.")
            if choice.args != approval.args:
                edited[approval.pk] = choice.args
    try:
        decided = approvals_decide(
            approvals=chosen,
            reviewer=reviewer,
            approve=approve,
            reason=body.reason,
            edited_args=edited or None,
            via="api",
        )
    except ApprovalRefused as refused:
        message = str(refused)
        if message.startswith(UNPROCESSABLE):
            raise ApiError(422, "decision_invalid", message) from refused
        raise ApiError(409, "decision_refused", message) from refused
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
            }
            for approval in decided
        ]
    }


@router.post(
    "/runs/{run_id}/plan/decide/",
    response={200: RunOut, **DECISION_ERRORS},
    summary="Approve or reject the run's whole plan (the plan-approval policy)",
)
def decide_plan(request: HttpRequest, run_id: int, body: PlanDecisionIn) -> dict[str, Any]:
    reviewer: User = request.user  # type: ignore[assignment]
    run = visible_run(request, run_id)
    if not reviewer.has_perm("plans.decide_approval"):
        raise ApiError(403, "not_a_reviewer", "Only reviewers may decide (token role: reviewers).")
    if four_eyes_forbids(run=run, reviewer=reviewer, via="api"):
        raise ApiError(
            403,
            "four_eyes",
            "Four-eyes rule: you submitted this goal, so another reviewer must decide its plan.",
        )
    approve = body.decision == "approve"
    if not approve and not body.reason.strip():
        raise ApiError(422, "reason_required", "A reason is required to reject a plan.")
    plan = plan_current(run)
    if plan is None or plan.version != body.version:
        raise ApiError(
            409,
            "stale_plan",
            f"Plan v{body.version} is not the run's current plan"
            + (f" (v{plan.version} is)." if plan else "."),
        )
    try:
        plan_decide(plan=plan, reviewer=reviewer, approve=approve, reason=body.reason, via="api")
    except ApprovalRefused as refused:
        message = str(refused)
        if message.startswith(UNPROCESSABLE):
            raise ApiError(422, "decision_invalid", message) from refused
        raise ApiError(409, "decision_refused", message) from refused
    return run_out(request, run)
