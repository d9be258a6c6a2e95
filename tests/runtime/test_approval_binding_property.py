"""A property over random plans run twice side by side with identical destructive calls: no
approval row ever authorises a call in a run other than its own (nor another step's)."""

import contextlib

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from plans.models import Approval, Run, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.runtime.tool_calls import invoke_tool
from plans.services.approvals import ApprovalRefused, approval_decide
from plans.services.runs import run_create
from plans.tools import get_registry
from tests import property_tools
from tests.runtime.test_execution_properties import plans

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def property_tool_module(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.property_tools"]


def decide_run(run_id: int, approve: dict[int, bool], reviewer_id: int) -> None:
    reviewer = get_user_model().objects.get(pk=reviewer_id)
    for approval in Approval.objects.filter(decision="pending", run_id=run_id):
        with contextlib.suppress(ApprovalRefused):
            approval_decide(
                approval=approval,
                reviewer=reviewer,
                approve=approve[approval.args["label"]],
                reason="no",
                resume=False,
            )


@hypothesis_settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans(), second=st.data())
def test_no_approval_ever_authorises_a_call_in_another_run(author, reviewer, plan, second):
    steps, answers = plan
    for step in steps:  # no reviewer acting from inside a tool here: decisions are per run
        step["args"].pop("review_now", None)
    # The second run's reviewer decides each identical call on its own, maybe the other way.
    other = {label: second.draw(st.booleans()) for label in answers}
    property_tools.reset({}, reviewer.pk)
    runs = [
        run_create(author=author, goal_text="twin", plan_data={"steps": steps}) for _ in range(2)
    ]
    verdicts = {runs[0].pk: answers, runs[1].pk: other}
    for run in runs:
        advance_run(run.pk)
    for _ in range(len(steps) + 1):
        parked = [r.pk for r in runs if Run.objects.get(pk=r.pk).status == "awaiting_approval"]
        if not parked:
            break
        for run_id in parked:
            decide_run(run_id, verdicts[run_id], reviewer.pk)
            advance_run(run_id)

    spec = get_registry()["effect_op"]
    # Examples share the database: only this example's runs are looked at.
    approvals = list(Approval.objects.filter(run__in=runs).select_related("step__plan"))
    for approval in approvals:
        assert approval.run_id == approval.step.plan.run_id  # an approval is its step's run's
    for call in ToolCall.objects.filter(run__in=runs, step__destructive=True).select_related(
        "step__plan"
    ):
        run_id = call.step.plan.run_id
        assert call.run_id == run_id
        assert verdicts[run_id][call.args["label"]], "a rejected call ran"
        authorising = [
            a
            for a in approvals
            if a.authorises(tool=call.tool, args=call.args, step_id=call.step_id)
        ]
        assert authorising and all(a.run_id == run_id for a in authorising)
        # Every approval of the twin run for the identical call is refused at the invoker.
        for twin in approvals:
            if twin.run_id != run_id and twin.decision == "approved" and twin.args == call.args:
                assert not twin.authorises(tool=call.tool, args=call.args, step_id=call.step_id)
                refused = invoke_tool(
                    spec, call.args, key="probe", approval=twin, step_pk=call.step_id
                )
                assert "no approval" in refused.error
    for run in runs:
        rows = Step.objects.filter(plan__run=run, destructive=True)
        for row in rows:
            assert not (row.status == "succeeded" and not verdicts[run.pk][row.args["label"]])
