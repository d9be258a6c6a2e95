"""A tool that raises or returns the unexpected fails its own step; the run goes on and ends."""

import pytest

from plans.models import Run, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.runtime.tool_calls import TOOL_ERROR_MAX_CHARS
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def test_tools(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]


def run_misbehaving(author, kind):
    steps = [
        {"id": 1, "tool": "misbehave", "args": {"kind": kind}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "after {{1}}"}, "depends_on": [1]},
        {"id": 3, "tool": "echo", "args": {"text": "independent"}, "depends_on": []},
    ]
    run = run_create(author=author, goal_text="misbehaving tool", plan_data={"steps": steps})
    status = advance_run(run.pk)
    return status, {s.step_id: s for s in Step.objects.filter(plan__run=run)}


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("system_exit", "SystemExit: 3"),
        ("keyboard_interrupt", "KeyboardInterrupt"),
        ("unprintable", "_Unprintable: (its message could not be read)"),
        ("nan", "ValueError: the result nan is not a JSON number"),
        ("inf_in_list", "ValueError: Out of range float values are not JSON compliant"),
        ("bigint", "ValueError: the result is an integer too long to write out"),
    ],
)
def test_the_step_fails_with_what_went_wrong_and_the_run_ends(author, kind, error):
    status, steps = run_misbehaving(author, kind)

    assert status == Run.Status.FAILED
    assert steps[1].status == "failed" and steps[1].error.startswith(error)
    assert steps[2].status == "skipped"
    assert steps[3].status == "succeeded"
    assert ToolCall.objects.get(step=steps[1]).error == steps[1].error


def test_a_huge_error_message_is_kept_to_a_readable_length(author):
    _, steps = run_misbehaving(author, "huge_error")

    error = steps[1].error
    assert error.startswith("x" * TOOL_ERROR_MAX_CHARS)
    assert error.endswith("... (40,000 more characters not kept)")
