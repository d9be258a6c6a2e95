"""mcp-server-time over stdio: its tools in the registry, validated, gated, called, restarted."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from plans.engine import PlanInvalid, validate_plan
from plans.mcp.tools import server_listings
from plans.models import Approval, Run, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from plans.tools import get_registry, tool_catalog_for_prompt
from tests.mcp_tools.servers import TIME_SERVER, child_pids, kill_children

pytestmark = pytest.mark.django_db(transaction=True)


def run_plan(author, steps):
    run = run_create(author=author, goal_text="what time is it", plan_data={"steps": steps})
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def steps_of(run):
    return {s.step_id: s for s in Step.objects.filter(plan__run=run)}


def now_in(zone, step_id=1, depends_on=()):
    return {
        "id": step_id,
        "tool": "time.get_current_time",
        "args": {"timezone": zone},
        "depends_on": list(depends_on),
    }


def test_the_servers_tools_join_the_registry_with_its_description_and_schema(time_server):
    registry = get_registry()

    spec = registry["time.get_current_time"]
    assert "price" in registry  # the built-ins are still there
    assert spec.description == "Get current time in a specific timezone"
    assert spec.schema["required"] == ["timezone"]
    assert spec.destructive is False  # the server says readOnlyHint: true
    catalog = {tool["name"]: tool for tool in tool_catalog_for_prompt(registry)}
    assert catalog["time.convert_time"]["input_schema"]["required"] == [
        "source_timezone",
        "time",
        "target_timezone",
    ]


def test_no_configured_server_means_no_mcp_tools_and_no_process(settings):
    settings.AGENTSITE_MCP_SERVERS = {}

    assert not any("." in name for name in get_registry())
    assert child_pids() == []


def test_a_plan_with_bad_arguments_to_an_mcp_tool_is_invalid_naming_every_problem(time_server):
    plan = {
        "steps": [
            {"id": 1, "tool": "time.get_current_time", "args": {"timezone": 7}},
            {"id": 2, "tool": "time.convert_time", "args": {"time": "14:00", "extra": 1}},
        ]
    }

    with pytest.raises(PlanInvalid) as invalid:
        validate_plan(plan, get_registry(), max_steps=None)

    assert [str(p) for p in invalid.value.problems] == [
        "step 1: argument 'timezone': 7 is not of type 'string'",
        "step 2: missing required argument 'source_timezone'",
        "step 2: missing required argument 'target_timezone'",
    ]


def test_a_placeholder_may_stand_for_an_mcp_tools_argument(time_server):
    plan = {"steps": [now_in("UTC"), now_in("{{1}}", step_id=2, depends_on=[1])]}

    assert validate_plan(plan, get_registry(), max_steps=None).steps[1].tool == (
        "time.get_current_time"
    )


def test_a_read_only_mcp_tool_runs_without_approval_and_its_structured_result_is_kept(
    author, time_server
):
    run = run_plan(author, [now_in("Asia/Kolkata"), now_in("Mars/Olympus", step_id=2)])

    steps = steps_of(run)
    assert steps[1].status == "succeeded"
    assert steps[1].result["timezone"] == "Asia/Kolkata"
    assert steps[1].result["datetime"].endswith("+05:30")
    # The server's isError result is the step's error, in its own words.
    assert steps[2].status == "failed"
    assert "Invalid timezone" in steps[2].error
    assert not Approval.objects.filter(run=run).exists()
    calls = ToolCall.objects.filter(run=run).order_by("step_id")
    assert [c.tool for c in calls] == ["time.get_current_time"] * 2


def test_a_setting_makes_a_read_only_mcp_tool_wait_for_approval_of_its_exact_arguments(
    author, reviewer, mcp_servers
):
    mcp_servers(time={**TIME_SERVER, "tools": {"get_current_time": {"destructive": True}}})

    run = run_plan(author, [now_in("Europe/Paris")])

    approval = Approval.objects.get(run=run)
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert approval.tool == "time.get_current_time"
    assert approval.requested_args == {"timezone": "Europe/Paris"}
    assert not ToolCall.objects.filter(run=run).exists()

    approval_decide(approval=approval, reviewer=reviewer, approve=True)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert steps_of(run)[1].result["timezone"] == "Europe/Paris"


def test_resolved_arguments_are_checked_against_the_servers_schema_before_the_call(
    author, time_server
):
    steps = [
        {"id": 1, "tool": "calculator", "args": {"expression": "2+3"}},
        {
            "id": 2,
            "tool": "time.get_current_time",
            "args": {"timezone": "{{1}}"},
            "depends_on": [1],
        },
    ]

    run = run_plan(author, steps)

    step = steps_of(run)[2]
    assert step.status == "failed"
    assert step.error == (
        "arguments after substitution are invalid: argument 'timezone': 5 is not of type 'string'"
    )
    assert not ToolCall.objects.filter(run=run, step_id=2).exists()


def test_a_server_killed_between_runs_is_started_afresh_for_the_next_call(author, time_server):
    first = run_plan(author, [now_in("UTC")])
    killed = kill_children()

    second = run_plan(author, [now_in("UTC")])

    assert first.status == second.status == Run.Status.COMPLETED
    assert killed and not set(killed) & set(child_pids())
    listing = server_listings(start=False)[0]
    assert listing.state.label == "running" and listing.state.restarts == 1


def test_a_server_that_cannot_start_leaves_the_others_tools_usable(author, mcp_servers):
    mcp_servers(time=TIME_SERVER, broken={"command": "/nonexistent/mcp-server"})

    run = run_plan(author, [now_in("UTC")])

    assert run.status == Run.Status.COMPLETED
    states = {listing.config.name: listing.state for listing in server_listings(start=False)}
    assert states["broken"].label == "failed"
    assert "No such file" in states["broken"].detail


def test_the_mcp_tools_command_lists_each_server_its_state_and_gating(mcp_servers):
    mcp_servers(time={**TIME_SERVER, "tools": {"convert_time": {"destructive": True}}})
    out = StringIO()

    call_command("mcp_tools", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("time (stdio: ")
    assert lines[0].endswith("; annotations trusted): running")
    assert lines[1].startswith(
        "  time.convert_time  destructive (needs approval) [override convert_time]  limit 30 s"
    )
    assert lines[2].startswith(
        "  time.get_current_time  read-only [annotation trusted]  limit 30 s"
    )


def test_the_mcp_tools_command_fails_naming_a_server_that_is_down(mcp_servers):
    mcp_servers(broken={"command": "/nonexistent/mcp-server"})
    out = StringIO()

    with pytest.raises(CommandError, match="1 of 1 MCP server"):
        call_command("mcp_tools", stdout=out)

    assert (
        "broken (stdio: /nonexistent/mcp-server; annotations untrusted): failed - FileNotFoundError"
    ) in out.getvalue()


def test_a_bad_argument_to_an_mcp_tool_in_a_plan_file_exits_2(tmp_path, time_server):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"steps": [now_in(["UTC"])]}))
    out = StringIO()

    with pytest.raises(SystemExit) as exit_:
        call_command("run_goal", "what time", "--plan-file", str(plan_file), "--json", stdout=out)

    assert exit_.value.code == 2
    assert any("argument 'timezone'" in p for p in json.loads(out.getvalue())["problems"])


def test_a_plan_naming_a_tool_the_server_does_not_list_is_invalid_after_a_fresh_listing(
    time_server,
):
    from plans.mcp.config import configured_servers
    from plans.mcp.tools import connection_for
    from plans.services.plans import plan_check

    get_registry()
    connection = connection_for(configured_servers()["time"])
    listed_before = connection._listed_at

    plan, problems = plan_check(
        {"steps": [{"id": 1, "tool": "time.get_moon_phase", "args": {}}]}, max_steps=5
    )

    assert plan is None
    assert problems[0].startswith("step 1: unknown tool 'time.get_moon_phase' (allowed: ")
    assert connection._listed_at > listed_before  # asked the server again before refusing


def test_a_misconfigured_server_is_a_system_check_error_naming_it(settings):
    from plans.checks import check_mcp_servers

    settings.AGENTSITE_MCP_SERVERS = {"time": {"command": "mcp-server-time", "url": "http://x"}}

    (error,) = check_mcp_servers()
    assert error.id == "plans.E010"
    assert "AGENTSITE_MCP_SERVERS['time'] needs exactly one of 'command'" in error.msg
