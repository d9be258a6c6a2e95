"""The executor end to end through its real persistence: rounds, results, failures, events."""

import threading
import uuid

import pytest
from django.utils import timezone

from plans.models import Run, RunEvent, Step, ToolCall
from plans.runtime import recorder
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests import support_tools
from tests.engine.engine_catalog import SEED_PLAN

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def test_tools(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    support_tools.calls.clear()
    support_tools.parallel_barrier.reset()


def run_plan(author, steps, **options):
    run = run_create(author=author, goal_text="test goal", plan_data={"steps": steps}, **options)
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def steps_of(run):
    return {s.step_id: s for s in Step.objects.filter(plan__run=run)}


def test_the_seed_example_flows_results_through_placeholders(author):
    run = run_plan(author, SEED_PLAN["steps"])

    steps = steps_of(run)
    assert run.status == Run.Status.COMPLETED
    assert [steps[i].result for i in (1, 2, 3)] == [79900, 12900, 92800]
    assert steps[3].resolved_args == {"expression": "79900+12900"}
    assert [steps[i].round for i in (1, 2, 3)] == [1, 1, 2]
    assert run.model_call_count == 1  # the plan came from a file: only the answer


def test_independent_steps_run_at_the_same_time(author, test_tools):
    steps = [
        {"id": i, "tool": "meet", "args": {"label": f"s{i}"}, "depends_on": []} for i in (1, 2, 3)
    ]
    run = run_plan(author, steps)

    # The barrier only opens when all three calls are in flight together.
    assert {s.status for s in steps_of(run).values()} == {"succeeded"}


def test_a_step_never_starts_before_its_dependency_finished(author, test_tools):
    steps = [
        {"id": 1, "tool": "sleepy", "args": {"seconds": 0.05, "label": "a"}, "depends_on": []},
        {"id": 2, "tool": "sleepy", "args": {"seconds": 0.05, "label": "b"}, "depends_on": [1]},
        {"id": 3, "tool": "sleepy", "args": {"seconds": 0.05, "label": "c"}, "depends_on": [2]},
    ]
    run_plan(author, steps)

    spans = {label: (start, end) for label, start, end in support_tools.calls}
    assert spans["a"][1] <= spans["b"][0]
    assert spans["b"][1] <= spans["c"][0]


def test_a_failed_step_is_an_observation_and_its_dependants_are_skipped(author, test_tools):
    steps = [
        {"id": 1, "tool": "explode", "args": {"message": "warehouse offline"}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "got {{1}}"}, "depends_on": [1]},
        {"id": 3, "tool": "echo", "args": {"text": "after {{2}}"}, "depends_on": [2]},
        {"id": 4, "tool": "echo", "args": {"text": "independent"}, "depends_on": []},
    ]
    run = run_plan(author, steps)

    steps = steps_of(run)
    assert run.status == Run.Status.FAILED
    assert steps[1].status == "failed" and steps[1].error == "warehouse offline"
    assert steps[2].status == "skipped" and "step 1" in steps[2].error
    assert steps[3].status == "skipped"
    assert steps[4].status == "succeeded"
    assert run.answer  # the answer is still written, from what is known


def test_dependants_of_a_failure_can_run_with_the_error_text(author, test_tools):
    steps = [
        {"id": 1, "tool": "explode", "args": {"message": "warehouse offline"}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "got {{1}}"}, "depends_on": [1]},
    ]
    run = run_plan(author, steps, run_dependants_of_failures=True)

    assert steps_of(run)[2].result == "got warehouse offline"


def test_arguments_are_checked_again_after_substitution(author, test_tools):
    steps = [
        {"id": 1, "tool": "echo", "args": {"text": "not a number"}, "depends_on": []},
        {"id": 2, "tool": "sleepy", "args": {"seconds": "{{1}}"}, "depends_on": [1]},
    ]
    run = run_plan(author, steps)

    step = steps_of(run)[2]
    assert step.status == "failed"
    assert "seconds" in step.error
    assert not ToolCall.objects.filter(step=step).exists()


def test_a_field_placeholder_passes_on_part_of_a_result(author, test_tools):
    steps = [
        {"id": 1, "tool": "bulky", "args": {"chars": 3}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "got {{1.text}}"}, "depends_on": [1]},
    ]
    run = run_plan(author, steps)

    step = steps_of(run)[2]
    assert step.resolved_args == {"text": "got xxx"}
    assert step.result == "got xxx"


