"""Properties over random plans: dependencies are respected, cycles caught, junk refused."""

import json
from itertools import pairwise

from engine_catalog import CATALOG
from hypothesis import given, settings
from hypothesis import strategies as st

from plans.engine import (
    Outcome,
    PlanInvalid,
    PlanParseError,
    Scheduler,
    depths,
    parse_planner_output,
    validate_plan,
)

# Moderate counts keep the whole engine suite to a few seconds.
QUICK = settings(max_examples=150, deadline=None)


@st.composite
def acyclic_plans(draw, min_steps: int = 1, max_steps: int = 12) -> dict:
    """A random DAG: step i may depend only on earlier steps; then ids and order are shuffled."""
    count = draw(st.integers(min_steps, max_steps))
    earlier = [
        draw(st.sets(st.integers(0, index - 1), max_size=4)) if index else set()
        for index in range(count)
    ]
    ids = draw(st.lists(st.integers(1, 10_000), min_size=count, max_size=count, unique=True))
    order = draw(st.permutations(range(count)))
    steps = []
    for index in order:
        depends_on = [ids[j] for j in sorted(earlier[index])]
        args = {"inputs": [f"{{{{{d}}}}}" for d in depends_on]}  # placeholders for direct deps
        steps.append({"id": ids[index], "tool": "noop", "args": args, "depends_on": depends_on})
    return {"steps": steps}


@st.composite
def cyclic_plans(draw) -> dict:
    """A random DAG with one back edge closing a cycle of direct dependencies."""
    plan = draw(acyclic_plans(min_steps=2))
    steps = plan["steps"]
    first, second = draw(st.lists(st.sampled_from(steps), min_size=2, max_size=2, unique_by=id))
    if second["id"] not in first["depends_on"]:
        first["depends_on"].append(second["id"])
    if first["id"] not in second["depends_on"]:
        second["depends_on"].append(first["id"])
    return plan


@QUICK
@given(acyclic_plans())
def test_every_acyclic_plan_validates_with_each_step_deeper_than_its_dependencies(data):
    plan = validate_plan(data, CATALOG, max_steps=None)

    depth = depths(plan)
    for step in plan.steps:
        assert all(depth[step.id] > depth[d] for d in step.depends_on)


@QUICK
@given(acyclic_plans(), st.booleans(), st.data())
def test_a_simulated_run_starts_no_step_early_and_finishes_every_step_once(
    data, run_dependants_of_failures, choices
):
    plan = validate_plan(data, CATALOG, max_steps=None)
    scheduler = Scheduler(plan, run_dependants_of_failures=run_dependants_of_failures)
    outcomes: dict[int, Outcome] = {}
    running: list[int] = []
    while not scheduler.done:
        limit = choices.draw(st.none() | st.integers(1, 3), label="limit")
        taken = scheduler.take_ready(limit=limit)
        assert limit is None or len(taken) <= limit
        for step_id in taken:
            assert step_id not in outcomes and step_id not in running
            dependencies = [outcomes.get(d) for d in plan.step(step_id).depends_on]
            assert None not in dependencies, "started before its dependencies finished"
            if not run_dependants_of_failures:
                assert set(dependencies) <= {Outcome.SUCCEEDED}
            running.append(step_id)
        assert running, "nothing is running, yet the run is not done"
        step_id = running.pop(choices.draw(st.integers(0, len(running) - 1), label="which"))
        if choices.draw(st.integers(0, 9), label="park") == 9:
            scheduler.release(step_id)  # parked, to be taken again
            continue
        outcome = choices.draw(
            st.sampled_from([Outcome.SUCCEEDED] * 3 + [Outcome.FAILED, Outcome.BLOCKED])
        )
        outcomes[step_id] = outcome
        for skipped_id, reason in scheduler.finish(step_id, outcome):
            assert skipped_id not in outcomes and skipped_id not in running
            cause = int(reason.removeprefix("skipped: depends on step ").split(",")[0])
            assert cause in plan.step(skipped_id).depends_on
            assert outcomes[cause] is not Outcome.SUCCEEDED
            outcomes[skipped_id] = Outcome.SKIPPED

    assert outcomes.keys() == set(plan.ids)
    assert all(scheduler.outcome(step_id) is outcome for step_id, outcome in outcomes.items())
    if run_dependants_of_failures:
        assert Outcome.SKIPPED not in outcomes.values()


