"""The validated plan the rest of the engine works on, and the errors that stop one forming."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

# Step ids are stored in a 32-bit signed integer column, so larger ones are refused up front.
MAX_STEP_ID = 2**31 - 1


@dataclass(frozen=True)
class PlanStep:
    id: int
    tool: str
    args: dict[str, Any]
    depends_on: tuple[int, ...]
    # A deliberately new effect: an identical call an earlier plan version made happens again.
    repeat: bool = False

    def to_json(self) -> dict[str, Any]:
        """The step as the planner writes it."""
        data: dict[str, Any] = {
            "id": self.id,
            "tool": self.tool,
            "args": self.args,
            "depends_on": list(self.depends_on),
        }
        if self.repeat:
            data["repeat"] = True
        return data


@dataclass(frozen=True)
class Plan:
    steps: tuple[PlanStep, ...]  # in the order given

    def __post_init__(self) -> None:
        if len(self._by_id) != len(self.steps):
            raise ValueError(f"a plan's step ids must be unique, got {list(self.ids)}")

    @cached_property
    def _by_id(self) -> dict[int, PlanStep]:
        return {step.id: step for step in self.steps}

    @property
    def ids(self) -> tuple[int, ...]:
        """Step ids in the order given."""
        return tuple(step.id for step in self.steps)

    def step(self, step_id: int) -> PlanStep:
        """The step with this id; KeyError if there is none."""
        try:
            return self._by_id[step_id]
        except KeyError:
            raise KeyError(f"the plan has no step {step_id}") from None

    def to_json(self) -> dict[str, Any]:
        """The plan as the planner writes it: {"steps": [...]}."""
        return {"steps": [step.to_json() for step in self.steps]}


@dataclass(frozen=True)
class Problem:
    step_id: int | None  # None for plan-wide problems
    message: str

    def __str__(self) -> str:
        return self.message if self.step_id is None else f"step {self.step_id}: {self.message}"


class PlanParseError(ValueError):
    """The planner's text holds no usable JSON object; the message says what is wrong."""


class PlanInvalid(ValueError):
    """The plan breaks one or more rules; every problem found is listed."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("; ".join(str(problem) for problem in self.problems))