def test_a_field_missing_at_run_time_fails_the_step_naming_the_path_and_the_keys(
    author, test_tools
):
    steps = [
        {"id": 1, "tool": "bulky", "args": {"chars": 3}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "got {{1.txt}}"}, "depends_on": [1]},
    ]
    run = run_plan(author, steps)

    step = steps_of(run)[2]
    assert step.status == "failed"
    assert step.error == (
        "cannot resolve arguments: placeholder {{1.txt}}: step 1's result has no key 'txt' "
        "(its keys: text)"
    )
    assert not ToolCall.objects.filter(step=step).exists()


def test_every_step_and_round_is_recorded_as_events_with_contiguous_seq(author):
    run = run_plan(author, SEED_PLAN["steps"])

    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.kind for e in events]
    for kind in (
        "run_created",
        "plan_created",
        "run_started",
        "round_started",
        "step_started",
        "step_finished",
        "round_finished",
        "model_call",
        "answer_finished",
        "run_finished",
    ):
        assert kind in kinds, kind
    rounds = [(e.kind, e.payload["round"]) for e in events if e.kind.startswith("round_")]
    assert rounds == [
        ("round_started", 1),
        ("round_finished", 1),
        ("round_started", 2),
        ("round_finished", 2),
    ]
    assert ToolCall.objects.filter(run=run).count() == 3


def test_an_invalid_plan_file_ends_the_run_before_any_tool_runs(author):
    cyclic = [
        {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": [2]},
        {"id": 2, "tool": "price", "args": {"item": "AirPods 4"}, "depends_on": [1]},
    ]
    run = run_create(author=author, goal_text="cyclic", plan_data={"steps": cyclic})

    assert run.status == Run.Status.INVALID_PLAN
    assert any("cycle: 1 -> 2 -> 1" in p for p in run.plans.get().problems)
    assert advance_run(run.pk) == "busy"  # a finished run cannot be leased
    assert not ToolCall.objects.exists()


def test_a_step_interrupted_by_a_crash_runs_again_with_its_attempt_counted(author):
    run = run_create(author=author, goal_text="crash", plan_data=SEED_PLAN)
    plan = run.plans.get()
    # As if a worker died mid-call: step 1 was marked running and nothing else happened.
    Step.objects.filter(plan=plan, step_id=1).update(status="running", attempts=1)
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())

    advance_run(run.pk)

    step = Step.objects.get(plan=plan, step_id=1)
    assert step.status == "succeeded" and step.attempts == 2
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    assert RunEvent.objects.filter(run=run, kind="run_recovered").exists()


