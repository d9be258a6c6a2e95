import pytest

from plans.engine import Outcome, Plan, PlanStep, Scheduler


def plan_of(dependencies: dict[int, list[int]]) -> Plan:
    """A plan from {step id: ids it depends on}, in the order given."""
    return Plan(
        steps=tuple(PlanStep(i, "noop", {}, tuple(deps)) for i, deps in dependencies.items())
    )


SEED = plan_of({1: [], 2: [], 3: [1, 2]})
# 1 <- 2 <- 3, and 4 depends on 2 as well; 5 is independent.
CHAIN = plan_of({1: [], 2: [1], 3: [2], 4: [2], 5: []})


def test_the_seed_plan_runs_its_two_prices_then_the_sum():
    scheduler = Scheduler(SEED)

    assert scheduler.take_ready() == [1, 2]
    assert scheduler.running == frozenset({1, 2})
    assert scheduler.finish(2, Outcome.SUCCEEDED) == []
    assert scheduler.take_ready() == []
    assert scheduler.finish(1, Outcome.SUCCEEDED) == []
    assert scheduler.take_ready() == [3]
    assert not scheduler.done
    scheduler.finish(3, Outcome.SUCCEEDED)
    assert scheduler.done
    assert scheduler.take_ready() == []


def test_take_ready_respects_its_limit_and_keeps_the_rest_for_later_in_id_order():
    scheduler = Scheduler(plan_of({5: [], 3: [], 9: [], 1: []}))

    assert scheduler.take_ready(limit=2) == [1, 3]
    assert scheduler.take_ready(limit=0) == []
    assert scheduler.take_ready(limit=1) == [5]
    assert scheduler.take_ready() == [9]
    assert scheduler.running == frozenset({1, 3, 5, 9})


def test_ready_steps_heading_the_longest_chains_go_first():
    # 3 heads 3 -> 4 -> 5; 1 heads 1 -> 2; 6 leads nowhere. Equal chains go by id.
    scheduler = Scheduler(plan_of({1: [], 2: [1], 3: [], 4: [3], 5: [4], 6: [], 7: []}))

    assert scheduler.take_ready(limit=2) == [3, 1]
    assert scheduler.take_ready() == [6, 7]
    scheduler.finish(1, Outcome.SUCCEEDED)
    scheduler.finish(3, Outcome.SUCCEEDED)
    assert scheduler.take_ready() == [4, 2]


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="must not be negative"):
        Scheduler(SEED).take_ready(limit=-1)


def test_a_failure_skips_its_dependants_transitively_with_reasons():
    scheduler = Scheduler(CHAIN)
    scheduler.take_ready()

    skipped = scheduler.finish(1, Outcome.FAILED)

    assert skipped == [
        (2, "skipped: depends on step 1, which failed"),
        (3, "skipped: depends on step 2, which was skipped"),
        (4, "skipped: depends on step 2, which was skipped"),
    ]
    assert [scheduler.outcome(i) for i in (1, 2, 3, 4, 5)] == [
        Outcome.FAILED,
        Outcome.SKIPPED,
        Outcome.SKIPPED,
        Outcome.SKIPPED,
        None,
    ]
    assert scheduler.running == frozenset({5})
    scheduler.finish(5, Outcome.SUCCEEDED)
    assert scheduler.done


def test_a_blocked_step_skips_its_dependants_saying_it_was_blocked():
    scheduler = Scheduler(SEED)
    scheduler.take_ready()

    assert scheduler.finish(2, Outcome.BLOCKED) == [
        (3, "skipped: depends on step 2, which was blocked")
    ]


def test_a_step_is_skipped_as_soon_as_one_dependency_fails_and_never_runs_later():
    scheduler = Scheduler(SEED)
    scheduler.take_ready()

    assert scheduler.finish(1, Outcome.FAILED) == [(3, "skipped: depends on step 1, which failed")]
    assert scheduler.finish(2, Outcome.SUCCEEDED) == []
    assert scheduler.take_ready() == []
    assert scheduler.done


