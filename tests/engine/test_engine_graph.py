import pytest

from plans.engine import (
    Plan,
    PlanStep,
    ancestors,
    critical_path,
    depths,
    descendants,
    find_cycle,
    find_cycles,
    rounds,
    topological_order,
)


def plan_of(dependencies: dict[int, list[int]]) -> Plan:
    """A plan from {step id: ids it depends on}, in the order given."""
    return Plan(
        steps=tuple(PlanStep(i, "noop", {}, tuple(deps)) for i, deps in dependencies.items())
    )


# 4 depends on 2 and 3, which both depend on 1; 5 stands alone.
DIAMOND = plan_of({4: [2, 3], 2: [1], 3: [1], 1: [], 5: []})


def test_roots_have_depth_one_and_others_one_more_than_their_deepest_dependency():
    assert depths(DIAMOND) == {1: 1, 5: 1, 2: 2, 3: 2, 4: 3}


def test_rounds_group_steps_by_depth_in_ascending_id_order():
    assert rounds(DIAMOND) == [[1, 5], [2, 3], [4]]


def test_the_topological_order_puts_every_step_after_its_dependencies():
    order = topological_order(DIAMOND)

    assert sorted(order) == [1, 2, 3, 4, 5]
    for step in DIAMOND.steps:
        assert all(order.index(d) < order.index(step.id) for d in step.depends_on)


def test_ordering_a_cyclic_plan_raises_a_value_error_naming_the_cycle():
    with pytest.raises(ValueError, match=r"cycle: 1 -> 2 -> 1"):
        depths(plan_of({1: [2], 2: [1], 3: []}))


def test_ordering_a_plan_with_a_missing_dependency_raises_a_value_error():
    with pytest.raises(ValueError, match="depends on steps it does not have"):
        rounds(plan_of({1: [7]}))


def test_ancestors_and_descendants_are_transitive():
    assert ancestors(DIAMOND, 4) == {1, 2, 3}
    assert ancestors(DIAMOND, 1) == set()
    assert descendants(DIAMOND, 1) == {2, 3, 4}
    assert descendants(DIAMOND, 5) == set()


def test_the_critical_path_is_the_longest_chain_of_durations():
    durations = {1: 1.0, 2: 5.0, 3: 2.0, 4: 1.0, 5: 6.5}

    assert critical_path(DIAMOND, durations) == 7.0


def test_a_step_without_a_duration_counts_as_instant():
    assert critical_path(DIAMOND, {5: 0.5, 4: 0.25}) == 0.5
    assert critical_path(Plan(steps=()), {}) == 0.0


def test_an_acyclic_graph_has_no_cycle():
    assert find_cycle({1: [], 2: [1], 3: [1, 2]}) is None


def test_a_cycle_starts_and_ends_at_its_smallest_node():
    assert find_cycle({3: [1], 1: [2], 2: [3]}) == [1, 2, 3, 1]
    assert find_cycle({2: [1], 1: [2]}) == [1, 2, 1]


def test_a_self_loop_is_a_cycle_of_one():
    assert find_cycle({1: [], 4: [4]}) == [4, 4]


def test_the_shortest_cycle_through_the_smallest_node_is_chosen():
    # 1 -> 2 -> 3 -> 4 -> 1 and the shortcut 1 -> 4 -> 1.
    assert find_cycle({1: [2, 4], 2: [3], 3: [4], 4: [1]}) == [1, 4, 1]


def test_edges_to_absent_nodes_are_ignored():
    assert find_cycle({1: [2, 99], 2: [3]}) is None


def test_each_strongly_connected_component_yields_one_cycle():
    edges = {1: [2], 2: [1, 3], 3: [4], 4: [3], 5: [5], 6: [1]}

    assert find_cycles(edges) == [[1, 2, 1], [3, 4, 3], [5, 5]]


def test_a_long_chain_is_handled_without_recursion():
    chain = {i: [i + 1] for i in range(1, 20_000)} | {20_000: [1]}

    cycle = find_cycle(chain)

    assert cycle is not None
    assert (cycle[0], cycle[1], cycle[-2], cycle[-1], len(cycle)) == (1, 2, 20_000, 1, 20_001)
    assert (
        max(depths(plan_of({i: [i - 1] if i > 1 else [] for i in range(1, 20_001)})).values())
        == 20_000
    )