def test_a_tool_result_with_unstorable_characters_is_stored_with_them_escaped(author, settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    plan = {
        "steps": [
            {"id": 1, "tool": "mangled", "args": {"text": "ok"}},
            {"id": 2, "tool": "echo", "args": {"text": "got {{1}}"}, "depends_on": [1]},
        ]
    }
    run = run_create(author=author, goal_text="surrogates", plan_data=plan)

    assert advance_run(run.pk) == Run.Status.COMPLETED

    steps = {s.step_id: s for s in Step.objects.filter(plan__run=run)}
    assert steps[1].result == {"text": "ok\\udcff", "raw": "\\ud800\\u0000"}
    assert steps[2].result == 'got {"raw":"\\\\ud800\\\\u0000","text":"ok\\\\udcff"}'
    assert ToolCall.objects.get(step=steps[1]).result == steps[1].result


def test_a_nul_deep_inside_a_result_is_stored_escaped(author, settings):
    # PostgreSQL refuses NUL in jsonb: unescaped, the commit failed and the run could not end.
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    plan = {"steps": [{"id": 1, "tool": "with_nul", "args": {"text": "ok"}}]}
    run = run_create(author=author, goal_text="nul", plan_data=plan)

    assert advance_run(run.pk) == Run.Status.COMPLETED

    step = Step.objects.get(plan__run=run)
    assert step.result == {"text": "ok\\u0000", "list": ["\\u0000"]}
    assert ToolCall.objects.get(step=step).result == step.result


def test_a_result_larger_than_the_limit_fails_its_step_saying_so(author, settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    settings.AGENTSITE_TOOL_RESULT_MAX_CHARS = 1000
    plan = {
        "steps": [
            {"id": 1, "tool": "bulky", "args": {"chars": 980}},
            {"id": 2, "tool": "bulky", "args": {"chars": 1000}},
        ]
    }
    run = run_create(author=author, goal_text="big results", plan_data=plan)

    advance_run(run.pk)

    steps = {s.step_id: s for s in Step.objects.filter(plan__run=run)}
    assert steps[1].status == Step.Status.SUCCEEDED
    assert steps[2].status == Step.Status.FAILED and steps[2].result is None
    assert steps[2].error == (
        "the result is too large: 1,012 characters of JSON, at most 1,000 "
        "(AGENTSITE_TOOL_RESULT_MAX_CHARS)"
    )
    assert ToolCall.objects.get(step=steps[2]).error == steps[2].error


def test_a_step_that_ends_as_it_is_launched_still_lets_its_dependants_run(author, test_tools):
    steps = [
        {"id": 1, "tool": "echo", "args": {"text": "not a number"}, "depends_on": []},
        # Fails at launch: its resolved argument is not a number. Nothing is in flight then.
        {"id": 2, "tool": "sleepy", "args": {"seconds": "{{1}}"}, "depends_on": [1]},
        {"id": 3, "tool": "echo", "args": {"text": "after: {{2}}"}, "depends_on": [2]},
    ]
    run = run_plan(author, steps, run_dependants_of_failures=True)

    steps = steps_of(run)
    assert steps[2].status == "failed"
    assert steps[3].status == "succeeded" and steps[3].result.startswith("after: arguments")
    assert run.status == "failed"


@pytest.mark.parametrize("parallel", [0, -1])
def test_a_run_must_be_allowed_at_least_one_step_at_a_time(author, parallel):
    steps = [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]

    with pytest.raises(ValueError, match=f"at least 1 step at a time, got {parallel}"):
        run_create(
            author=author, goal_text="x", plan_data={"steps": steps}, max_parallel_steps=parallel
        )

    assert not Run.objects.exists()


def test_impure_calls_start_only_once_their_step_started_is_committed_one_commit_a_round(
    author, test_tools, monkeypatch
):
    # A long group-commit delay: a call started before its flush would surely not see it.
    monkeypatch.setattr(recorder, "FLUSH_DELAY_S", 0.5)
    steps = [{"id": k, "tool": "sees_its_start", "args": {"label": f"s{k}"}} for k in (1, 2, 3)]
    steps.append(
        {"id": 4, "tool": "sees_its_start", "args": {"label": "join"}, "depends_on": [1, 2, 3]}
    )

    run = run_plan(author, steps)

    assert run.status == Run.Status.COMPLETED
    assert {step_id: step.result for step_id, step in steps_of(run).items()} == {
        1: True,
        2: True,
        3: True,
        4: True,
    }
    # One flush for the round, not one per step: its three starts share one commit's time.
    started = RunEvent.objects.filter(run=run, kind="step_started", payload__round=1)
    assert started.count() == 3
    assert len({event.at for event in started}) == 1


def starts_committed_by_thread(monkeypatch, *, steal_lease: bool = False) -> list[str]:
    """The threads that commit (or try to commit) batches holding step_started events; with
    steal_lease, the lease is taken away inside the first such commit, before its fence."""
    threads: list[str] = []
    real_append = recorder.append_events

    def append_events(run_id, entries, **kw):
        if any(kind == "step_started" for kind, _ in entries):
            threads.append(threading.current_thread().name)
            if steal_lease:
                Run.objects.filter(pk=run_id).update(lease_token=uuid.uuid4())
        return real_append(run_id, entries, **kw)

    monkeypatch.setattr(recorder, "append_events", append_events)
    return threads


def test_with_the_writer_idle_the_advancing_thread_commits_each_rounds_starts_before_its_calls(
    author, test_tools, monkeypatch
):
    # No flush between rounds: the writer has nothing queued when each round starts.
    monkeypatch.setattr(recorder, "FLUSH_DELAY_S", 60.0)
    threads = starts_committed_by_thread(monkeypatch)
    steps = [
        {"id": 1, "tool": "sees_its_start", "args": {"label": "impure"}},
        {"id": 2, "tool": "sales_report", "args": {"rows": 1}},  # pure: started first
        {"id": 3, "tool": "sees_its_start", "args": {"label": "next"}, "depends_on": [1, 2]},
    ]

    run = run_plan(author, steps)

    assert run.status == Run.Status.COMPLETED
    assert steps_of(run)[1].result is True
    assert steps_of(run)[3].result is True
    assert threads == [threading.current_thread().name] * 2  # one commit a round, made here


def test_a_lease_lost_at_the_advancing_threads_commit_of_a_round_stops_its_calls(
    author, test_tools, monkeypatch
):
    threads = starts_committed_by_thread(monkeypatch, steal_lease=True)
    steps = [{"id": k, "tool": "sleepy", "args": {"seconds": 0, "label": f"s{k}"}} for k in (1, 2)]
    run = run_create(author=author, goal_text="lost", plan_data={"steps": steps})

    assert advance_run(run.pk) == "lease_lost"

    assert threads == [threading.current_thread().name]
    assert support_tools.calls == []
    assert not ToolCall.objects.filter(run=run).exists()
    assert not RunEvent.objects.filter(run=run, kind="step_started").exists()
