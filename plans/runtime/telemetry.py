"""The runtime's one hook for observers of runs (OpenTelemetry tracing, in plans.tracing).

Public, and cheap when nothing observes: each call site checks ``observer`` for None, so a
site without tracing pays one attribute read per model call, tool call and step. An observer
is called on the worker's own thread and must not block or raise (plans.tracing batches
and exports on a thread of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from plans.models import Approval, ModelCall, Run, Step


class RunObserver(Protocol):
    """What the runtime reports as a run advances; every timestamp is on the rows given."""

    def model_call(self, run: Run, call: ModelCall, *, requested_model: str) -> None:
        """A model call just ended (``call`` is not saved yet; its latency is measured)."""
        ...

    def tool_call(self, run: Run, step: Step, row: Mapping[str, Any]) -> None:
        """One attempt of a tool call ended; ``row`` holds the ToolCall columns."""
        ...

    def step_finished(self, run: Run, step: Step) -> None:
        """A step reached its final status (succeeded, failed, blocked, skipped)."""
        ...

    def approval_waited(self, run: Run, step: Step, approval: Approval) -> None:
        """A destructive step's call was decided by a reviewer and the step goes on."""
        ...

    def run_finished(self, run: Run) -> None:
        """The run ended (its status and finished_at are set)."""
        ...


observer: RunObserver | None = None


def set_run_observer(new: RunObserver | None) -> None:
    """Install the process's observer (or none)."""
    global observer
    observer = new
