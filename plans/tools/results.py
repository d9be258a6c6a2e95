"""result_slice: read more of a result that prompts show as an extract (plans.engine.held).

Registered always, like ask_human. The executor hands the calling run's results (RunResults,
set around the call by plans.runtime.tool_calls); a reference names a step of that run only, so a
run can never read another run's results, whatever reference the model writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Annotated, Any

from plans.engine import SLICE_MAX_CHARS, held_ref_parts, result_part
from plans.models import Step
from plans.tools.errors import ToolError
from plans.tools.registry import tool
from plans.tools.schema import Between

RESULT_SLICE = "result_slice"


class RunResults:
    """The results result_slice may read: those of one run, and no other run's.

    The plan version being run is read from its steps in memory (a finished step's result may
    not be committed yet); earlier versions from the database, committed before their replan.
    """

    def __init__(self, run_pk: int, *, version: int, current: Mapping[int, Step]) -> None:
        self.run_pk = run_pk
        self.version = version
        self.current = current

    def held(self, version: int, step_id: int) -> tuple[str, Any] | None:
        """(status, result) of the run's step, or None if the run has no such step."""
        if version == self.version:
            step = self.current.get(step_id)
            return None if step is None else (step.status, step.result)
        found: tuple[str, Any] | None = (
            Step.objects.filter(plan__run_id=self.run_pk, plan__version=version, step_id=step_id)
            .values_list("status", "result")
            .first()
        )
        return found


# The results the tool call being made on this thread may read; None outside a run's call.
_calling_run: ContextVar[RunResults | None] = ContextVar("calling_run", default=None)


@contextlib.contextmanager
def calling_run(results: RunResults | None) -> Iterator[None]:
    """Within this block, result_slice reads these results (a run's own) and no others."""
    token = _calling_run.set(results)
    try:
        yield
    finally:
        _calling_run.reset(token)


# Pure: a held result never changes, and reuse is only ever within one run.
@tool(name=RESULT_SLICE, pure=True)
def result_slice(
    ref: str,
    offset: Annotated[int, Between(low=0)] = 0,
    length: Annotated[int, Between(1, SLICE_MAX_CHARS)] = 2000,
    path: str = "",
) -> dict[str, Any]:
    """Read more of an earlier step's large result, which prompts show as an extract "held as
    ref v1.step3": from offset, length characters (at most 4,000) of the whole result's JSON
    text, or of the part at path ("[0]", "rows[2].name"). Gives text, total_chars, next_offset.
    """
    results = _calling_run.get()
    if results is None:
        raise ToolError("result_slice reads a result of the calling run; no run is calling it")
    try:
        version, step_id = held_ref_parts(ref)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
    found = results.held(version, step_id)
    if found is None:
        raise ToolError(f"this run has no step {ref} (plan version {version}, step {step_id})")
    status, result = found
    if status != Step.Status.SUCCEEDED:
        raise ToolError(f"step {ref} of this run has no result: it is {status}")
    try:
        part = result_part(result, path=path, offset=offset, length=length)
    except ValueError as exc:
        raise ToolError(f"{ref}: {exc}") from exc
    return {"ref": ref, **part}
