"""A property of the executor over random plans of pure, impure and destructive tools, with
reviewers deciding at random moments (mid-run, from inside a running step, or after parking):
every impure call happens exactly once per step, every destructive call at most once per
approval, and never for a rejection."""

import pytest
from hypothesis import HealthCheck, example, given
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


# --- replans -------------------------------------------------------------------------------

LABELS = range(3)


@st.composite
def version_steps(draw, *, count=None):
    count = count or draw(st.integers(1, 5))  # AGENTSITE_MAX_PLAN_STEPS
    steps = []
    for step_id in range(1, count + 1):
        kind = draw(st.sampled_from(["pure", "impure", "destructive", "destructive"]))
        if kind == "pure":
            tool, args = "rp_pure", {"x": draw(st.integers(0, 2))}
        elif kind == "impure":
            tool = "rp_impure"
            args = {
                "x": draw(st.integers(0, 2)),
                "fail": draw(st.booleans()),
                "review_now": draw(st.booleans()),
            }
        else:
            tool, args = "rp_effect", {"label": draw(st.sampled_from(LABELS))}
        step = {
            "id": step_id,
            "tool": tool,
            "args": args,
            "depends_on": sorted(
                draw(st.lists(st.integers(1, step_id - 1), unique=True, max_size=2))
                if step_id > 1
                else []
            ),
        }
        if tool == "rp_effect" and draw(st.integers(0, 5)) == 0:
            step["repeat"] = True  # now and then a deliberate second effect
        steps.append(step)
    return steps


@st.composite
def replanned(draw, previous):
    """The next version: the same plan, reordered, with changed arguments, or another one."""
    how = draw(st.sampled_from(["same", "reordered", "changed", "other"]))
    steps = [dict(step, args=dict(step["args"])) for step in previous]
    if how == "reordered":
        last = len(steps) + 1
        steps = [
            {
                **step,
                "id": last - step["id"],
                "depends_on": sorted(last - d for d in step["depends_on"]),
            }
            for step in reversed(steps)
        ]
    elif how == "changed":
        step = draw(st.sampled_from(steps))
        key = "label" if step["tool"] == "rp_effect" else "x"
        step["args"][key] = draw(st.sampled_from(LABELS))
    elif how == "other":
        steps = draw(version_steps())
    for step in steps:
        if step["tool"] == "rp_impure":  # later failures, at random
            step["args"]["fail"] = draw(st.booleans())
    return steps


@st.composite
def replanned_runs(draw):
    versions = [draw(version_steps())]
    for _ in range(2):  # AGENTSITE_MAX_REPLANS below
        versions.append(draw(replanned(versions[-1])))
    approve = st.sampled_from([True, True, False])  # mostly approved: effects to repeat
    return versions, {label: draw(approve) for label in LABELS}


# The shape: an effect is made, a later step fails, the replan is the same plan.
_EFFECT_THEN_FAILURE = [
    {"id": 1, "tool": "rp_effect", "args": {"label": 0}, "depends_on": []},
    {"id": 2, "tool": "rp_impure", "args": {"x": 1, "fail": True}, "depends_on": [1]},
]


@hypothesis_settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=replanned_runs(), parallel=st.sampled_from([1, 4]))
@example(drawn=([_EFFECT_THEN_FAILURE] * 3, dict.fromkeys(LABELS, True)), parallel=1)
def test_replans_never_repeat_an_effect_unless_the_plan_marks_a_repeat(
    author, reviewer, settings, monkeypatch, drawn, parallel
):
    import json

    from plans.llm.offline import OfflineModel
    from plans.runtime import advance as execution
    from tests import replan_property_tools

    versions, decisions = drawn
    settings.AGENTSITE_TOOL_MODULES = ["tests.replan_property_tools"]
    settings.AGENTSITE_MAX_REPLANS = len(versions) - 1
    replan_property_tools.reset()
    property_tools.reset(decisions, reviewer.pk)
    replies = iter(versions)

    class Planner(OfflineModel):
        def _reply(self, request):
            if request.purpose in ("plan", "replan"):
                return json.dumps({"steps": next(replies)})
            return super()._reply(request)

    monkeypatch.setattr(execution, "get_model", Planner)
    run = run_create(author=author, goal_text="replan property")
    Run.objects.filter(pk=run.pk).update(max_parallel_steps=parallel)

    advance_run(run.pk)
    for _ in range(20):  # each round decides what the run parked for
        if Run.objects.get(pk=run.pk).status != "awaiting_approval":
            break
        property_tools.decide_waiting(run.pk)
        advance_run(run.pk)

    run.refresh_from_db()
    assert run.is_terminal, run.status
    ran = list(Step.objects.filter(plan__run=run).select_related("plan"))
    made = {row.plan.version for row in ran}
    planned = [versions[version - 1] for version in sorted(made)]
    for label in LABELS:
        calls = [
            [s for s in v if s["tool"] == "rp_effect" and s["args"]["label"] == label]
            for v in planned
        ]
        once_each = max((sum(not s.get("repeat") for s in v) for v in calls), default=0)
        repeats = sum(bool(s.get("repeat")) for v in calls for s in v)
        acted = replan_property_tools.acts[label]
        assert acted <= once_each + repeats, (label, acted, planned)
        if not decisions[label]:
            assert acted == 0
    for row in ran:
        if row.destructive and row.reused_from:
            assert not Approval.objects.filter(step=row).exists()  # nobody asked again
            assert not ToolCall.objects.filter(step=row).exists()


