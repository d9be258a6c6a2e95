"""The dependency graph of a plan: order, depth, reachability and cycles.

Edges point from a step to the steps it depends on, so a cycle [1, 2, 1] reads
"1 depends on 2, which depends on 1". Every function here runs in O(V + E) (plus sorting).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from plans.engine.plan import Plan


def dependants_of(plan: Plan) -> dict[int, list[int]]:
    """For each step id, the ids of the steps that depend on it directly, ascending."""
    dependants: dict[int, list[int]] = {step_id: [] for step_id in plan.ids}
    for step in plan.steps:
        for dependency in set(step.depends_on):
            if dependency in dependants:
                dependants[dependency].append(step.id)
    for ids in dependants.values():
        ids.sort()
    return dependants


def topological_order(plan: Plan, dependants: Mapping[int, list[int]] | None = None) -> list[int]:
    """Step ids, each after its dependencies; ValueError naming a cycle if there is one.

    dependants: what dependants_of(plan) returns, when the caller already has it.
    """
    if dependants is None:
        dependants = dependants_of(plan)
    waiting_on = {step.id: len(set(step.depends_on)) for step in plan.steps}
    ready = deque(sorted(step_id for step_id, count in waiting_on.items() if count == 0))
    order: list[int] = []
    while ready:
        step_id = ready.popleft()
        order.append(step_id)
        for dependant in dependants[step_id]:
            waiting_on[dependant] -= 1
            if waiting_on[dependant] == 0:
                ready.append(dependant)
    if len(order) < len(plan.steps):
        cycle = find_cycle({step.id: step.depends_on for step in plan.steps})
        if cycle is None:
            raise ValueError("the plan depends on steps it does not have")
        raise ValueError(f"the plan is not acyclic: {describe_cycle(cycle)}")
    return order


def depths(plan: Plan) -> dict[int, int]:
    """Each step's depth: 1 for steps without dependencies, else one more than its deepest."""
    depth: dict[int, int] = {}
    for step_id in topological_order(plan):
        depth[step_id] = 1 + max((depth[d] for d in plan.step(step_id).depends_on), default=0)
    return depth


def rounds(plan: Plan) -> list[list[int]]:
    """Step ids grouped by depth, shallowest first, each group ascending."""
    grouped: dict[int, list[int]] = {}
    for step_id, depth in depths(plan).items():
        grouped.setdefault(depth, []).append(step_id)
    return [sorted(grouped[depth]) for depth in sorted(grouped)]


def critical_path(plan: Plan, durations: Mapping[int, float]) -> float:
    """The longest sum of durations along a dependency chain; a missing duration counts as 0."""
    finish: dict[int, float] = {}
    for step_id in topological_order(plan):
        started = max((finish[d] for d in plan.step(step_id).depends_on), default=0.0)
        finish[step_id] = started + durations.get(step_id, 0.0)
    return max(finish.values(), default=0.0)


def ancestors(plan: Plan, step_id: int) -> set[int]:
    """The steps step_id depends on, directly or transitively."""
    return _reachable(step_id, {step.id: step.depends_on for step in plan.steps})


def descendants(plan: Plan, step_id: int) -> set[int]:
    """The steps that depend on step_id, directly or transitively."""
    return _reachable(step_id, dependants_of(plan))


def _reachable(start: int, edges: Mapping[int, Iterable[int]]) -> set[int]:
    seen: set[int] = set()
    pending = list(edges.get(start, ()))
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending.extend(edges.get(node, ()))
    return seen


def find_cycle(edges: Mapping[int, Iterable[int]]) -> list[int] | None:
    """A cycle such as [1, 2, 1] (smallest id first), or None; edges to absent nodes are ignored."""
    cycles = find_cycles(edges)
    return cycles[0] if cycles else None


def find_cycles(edges: Mapping[int, Iterable[int]]) -> list[list[int]]:
    """One shortest cycle through the smallest node of each cyclic strongly connected component.

    Components are ordered by their smallest node; edges to nodes absent from edges are ignored.
    """
    graph = {node: sorted(set(targets) & edges.keys()) for node, targets in edges.items()}
    cycles = []
    for component in _strongly_connected_components(graph):
        start = min(component)
        if len(component) > 1 or start in graph[start]:
            cycles.append(_shortest_cycle_through(start, graph, component))
    return sorted(cycles)


def describe_cycle(cycle: list[int]) -> str:
    """A cycle as text: "cycle: 1 -> 2 -> 1"."""
    return "cycle: " + " -> ".join(str(node) for node in cycle)


def _strongly_connected_components(graph: Mapping[int, list[int]]) -> list[set[int]]:
    # Kosaraju's algorithm, iterative so that long chains do not exhaust the Python stack.
    finished: list[int] = []
    visited: set[int] = set()
    for root in sorted(graph):
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(graph[root]))]
        while stack:
            node, targets = stack[-1]
            target = next((t for t in targets if t not in visited), None)
            if target is None:
                stack.pop()
                finished.append(node)
            else:
                visited.add(target)
                stack.append((target, iter(graph[target])))
    reverse: dict[int, list[int]] = {node: [] for node in graph}
    for node, successors in graph.items():
        for target in successors:
            reverse[target].append(node)
    components = []
    assigned: set[int] = set()
    for root in reversed(finished):
        if root not in assigned:
            component = _reachable_avoiding(root, reverse, assigned)
            assigned |= component
            components.append(component)
    return components


def _reachable_avoiding(start: int, edges: Mapping[int, list[int]], avoid: set[int]) -> set[int]:
    reached = {start}
    pending = [start]
    while pending:
        for target in edges[pending.pop()]:
            if target not in reached and target not in avoid:
                reached.add(target)
                pending.append(target)
    return reached


def _shortest_cycle_through(
    start: int, graph: Mapping[int, list[int]], within: set[int]
) -> list[int]:
    # Breadth-first from start back to start, staying inside start's component.
    came_from: dict[int, int] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in graph[node]:
            if target == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                return [*reversed(chain), start]
            if target in within and target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError("a strongly connected component always has a cycle through each node")
