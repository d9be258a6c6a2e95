"""A preview taken for a reviewer: of the arguments they edited, as a request's is taken.

Bound into plans.services.approvals at start-up (PlansConfig.ready), so the service that
records the decision, which may not import the worker side, has the preview taken where every
preview is: on the process's tool threads, within the hook's time limit and breaker.
"""

from __future__ import annotations

from typing import Any

from plans.models import Approval, ToolPreview
from plans.runtime.recorder import preview_row_redacted
from plans.runtime.tool_calls import preview_take
from plans.runtime.tool_threads import tool_threads
from plans.tools import ToolSpec


def preview_for_edit(*, approval: Approval, spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """The preview of the edited arguments in its stored form ({"error"} if it failed), recorded
    as a ToolPreview for an edit."""
    step = approval.step
    taken = preview_take(spec, args, pool=tool_threads(), idempotency_key=step.idempotency_key)
    row = taken.row(run_id=approval.run_id, step=step, purpose=ToolPreview.Purpose.EDIT)
    preview_row_redacted(row).save()
    return taken.preview
