"""A property of the executor over random plans of pure, impure and destructive tools, with
reviewers deciding at random moments (mid-run, from inside a running step, or after parking):
every impure call happens exactly once per step, every destructive call at most once per
approval, and never for a rejection."""

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from plans.models import Approval, Run, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests import property_tools

pytestmark = pytest.mark.django_db(transaction=True)


@st.composite
def plans(draw):
    count = draw(st.integers(1, 5))  # AGENTSITE_MAX_PLAN_STEPS
    steps, answers = [], {}
    for step_id in range(1, count + 1):
        kind = draw(st.sampled_from(["pure", "impure", "destructive"]))
        depends_on = (
            draw(st.lists(st.integers(1, step_id - 1), unique=True, max_size=2))
            if step_id > 1
            else []
        )
        if kind == "pure":
            args = {"x": draw(st.integers(0, 2))}  # repeats make reuse possible
        elif kind == "impure":
            args = {"x": draw(st.integers(0, 2)), "review_now": draw(st.booleans())}
        else:
            args = {"label": step_id}
            answers[step_id] = draw(st.booleans())
        steps.append(
            {
                "id": step_id,
                "tool": f"{kind}_op" if kind != "destructive" else "effect_op",
                "args": args,
                "depends_on": sorted(depends_on),
            }
        )
    return steps, answers


@pytest.fixture(autouse=True)
def property_tool_module(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.property_tools"]


@hypothesis_settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans(), parallel=st.sampled_from([1, 4]))
def test_impure_calls_happen_once_per_step_and_effects_at_most_once_per_approval(
    author, reviewer, plan, parallel
):
    steps, answers = plan
    property_tools.reset(answers, reviewer.pk)
    run = run_create(author=author, goal_text="property", plan_data={"steps": steps})
    Run.objects.filter(pk=run.pk).update(max_parallel_steps=parallel)

    advance_run(run.pk)
    for _ in range(len(steps) + 1):  # each round decides what the run parked for
        if Run.objects.get(pk=run.pk).status != "awaiting_approval":
            break
        property_tools.decide_waiting(run.pk)
        advance_run(run.pk)

    run.refresh_from_db()
    assert run.is_terminal, run.status
    rows = {s.step_id: s for s in Step.objects.filter(plan__run=run)}
    ran = {sid: ToolCall.objects.filter(step=rows[sid]).count() for sid in rows}
    impure = [s for s in steps if s["tool"] == "impure_op"]
    for step in impure:
        row = rows[step["id"]]
        assert not row.reused_from
        assert ran[step["id"]] == (1 if row.status == "succeeded" else 0)
    for x in range(3):
        made = sum(ran[s["id"]] for s in impure if s["args"]["x"] == x)
        assert property_tools.impure_calls[x] == made
    for step in steps:
        if step["tool"] == "pure_op" and rows[step["id"]].status == "succeeded":
            assert rows[step["id"]].result == 2 * step["args"]["x"]
    for label, approve in answers.items():
        approvals = Approval.objects.filter(run=run, step=rows[label], decision="approved").count()
        assert property_tools.effects[label] <= approvals
        if not approve:
            assert property_tools.effects[label] == 0
            assert rows[label].status in ("blocked", "skipped")
        elif rows[label].status == "succeeded":
            assert property_tools.effects[label] == 1