def test_a_step_reachable_twice_from_a_failure_is_skipped_once():
    scheduler = Scheduler(plan_of({1: [], 2: [1], 3: [1], 4: [2, 3]}))
    scheduler.take_ready()

    skipped = scheduler.finish(1, Outcome.FAILED)

    assert [step_id for step_id, _ in skipped] == [2, 3, 4]


def test_dependants_of_failures_run_when_asked_to_and_nothing_is_skipped():
    scheduler = Scheduler(CHAIN, run_dependants_of_failures=True)
    scheduler.take_ready()

    assert scheduler.finish(1, Outcome.FAILED) == []
    assert scheduler.take_ready() == [2]
    assert scheduler.finish(2, Outcome.BLOCKED) == []
    assert scheduler.take_ready() == [3, 4]


def test_restored_steps_count_as_finished_and_release_their_dependants():
    scheduler = Scheduler(SEED)

    scheduler.restore(1, Outcome.SUCCEEDED)
    scheduler.restore(2, Outcome("succeeded"))

    assert scheduler.take_ready() == [3]
    assert scheduler.outcome(1) is Outcome.SUCCEEDED


def test_restoring_a_failure_holds_its_dependants_without_skipping_them():
    scheduler = Scheduler(CHAIN)

    scheduler.restore(1, Outcome.FAILED)

    assert scheduler.take_ready() == [5]
    assert scheduler.outcome(2) is None
    for step_id in (2, 3, 4):
        scheduler.restore(step_id, Outcome.SKIPPED)
    scheduler.finish(5, Outcome.SUCCEEDED)
    assert scheduler.done


@pytest.mark.parametrize("order", [(1, 2, 5), (5, 2, 1), (2, 5, 1)])
def test_restoring_in_any_order_gives_the_same_ready_steps(order):
    scheduler = Scheduler(CHAIN)

    for step_id in order:
        scheduler.restore(step_id, Outcome.SUCCEEDED)

    assert scheduler.take_ready() == [3, 4]


def test_a_step_cannot_be_restored_twice_or_while_running():
    scheduler = Scheduler(SEED)
    scheduler.restore(1, Outcome.SUCCEEDED)
    scheduler.take_ready()

    with pytest.raises(ValueError, match=r"step 1 cannot be restored: .* finished \(succeeded\)"):
        scheduler.restore(1, Outcome.SUCCEEDED)
    with pytest.raises(ValueError, match="step 2 cannot be restored: it was already started"):
        scheduler.restore(2, Outcome.SUCCEEDED)


def test_a_released_step_is_ready_again_and_no_longer_running():
    scheduler = Scheduler(SEED)
    scheduler.take_ready()

    scheduler.release(2)

    assert scheduler.running == frozenset({1})
    assert scheduler.take_ready() == [2]
    assert scheduler.running == frozenset({1, 2})


def test_only_running_steps_can_be_finished_or_released():
    scheduler = Scheduler(SEED)

    with pytest.raises(ValueError, match="step 3 is not running: it is waiting"):
        scheduler.finish(3, Outcome.SUCCEEDED)
    with pytest.raises(ValueError, match="step 1 is not running"):
        scheduler.release(1)
    with pytest.raises(KeyError, match="no step 8"):
        scheduler.finish(8, Outcome.SUCCEEDED)
    with pytest.raises(KeyError, match="no step 8"):
        scheduler.outcome(8)


def test_a_plan_that_cannot_run_is_refused_up_front():
    with pytest.raises(ValueError, match=r"cycle: 1 -> 2 -> 1"):
        Scheduler(plan_of({1: [2], 2: [1]}))
    with pytest.raises(ValueError, match=r"step 1 depends on steps the plan lacks: \[7\]"):
        Scheduler(plan_of({1: [7]}))


def test_a_large_fan_out_and_fan_in_runs_through():
    # 1 fans out to 2..n, which all fan in to n + 1: every edge is visited once per finish.
    n = 20_000
    dependencies = {1: []} | {i: [1] for i in range(2, n + 1)} | {n + 1: list(range(2, n + 1))}
    scheduler = Scheduler(plan_of(dependencies))

    finished = 0
    while not scheduler.done:
        for step_id in scheduler.take_ready(limit=1000):
            scheduler.finish(step_id, Outcome.SUCCEEDED)
            finished += 1

    assert finished == n + 1
