"""The notification event types (the documented list) and the run events they come from."""

from __future__ import annotations

# Webhook event types an endpoint may subscribe to, with what each one means.
WEBHOOK_EVENTS: dict[str, str] = {
    "run.created": "A goal was handed to the agent (from a page, the API or the CLI).",
    "plan.approval_requested": "A run's plan waits for a reviewer's decision.",
    "plan.decided": "A reviewer approved or rejected a run's plan.",
    "approval.requested": "A destructive step waits for a reviewer's decision.",
    "approval.decided": "A destructive step was approved, rejected, or its request expired.",
    "approval.stale": "An approved destructive step was not called because its target changed "
    "since its preview; it waits for a fresh decision.",
    "approval.reminded": "A request is still undecided past its approval rule's remind_after "
    "(again every remind_after until it is decided, escalated or expires).",
    "approval.escalated": "A request is still undecided past its rule's escalate_after: it "
    "went to the escalation groups.",
    "run.finished": "A run ended: completed, failed, blocked, budget_exhausted, "
    "invalid_plan or cancelled.",
}

# The run event kind each type is made from.
KIND_TO_TYPE: dict[str, str] = {
    "run_created": "run.created",
    "plan_approval_requested": "plan.approval_requested",
    "plan_decided": "plan.decided",
    "approval_requested": "approval.requested",
    "approval_decided": "approval.decided",
    "approval_stale": "approval.stale",
    "approval_reminded": "approval.reminded",
    "approval_escalated": "approval.escalated",
    "run_finished": "run.finished",
}
NOTIFYING_KINDS = frozenset(KIND_TO_TYPE)

# Run endings the author is emailed about (a cancel was asked for by a person who knows).
FINISHED_EMAIL_STATUSES = frozenset(
    {"completed", "failed", "blocked", "budget_exhausted", "invalid_plan"}
)
