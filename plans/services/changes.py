"""Reviewers' requests for changes: instructions back to the planner instead of a verdict.

The requested call is declined (so it never comes back in a later version, the existing rule),
and the run replans within AGENTSITE_MAX_REPLANS with the instructions as delimited reviewer
text; the new version waits for a reviewer's approval of the plan, its diff on the run page.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from plans.journal.events import append_events
from plans.journal.tasks import run_enqueue
from plans.models import Approval, Plan, Run
from plans.roles import four_eyes_forbids
from plans.selectors.approvals import changes_refusal
from plans.services.approvals import (
    ApprovalRefused,
    approvals_decide,
    four_eyes_refused,
    reviewer_check,
)
from plans.services.plans import plan_not_waiting
from plans.services.refusals import text_clean

INSTRUCTIONS_MAX_CHARS = 2_000


class ChangesRefused(ApprovalRefused):
    """Changes that cannot be requested: codes as ApprovalRefused's, and text_invalid,
    one_run_only and changes_refused (the run may not be replanned: changes_refusal)."""


def changes_request(
    *, approvals: list[Approval], reviewer: User | None, instructions: str
) -> list[Approval]:
    """Decline these calls and have the run replanned with the reviewer's instructions."""
    reviewer_check(reviewer)
    assert reviewer is not None
    instructions = _instructions_clean(instructions)
    runs = {approval.run_id for approval in approvals}
    if len(runs) != 1:
        raise ChangesRefused("one_run_only", "Request changes for the steps of one run at a time.")
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("goal").get(pk=runs.pop())
        refusal = changes_refusal(run)
        if refusal:
            raise ChangesRefused("changes_refused", refusal)
        decided = approvals_decide(
            approvals=approvals,
            reviewer=reviewer,
            approve=False,
            reason=f"changes requested: {instructions}",
            resume=False,
            changes_requested=True,
        )
        at = timezone.now().isoformat()
        for approval in decided:
            plan = Plan.objects.select_for_update().get(pk=approval.step.plan_id)
            request = {
                "step": approval.step.step_id,
                "tool": approval.tool,
                "instructions": instructions,
                "reviewer": reviewer.get_username(),
                "at": at,
            }
            plan.change_requests = [*plan.change_requests, request]
            plan.save(update_fields=["change_requests"])
            append_events(run.pk, [("changes_requested", {**request, "version": plan.version})])
        if run.status == Run.Status.AWAITING_APPROVAL:
            run_enqueue(run.pk)
    return decided


def plan_changes_request(*, plan: Plan, reviewer: User | None, instructions: str) -> Plan:
    """Send a whole plan awaiting approval back with instructions: it is declined and the run
    replans with them (within AGENTSITE_MAX_REPLANS); the new version waits for approval."""
    reviewer_check(reviewer)
    assert reviewer is not None
    instructions = _instructions_clean(instructions)
    with transaction.atomic():
        locked = (
            Plan.objects.select_for_update(of=("self",)).select_related("run__goal").get(pk=plan.pk)
        )
        run = locked.run
        if locked.decision or run.status != Run.Status.AWAITING_PLAN_APPROVAL:
            raise plan_not_waiting()
        if four_eyes_forbids(run=run, reviewer=reviewer, via="web"):
            raise four_eyes_refused("plan")
        refusal = changes_refusal(run)
        if refusal:
            raise ChangesRefused("changes_refused", refusal)
        request = {
            "step": None,
            "tool": "",
            "instructions": instructions,
            "reviewer": reviewer.get_username(),
            "at": timezone.now().isoformat(),
        }
        locked.change_requests = [*locked.change_requests, request]
        locked.decision = Plan.Decision.REJECTED
        locked.decided_by = reviewer
        locked.decision_reason = f"changes requested: {instructions}"
        locked.decided_at = timezone.now()
        locked.save()
        append_events(
            run.pk,
            [
                ("changes_requested", {**request, "version": locked.version}),
                (
                    "plan_decided",
                    {
                        "version": locked.version,
                        "decision": locked.decision,
                        "reviewer": reviewer.get_username(),
                        "reason": locked.decision_reason,
                        "changes_requested": True,
                    },
                ),
            ],
        )
        run_enqueue(run.pk)
    return locked


def _instructions_clean(instructions: str) -> str:
    return text_clean(
        instructions,
        refused=ChangesRefused,
        code="text_invalid",
        holds="The instructions hold",
        empty="Write the changes you want (for example “refund 500, not 5000”).",
        max_chars=INSTRUCTIONS_MAX_CHARS,
        too_long="Instructions may be at most {limit:,} characters.",
    )
