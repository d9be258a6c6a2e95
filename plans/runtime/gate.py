"""The approval gate: may a destructive step run with exactly these arguments?

The executor consults it before it calls a destructive tool, and the tool thread checks the
approval once more right before the call. Reviewers' decisions are recorded by
plans.services.approvals; this module only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from plans.engine import args_match_sha256, args_sha256, preview_changes, preview_version
from plans.engine.approval_rules import Kind, Match, call_match
from plans.guards.approval_rules import call_context, rules_load
from plans.models import Approval, Run, Step
from plans.tools import ToolSpec


class Verdict(StrEnum):
    MISSING = "missing"
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


@dataclass(frozen=True)
class GateDecision:
    verdict: Verdict
    approval: Approval | None = None

    @property
    def call_args(self) -> dict[str, Any]:
        """The arguments the reviewer approved (possibly edited), which the call must use."""
        assert self.verdict is Verdict.APPROVED and self.approval is not None
        return self.approval.args


def approval_gate(*, step: Step, resolved_args: Mapping[str, Any]) -> GateDecision:
    """May this destructive step run with exactly these arguments? Keyed on the call."""
    latest = step.approvals.order_by("-requested_at", "-pk").first()
    if latest is None or args_sha256(step.tool, latest.requested_args) != args_sha256(
        step.tool, resolved_args
    ):
        # No decision was ever asked for these arguments; an old one does not carry over.
        return GateDecision(Verdict.MISSING)
    if latest.decision == Approval.Decision.PENDING:
        return GateDecision(Verdict.PENDING, latest)
    if latest.decision in (Approval.Decision.REJECTED, Approval.Decision.EXPIRED):
        return GateDecision(Verdict.REJECTED, latest)
    if not args_match_sha256(latest.args_sha256, step.tool, latest.args):
        # The stored arguments no longer match what was approved: treat as never approved.
        return GateDecision(Verdict.MISSING)
    return GateDecision(Verdict.APPROVED, latest)


def approval_is_valid_for_call(
    approval: Approval | None, *, tool: str, args: Mapping, step_pk: int
) -> bool:
    """The last check before a destructive tool runs: an approval of this step, these args."""
    return approval is not None and approval.authorises(tool=tool, args=args, step_id=step_pk)


def approval_target_stale(
    *, approval: Approval, current: Mapping[str, Any] | None
) -> list[str] | None:
    """The re-check just before a destructive call: None if it may go ahead, else what changed
    since the reviewer saw its preview (the call must not run; the approval is stale).

    An approval whose reviewer saw no preview binds no target version; one that did binds
    exactly that version, and a preview that cannot be taken again does not confirm it.
    """
    seen = approval.target_version
    if seen is None or preview_version(current) == seen:
        return None
    return preview_changes(approval.preview, current)


def approval_request(
    *,
    run: Run,
    step: Step,
    spec: ToolSpec | None,
    resolved_args: dict[str, Any],
    preview: dict[str, Any] | None = None,
) -> Approval:
    """A new approval for the step's resolved arguments as the first matching approval rule has
    it: decided by the rule, or pending for the people it names (saved by the caller's recorder).

    Asked once per call: once stored, the decision is read (approval_gate), never re-evaluated.
    """
    approval = Approval(
        run_id=run.pk,
        step=step,
        tool=step.tool,
        requested_args=resolved_args,
        args=resolved_args,
        args_sha256=args_sha256(step.tool, resolved_args),
        preview=preview,
    )
    try:
        rules = rules_load()
    except ImproperlyConfigured as broken:
        # Fail closed: a person decides, and the card says why no rule was applied.
        approval.rule_error = f"the approval rules could not be loaded: {broken}"
        return approval
    if rules:
        context = call_context(run=run, spec=spec, tool=step.tool, args=resolved_args)
        approval_rule_apply(approval, call_match(rules, context))
    return approval


def approval_request_again(
    *, stale: Approval, preview: dict[str, Any] | None, changes: list[str]
) -> Approval:
    """The fresh request replacing an approval gone stale: the same call, the new preview.

    It keeps who may decide it (the rule's routing and n-of-m) but is always a person's to
    decide: the rule decided on a target that has since changed.
    """
    return Approval(
        run_id=stale.run_id,
        step_id=stale.step_id,
        tool=stale.tool,
        requested_args=stale.requested_args,
        args=stale.args,
        args_sha256=args_sha256(stale.tool, stale.args),
        preview=preview,
        supersedes=stale,
        changes=changes,
        rule=stale.rule,
        rule_version=stale.rule_version,
        rule_outcome=stale.rule_outcome,
        approvals_needed=stale.approvals_needed,
        groups=stale.groups,
        escalate_to=stale.escalate_to,
    )


def approval_rule_apply(approval: Approval, match: Match) -> None:
    """Record a rule's outcome on a new approval: who may decide it, or its decision."""
    if match.rule is None:
        return
    approval.rule = match.rule.name
    approval.rule_version = match.rule.version
    approval.rule_error = match.error
    outcome = match.outcome
    approval.rule_outcome = Approval.RuleOutcome(outcome.kind.value) if not match.error else ""
    approval.approvals_needed = outcome.approvals
    approval.groups = list(outcome.groups)
    deadlines, asked = match.rule.deadlines, approval.requested_at
    if not match.error:
        if deadlines.ttl_s is not None:
            approval.expires_at = asked + timedelta(seconds=deadlines.ttl_s)
        if deadlines.remind_after_s is not None:
            approval.remind_every = timedelta(seconds=deadlines.remind_after_s)
            approval.remind_at = asked + approval.remind_every
        if deadlines.escalate_after_s is not None:
            approval.escalate_at = asked + timedelta(seconds=deadlines.escalate_after_s)
            approval.escalate_to = list(deadlines.escalate_to)
    if match.error or outcome.kind not in (Kind.APPROVE, Kind.DENY):
        return
    approval.via = Approval.Via.RULE
    approval.decided_at = approval.requested_at  # a rule waits for nobody
    if outcome.kind is Kind.APPROVE:
        approval.decision = Approval.Decision.APPROVED
    else:
        approval.decision = Approval.Decision.REJECTED
        approval.reason = f"denied by approval rule {match.rule.name}: {outcome.reason}"


def approval_rule_payload(approval: Approval) -> dict[str, Any]:
    """What an approval event says of the rule that matched its call (nothing if none did)."""
    if not approval.rule and not approval.rule_error:
        return {}
    payload: dict[str, Any] = {
        "rule": approval.rule,
        "rule_version": approval.rule_version,
        "rule_outcome": approval.rule_outcome,
        "approvals_needed": approval.approvals_needed,
        "groups": approval.groups,
    }
    if approval.rule_error:
        payload["rule_error"] = approval.rule_error
    return payload


def decided_by_rule_event(approval: Approval) -> tuple[str, dict[str, Any]]:
    """The run event of a call an approval rule decided when it was asked (no person did)."""
    return (
        "approval_decided",
        {
            "step": approval.step.step_id,
            "tool": approval.tool,
            "decision": approval.decision,
            "reviewer": f"rule {approval.rule}",
            "reason": approval.reason,
            "args": approval.args,
            "edited": False,
            "args_sha256": approval.args_sha256,
            **approval_rule_payload(approval),
        },
    )
