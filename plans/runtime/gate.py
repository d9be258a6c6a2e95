"""The approval gate: may a destructive step run with exactly these arguments?

The executor consults it before it calls a destructive tool, and the tool thread checks the
approval once more right before the call. Reviewers' decisions are recorded by
plans.services.approvals; this module only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from plans.engine import args_match_sha256, args_sha256, preview_changes, preview_version
from plans.models import Approval, Step


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
    run_id: int,
    step: Step,
    resolved_args: dict[str, Any],
    preview: dict[str, Any] | None = None,
) -> Approval:
    """A new pending approval for the step's resolved arguments (saved by the caller's recorder)."""
    return Approval(
        run_id=run_id,
        step=step,
        tool=step.tool,
        requested_args=resolved_args,
        args=resolved_args,
        args_sha256=args_sha256(step.tool, resolved_args),
        preview=preview,
    )


def approval_request_again(
    *, stale: Approval, preview: dict[str, Any] | None, changes: list[str]
) -> Approval:
    """The fresh request replacing an approval gone stale: the same call, the new preview."""
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
    )
