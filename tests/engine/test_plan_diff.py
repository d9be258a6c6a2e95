"""plan_diff and reused_results: what a replan added, removed, changed or kept, or reused."""

from types import SimpleNamespace

from plans.engine.plan_diff import (
    ADDED,
    CHANGED,
    REMOVED,
    UNCHANGED,
    PlanDiff,
    plan_diff,
    reused_results,
)


def step(step_id, tool, **args):
    return SimpleNamespace(step_id=step_id, tool=tool, args=args)


def event(kind, **payload):
    return SimpleNamespace(kind=kind, payload=payload)


def test_each_step_id_of_either_version_is_marked_with_how_it_changed():
    old = [step(1, "price", item="a"), step(2, "price", item="b"), step(3, "calculator", e="1")]
    new = [step(1, "price", item="a"), step(2, "price", item="c"), step(4, "search", q="x")]

    changes = plan_diff(old, new)

    assert [(c.step_id, c.change) for c in changes] == [
        (1, UNCHANGED),
        (2, CHANGED),
        (3, REMOVED),
        (4, ADDED),
    ]


def test_a_changed_step_carries_its_old_and_new_arguments():
    (change,) = plan_diff([step(2, "price", item="b")], [step(2, "price", item="c")])

    assert change.old_args == {"item": "b"}
    assert change.new_args == {"item": "c"}
    assert change.args_changed
    assert not change.tool_changed


def test_a_different_tool_with_the_same_arguments_is_a_change():
    (change,) = plan_diff([step(1, "price", item="a")], [step(1, "search", item="a")])

    assert change.change == CHANGED
    assert change.tool_changed
    assert not change.args_changed
    assert (change.old_tool, change.new_tool) == ("price", "search")


def test_added_and_removed_steps_have_only_the_side_they_exist_on():
    added, removed = plan_diff([step(2, "echo", text="gone")], [step(1, "echo", text="new")])

    assert (added.change, added.old_tool, added.new_args) == (ADDED, None, {"text": "new"})
    assert (removed.change, removed.new_tool, removed.old_args) == (
        REMOVED,
        None,
        {"text": "gone"},
    )


def test_a_reused_result_is_reported_on_the_new_step_only():
    changes = plan_diff(
        [step(1, "price", item="a"), step(2, "price", item="b")],
        [step(1, "price", item="a")],
        reused_from={1: "plan v1 step 1", 2: "plan v1 step 2"},
    )

    assert [(c.step_id, c.reused_from) for c in changes] == [(1, "plan v1 step 1"), (2, "")]


def test_identical_versions_are_all_unchanged_and_empty_ones_are_empty():
    same = [step(1, "price", item="a"), step(2, "calculator", expression="{{1}}*2")]

    assert {c.change for c in plan_diff(same, list(same))} == {UNCHANGED}
    assert plan_diff([], []) == []


def test_the_summary_counts_each_kind_of_change():
    diff = PlanDiff(
        old_version=1,
        new_version=2,
        changes=plan_diff([step(1, "a"), step(2, "b")], [step(1, "a"), step(3, "c")]),
    )

    assert diff.summary == {ADDED: 1, REMOVED: 1, CHANGED: 0, UNCHANGED: 1}
    assert diff.summary_text == "1 added · 1 removed · 1 unchanged"


def test_reused_results_attributes_each_reuse_to_the_plan_version_created_before_it():
    events = [
        event("plan_created", version=1),
        event("step_finished", step=1, status="succeeded", result=10),
        event("step_finished", step=2, status="failed", error="boom"),
        event("plan_created", version=2),
        event("step_finished", step=1, status="succeeded", reused_from="plan v1 step 1"),
        event("step_finished", step=2, status="succeeded", result=3),
        event("plan_created", version=3),
        event("step_finished", step=5, status="succeeded", reused_from="step 4"),
    ]

    assert reused_results(events) == {2: {1: "plan v1 step 1"}, 3: {5: "step 4"}}


def effect(step_id, status, depends_on=(), item="a", **extra):
    return SimpleNamespace(
        step_id=step_id,
        tool="issue_refund",
        args={"item": item},
        destructive=True,
        status=status,
        depends_on=list(depends_on),
        reused_from="",
        **extra,
    )


def test_an_unchanged_effect_done_in_the_old_version_is_expected_not_to_be_made_again():
    old = [step(1, "price", item="a"), effect(2, "succeeded", [1]), effect(3, "failed", item="b")]
    old[0].depends_on = []
    new = [step(1, "price", item="a"), effect(2, "pending", [1]), effect(3, "pending", item="b")]
    new[0].depends_on = []

    changes = {c.step_id: c for c in plan_diff(old, new, old_version=1)}
    assert changes[2].done_before == "plan v1 step 2"
    assert changes[3].done_before == ""  # it did not act: it will be asked for and made again

    new[0] = step(1, "price", item="changed")
    new[0].depends_on = []
    assert {c.step_id: c.done_before for c in plan_diff(old, new, old_version=1)}[2] == ""
    marked = [new[0], effect(2, "pending", [1], repeat=True), new[2]]
    old[0] = step(1, "price", item="changed")
    old[0].depends_on = []
    assert {c.step_id: c.done_before for c in plan_diff(old, marked, old_version=1)}[2] == ""
    assert plan_diff(old, new)[1].done_before == ""  # no old version given: no expectation