@QUICK
@given(acyclic_plans())
def test_an_acyclic_plan_where_everything_succeeds_runs_every_step(data):
    scheduler = Scheduler(validate_plan(data, CATALOG, max_steps=None))
    finished = []
    while not scheduler.done:
        ready = scheduler.take_ready()
        assert ready, "the run stalled"
        for step_id in ready:
            assert scheduler.finish(step_id, Outcome.SUCCEEDED) == []
            finished.append(step_id)

    assert sorted(finished) == sorted(step["id"] for step in data["steps"])


@QUICK
@given(cyclic_plans())
def test_every_cyclic_plan_is_refused_with_a_real_cycle(data):
    try:
        validate_plan(data, CATALOG, max_steps=None)
    except PlanInvalid as invalid:
        cycles = [p.message for p in invalid.problems if p.message.startswith("cycle: ")]
    else:
        raise AssertionError("a cyclic plan was accepted")

    assert cycles
    depends_on = {step["id"]: step["depends_on"] for step in data["steps"]}
    for cycle in cycles:
        nodes = [int(node) for node in cycle.removeprefix("cycle: ").split(" -> ")]
        assert nodes[0] == nodes[-1] == min(nodes)
        assert all(b in depends_on[a] for a, b in pairwise(nodes))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["{{1}}", "{{2}} and {{9}}", "{{ 3 }}", "price", "noop"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)

step_ids = st.integers(-2, 6) | st.sampled_from([True, 1.0, "1", None, 2**40, 10**30])

plan_like_steps = st.fixed_dictionaries(
    {},
    optional={
        "id": step_ids,
        "tool": st.sampled_from(sorted(CATALOG)) | json_values,
        "args": st.dictionaries(
            st.sampled_from(["item", "expression", "amount", "currency", "nights", "x"]),
            json_values,
            max_size=3,
        )
        | json_values,
        "depends_on": st.lists(step_ids, max_size=4) | json_values,
    },
)

plan_like = st.fixed_dictionaries(
    {"steps": st.lists(plan_like_steps | json_values, max_size=6) | json_values},
    optional={"reason": json_values},
)


def validate_or_refuse(data, max_steps) -> None:
    """Validation either gives a plan or raises PlanInvalid; anything else fails the test."""
    try:
        validate_plan(data, CATALOG, max_steps=max_steps)
    except PlanInvalid as invalid:
        assert invalid.problems
        assert all(str(problem) for problem in invalid.problems)


@QUICK
@given(json_values | plan_like, st.none() | st.integers(0, 6))
def test_validation_of_arbitrary_json_only_ever_raises_plan_invalid(data, max_steps):
    validate_or_refuse(data, max_steps)


@QUICK
@given(st.text() | st.builds(json.dumps, json_values | plan_like))
def test_parsing_and_validating_arbitrary_text_only_ever_raise_their_own_errors(text):
    try:
        data = parse_planner_output(text)
    except PlanParseError as error:
        assert str(error).startswith("planner output ")
        return
    assert isinstance(data, dict)
    validate_or_refuse(data, max_steps=5)


@QUICK
@given(st.text(max_size=40), plan_like, st.text(max_size=40))
def test_one_object_inside_prose_is_found(before, data, after):
    before, after = before.replace("{", "("), after.replace("{", "(")

    found = parse_planner_output(f"{before}\n```json\n{json.dumps(data)}\n```\n{after}")

    assert json.dumps(found) == json.dumps(data)  # as text, since NaN != NaN