# --- previews bound to their targets --------------------------------------------------------

PREVIEW_ACTIONS = st.lists(
    st.sampled_from(
        [
            "advance 0",
            "advance 1",
            "approve 0",
            "approve 1",
            "edit 0",
            "edit 1",
            "restock widget",
            "restock gadget",
        ]
    ),
    max_size=12,
)


@hypothesis_settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=PREVIEW_ACTIONS, quantities=st.tuples(st.integers(1, 4), st.integers(1, 4)))
@example(
    actions=["advance 0", "advance 1", "approve 0", "approve 1", "advance 0"], quantities=(2, 2)
)
@example(
    actions=["advance 0", "advance 1", "edit 0", "approve 1", "advance 1", "advance 0"],
    quantities=(2, 2),
)
def test_no_call_runs_against_a_target_version_other_than_the_one_its_approver_saw(
    settings, author, reviewer, actions, quantities
):
    """Two runs ship from one stock item, with approvals, edits moving a call to the other
    item and back, launches and outside changes in a random order: every shipment is made
    against the version its approval's preview showed (an edit's, for an edited call)."""
    from plans.services.approvals import approval_decide
    from tests import preview_tools

    settings.AGENTSITE_TOOL_MODULES = ["tests.preview_tools"]
    preview_tools.reset(widget=6, gadget=6)
    runs = [
        run_create(
            author=author,
            goal_text=f"ship {index}",
            plan_data={
                "steps": [{"id": 1, "tool": "ship", "args": {"item": "widget", "quantity": q}}]
            },
        )
        for index, q in enumerate(quantities)
    ]

    def approve(run, *, edit=False):
        for approval in Approval.objects.filter(run=run, decision="pending"):
            moved = None
            if edit:  # to the other item: another target than the one the run asked about
                other = "gadget" if approval.args["item"] == "widget" else "widget"
                moved = {**approval.args, "item": other}
            approval_decide(
                approval=approval, reviewer=reviewer, approve=True, edited_args=moved, resume=False
            )

    for action in actions:
        verb, what = action.split()
        if verb == "restock":
            preview_tools.restock(what, 1)
            continue
        run = runs[int(what)]
        if verb in ("approve", "edit"):
            approve(run, edit=verb == "edit")
        elif not Run.objects.get(pk=run.pk).is_terminal:
            advance_run(run.pk)
    for _ in range(4):  # then each is decided and launched until it ends
        for run in runs:
            if not Run.objects.get(pk=run.pk).is_terminal:
                approve(run)
                advance_run(run.pk)

    assert all(Run.objects.get(pk=run.pk).is_terminal for run in runs)
    keys = [key for _, _, key in preview_tools.shipped]
    assert len(keys) == len(set(keys))  # each call at most once
    for item, version, key in preview_tools.shipped:
        step = Step.objects.get(idempotency_key=key)
        (authorised,) = Approval.objects.filter(step=step, decision="approved")
        assert authorised.target_version == f"{item}@{version}"
        assert authorised.args["item"] == item
    for approval in Approval.objects.filter(decision="stale"):
        assert approval.superseded_by.supersedes_id == approval.pk
