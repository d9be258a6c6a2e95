"""What a replan changed: each step id of two plan versions as added, removed, changed or kept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol


class PlannedStep(Protocol):
    step_id: int
    tool: str
    args: Any


class RecordedEvent(Protocol):
    kind: str
    payload: Any


ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class StepChange:
    """One step id across two versions; old_* is None when added, new_* None when removed."""

    step_id: int
    change: str
    old_tool: str | None = None
    new_tool: str | None = None
    old_args: Any = None
    new_args: Any = None
    reused_from: str = ""
    destructive: bool = False  # the new version's step, as effect_note reads it
    repeat: bool = False
    # Not run yet, but the old version made this very call: it will be taken, not made again.
    done_before: str = ""

    @property
    def tool_changed(self) -> bool:
        return self.change == CHANGED and self.old_tool != self.new_tool

    @property
    def args_changed(self) -> bool:
        return self.change == CHANGED and self.old_args != self.new_args


@dataclass(frozen=True)
class PlanDiff:
    old_version: int
    new_version: int
    changes: list[StepChange]

    def count(self, change: str) -> int:
        return sum(1 for step in self.changes if step.change == change)

    @property
    def summary(self) -> dict[str, int]:
        return {kind: self.count(kind) for kind in (ADDED, REMOVED, CHANGED, UNCHANGED)}

    @property
    def summary_text(self) -> str:
        return " · ".join(f"{count} {kind}" for kind, count in self.summary.items() if count)


def plan_diff(
    old_steps: Iterable[PlannedStep],
    new_steps: Iterable[PlannedStep],
    *,
    reused_from: Mapping[int, str] | None = None,
    old_version: int | None = None,
) -> list[StepChange]:
    """Every step id of either version, in id order, with how the new version differs.

    Given the old version's number, an unchanged destructive step not yet run whose old call
    succeeded, and whose inputs are all unchanged, says where it was done (done_before).
    """
    old = {step.step_id: step for step in old_steps}
    new = {step.step_id: step for step in new_steps}
    reused_from = reused_from or {}
    changes = []
    for step_id in sorted(old.keys() | new.keys()):
        before, after = old.get(step_id), new.get(step_id)
        if before is None:
            change = ADDED
        elif after is None:
            change = REMOVED
        elif before.tool != after.tool or before.args != after.args:
            change = CHANGED
        else:
            change = UNCHANGED
        changes.append(
            StepChange(
                step_id=step_id,
                change=change,
                old_tool=before.tool if before else None,
                new_tool=after.tool if after else None,
                old_args=before.args if before else None,
                new_args=after.args if after else None,
                # From the events, else from the step itself once it ran.
                reused_from=str(reused_from.get(step_id) or getattr(after, "reused_from", ""))
                if after
                else "",
                destructive=bool(getattr(after, "destructive", False)),
                repeat=bool(getattr(after, "repeat", False)),
            )
        )
    if old_version is None:
        return changes
    unchanged = {c.step_id for c in changes if c.change == UNCHANGED}
    return [
        replace(change, done_before=_done_before(old[change.step_id], old_version))
        if change.step_id in unchanged and _carried(new, change.step_id, unchanged)
        else change
        for change in changes
    ]


def _carried(new: Mapping[int, PlannedStep], step_id: int, unchanged: set[int]) -> bool:
    """An unchanged destructive step yet to run, not a repeat, fed only by unchanged steps."""
    step = new[step_id]
    if not getattr(step, "destructive", False) or getattr(step, "repeat", False):
        return False
    if getattr(step, "status", "pending") != "pending" or getattr(step, "reused_from", ""):
        return False
    seen: set[int] = set()
    pending = list(getattr(step, "depends_on", None) or [])
    while pending:
        upstream = pending.pop()
        if upstream in seen:
            continue
        seen.add(upstream)
        if upstream not in unchanged:
            return False
        pending += list(getattr(new.get(upstream), "depends_on", None) or [])
    return True


def _done_before(old: PlannedStep, old_version: int) -> str:
    if getattr(old, "status", "") != "succeeded":
        return ""
    return str(getattr(old, "reused_from", "") or f"plan v{old_version} step {old.step_id}")


def reused_results(events: Iterable[RecordedEvent]) -> dict[int, dict[int, str]]:
    """{plan version: {step id: where its result came from}} from the run's events, in seq order."""
    reused: dict[int, dict[int, str]] = {}
    version = None
    for event in events:
        if event.kind == "plan_created":
            version = event.payload.get("version")
        # A step_finished belongs to the most recent plan version created before it.
        elif (
            event.kind == "step_finished"
            and event.payload.get("reused_from")
            and version is not None
        ):
            step_id = event.payload.get("step")
            reused.setdefault(version, {})[step_id] = str(event.payload["reused_from"])
    return reused


@dataclass(frozen=True)
class ArgChange:
    """One argument between two versions of a call's arguments (None: absent there)."""

    name: str
    old: Any
    new: Any
    added: bool = False
    removed: bool = False


def args_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[ArgChange]:
    """The arguments that differ between two versions, in the new version's order."""
    changes = [
        ArgChange(name, old.get(name), value, added=name not in old)
        for name, value in new.items()
        if name not in old or old[name] != value
    ]
    changes += [
        ArgChange(name, value, None, removed=True) for name, value in old.items() if name not in new
    ]
    return changes
