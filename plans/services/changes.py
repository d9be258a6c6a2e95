"""Reviewers' requests for changes: instructions back to the planner instead of a verdict.

The requested call is declined (so it never comes back in a later version, the existing rule),
and the run replans within AGENTSITE_MAX_REPLANS with the instructions as delimited reviewer
text; the new version waits for a reviewer's approval of the plan, its diff on the run page.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from plans.engine import unstorable_in
from plans.models import Approval, Plan, Run
from plans.runtime.events import append_events
from plans.runtime.tasks import run_enqueue
from plans.services.approvals import ApprovalRefused, approvals_decide, reviewer_check

INSTRUCTIONS_MAX_CHARS = 2_000


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


def changes_request(
    *, approvals: list[Approval], reviewer: User | None, instructions: str
) -> list[Approval]:
    """Decline these calls and have the run replanned with the reviewer's instructions."""
    reviewer_check(reviewer)
    assert reviewer is not None
    instructions = instructions.strip()
    if not instructions:
        raise ApprovalRefused("Write the changes you want (for example “refund 500, not 5000”).")
    if len(instructions) > INSTRUCTIONS_MAX_CHARS:
        raise ApprovalRefused(f"Instructions may be at most {INSTRUCTIONS_MAX_CHARS:,} characters.")
    unstorable = unstorable_in(instructions)
    if unstorable is not None:
        raise ApprovalRefused(f"The instructions hold text that cannot be stored: {unstorable}.")
    runs = {approval.run_id for approval in approvals}
    if len(runs) != 1:
        raise ApprovalRefused("Request changes for the steps of one run at a time.")
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("goal").get(pk=runs.pop())
        refusal = changes_refusal(run)
        if refusal:
            raise ApprovalRefused(refusal)
        decided = approvals_decide(
            approvals=approvals,
            reviewer=reviewer,
            approve=False,
            reason=f"changes requested: {instructions}",
            resume=False,
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
