"""Which steps may start now: Kahn's algorithm, advanced one finished step at a time.

Each step's finish visits its direct dependants once, so a whole run costs O(V + E) graph
work, plus O(log V) per ready step for handing them out longest-chain first.
"""

from __future__ import annotations

import heapq
from collections import deque
from enum import StrEnum

from plans.engine.graph import dependants_of, topological_order
from plans.engine.plan import Plan


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"
    SKIPPED = "skipped"


_FINISHED_AS = {
    Outcome.SUCCEEDED: "succeeded",
    Outcome.FAILED: "failed",
    Outcome.BLOCKED: "was blocked",
    Outcome.SKIPPED: "was skipped",
}


class Scheduler:
    """Hands out steps whose dependencies have finished, and skips those that can no longer run.

    A step runs only after every dependency succeeded; with run_dependants_of_failures it runs
    once every dependency finished, whatever the outcome, and nothing is skipped.
    """

    def __init__(self, plan: Plan, *, run_dependants_of_failures: bool = False) -> None:
        _require_known_dependencies(plan)
        self._run_dependants_of_failures = run_dependants_of_failures
        self._step_count = len(plan.steps)
        self._dependants = dependants_of(plan)
        self._unfinished_dependencies = {step.id: len(set(step.depends_on)) for step in plan.steps}
        self._outcomes: dict[int, Outcome] = {}
        self._running: set[int] = set()
        # Steps a restored unsuccessful dependency keeps from ever running.
        self._held: set[int] = set()
        self._ready: set[int] = set()
        # (-chain, id): may hold ids no longer in _ready, skipped when popped.
        self._ready_heap: list[tuple[int, int]] = []
        self._chain = _chain_lengths(plan, self._dependants)  # ValueError naming a cycle
        for step_id, count in self._unfinished_dependencies.items():
            if count == 0:
                self._make_ready(step_id)

    @property
    def done(self) -> bool:
        """Whether every step has finished."""
        return len(self._outcomes) == self._step_count

    @property
    def has_ready(self) -> bool:
        """Whether a step waits to be taken."""
        return bool(self._ready)

    @property
    def running(self) -> frozenset[int]:
        """Steps taken and not yet finished."""
        return frozenset(self._running)

    def outcome(self, step_id: int) -> Outcome | None:
        """How the step finished, or None while it has not."""
        self._require_known(step_id)
        return self._outcomes.get(step_id)

    def restore(self, step_id: int, outcome: Outcome) -> None:
        """Record a step that finished before a resume, without skipping anything.

        Restore every finished step, including dependants skipped because of a failure: a
        step whose restored dependency did not succeed is never handed out.
        """
        self._require_known(step_id)
        if step_id in self._outcomes or step_id in self._running:
            raise ValueError(
                f"step {step_id} cannot be restored: it was already {self._state(step_id)}"
            )
        outcome = Outcome(outcome)
        self._ready.discard(step_id)
        self._outcomes[step_id] = outcome
        for dependant in self._dependants[step_id]:
            if outcome is not Outcome.SUCCEEDED and not self._run_dependants_of_failures:
                self._held.add(dependant)
            self._dependency_finished(dependant)

    def take_ready(self, limit: int | None = None) -> list[int]:
        """Up to limit ready steps (all if None), now marked started.

        The steps with the longest chain of dependants after them go first (then lower ids):
        those are what the run's end waits on, so they should not queue behind the others for
        a free slot or for the moment it takes to start each call.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        taken: list[int] = []
        while self._ready_heap and (limit is None or len(taken) < limit):
            _, step_id = heapq.heappop(self._ready_heap)
            if step_id in self._ready:
                self._ready.remove(step_id)
                taken.append(step_id)
        self._running.update(taken)
        return taken

    def release(self, step_id: int) -> None:
        """Put a taken step back among the ready ones, e.g. while it waits for approval."""
        self._require_running(step_id)
        self._running.remove(step_id)
        self._make_ready(step_id)

    def finish(self, step_id: int, outcome: Outcome) -> list[tuple[int, str]]:
        """Record a taken step's outcome; returns the steps now skipped because of it, with reasons.

        Skips are transitive and listed in the order they happen, each naming the step it waited on.
        """
        self._require_running(step_id)
        self._running.remove(step_id)
        self._outcomes[step_id] = Outcome(outcome)
        skipped: list[tuple[int, str]] = []
        finished = deque([step_id])
        while finished:
            cause = finished.popleft()
            for dependant in self._dependants[cause]:
                if self._must_skip(dependant, self._outcomes[cause]):
                    self._ready.discard(dependant)
                    self._outcomes[dependant] = Outcome.SKIPPED
                    skipped.append((dependant, self._skip_reason(cause)))
                    finished.append(dependant)
                self._dependency_finished(dependant)
        return skipped

    def _must_skip(self, step_id: int, dependency_outcome: Outcome) -> bool:
        # A dependant cannot be running yet: it waits for this very dependency.
        return (
            dependency_outcome is not Outcome.SUCCEEDED
            and not self._run_dependants_of_failures
            and step_id not in self._outcomes
        )

    def _skip_reason(self, cause: int) -> str:
        return f"skipped: depends on step {cause}, which {_FINISHED_AS[self._outcomes[cause]]}"

    def _dependency_finished(self, step_id: int) -> None:
        self._unfinished_dependencies[step_id] -= 1
        if (
            self._unfinished_dependencies[step_id] == 0
            and step_id not in self._held
            and step_id not in self._outcomes
        ):
            self._make_ready(step_id)

    def _make_ready(self, step_id: int) -> None:
        self._ready.add(step_id)
        heapq.heappush(self._ready_heap, (-self._chain[step_id], step_id))

    def _state(self, step_id: int) -> str:
        if step_id in self._outcomes:
            return f"finished ({self._outcomes[step_id]})"
        return "started" if step_id in self._running else "waiting"

    def _require_known(self, step_id: int) -> None:
        if step_id not in self._dependants:
            raise KeyError(f"the plan has no step {step_id}")

    def _require_running(self, step_id: int) -> None:
        self._require_known(step_id)
        if step_id not in self._running:
            raise ValueError(f"step {step_id} is not running: it is {self._state(step_id)}")


def _chain_lengths(plan: Plan, dependants: dict[int, list[int]]) -> dict[int, int]:
    """Per step, how many steps the longest chain starting at it holds (itself included).

    Raises ValueError naming a cycle if the plan has one (no order exists then).
    """
    chain: dict[int, int] = {}
    for step_id in reversed(topological_order(plan, dependants)):
        chain[step_id] = 1 + max((chain[d] for d in dependants[step_id]), default=0)
    return chain


def _require_known_dependencies(plan: Plan) -> None:
    known = set(plan.ids)
    for step in plan.steps:
        if not known.issuperset(step.depends_on):
            missing = sorted(set(step.depends_on) - known)
            raise ValueError(f"step {step.id} depends on steps the plan lacks: {missing}")
