"""@modelcontextprotocol/server-everything (npm, on node) over stdio and streamable HTTP."""

import os
import threading
import time

import pytest
from django.urls import reverse

from plans.mcp.tools import server_listings
from plans.models import Approval, Run, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from plans.tools import get_registry
from tests.mcp_tools.servers import (
    EVERYTHING_JS,
    EVERYTHING_STDIO,
    TIME_SERVER,
    child_pids,
    everything_installed,
    everything_over_http,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # Skipped only outside CI: there, a server that was not installed is a failure.
    pytest.mark.skipif(
        not everything_installed() and os.environ.get("CI") != "true",
        reason=f"run ./dev test to install {EVERYTHING_JS}",
    ),
]


def start_run(author, steps):
    run = run_create(author=author, goal_text="time and logging", plan_data={"steps": steps})
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def steps_of(run):
    return {s.step_id: s for s in Step.objects.filter(plan__run=run)}


MIXED_PLAN = [
    {"id": 1, "tool": "time.get_current_time", "args": {"timezone": "Asia/Tokyo"}},
    {"id": 2, "tool": "everything.toggle-simulated-logging", "args": {}, "depends_on": [1]},
    {"id": 3, "tool": "everything.echo", "args": {"message": "at {{1}}"}, "depends_on": [1]},
]


def test_a_plan_mixing_servers_waits_for_approval_of_the_destructive_step_then_runs(
    author, reviewer, client, mcp_servers
):
    mcp_servers(time=TIME_SERVER, everything=EVERYTHING_STDIO)

    run = start_run(author, MIXED_PLAN)

    approval = Approval.objects.get(run=run)
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert approval.tool == "everything.toggle-simulated-logging"
    assert steps_of(run)[3].status == "succeeded"  # the read-only echo did not wait
    assert not ToolCall.objects.filter(run=run, tool=approval.tool).exists()

    approval_decide(approval=approval, reviewer=reviewer, approve=True)

    run.refresh_from_db()
    steps = steps_of(run)
    assert run.status == Run.Status.COMPLETED
    assert steps[2].result.startswith("Started simulated, random-leveled logging")
    assert steps[3].result.startswith("Echo: at {")
    client.force_login(author)
    audit = client.get(reverse("plans:run_audit", args=[run.pk])).content.decode()
    for tool in ("time.get_current_time", "everything.toggle-simulated-logging", "everything.echo"):
        assert tool in audit


def test_images_and_resources_become_short_references(author, mcp_servers):
    mcp_servers(everything=EVERYTHING_STDIO)
    steps = [
        {"id": 1, "tool": "everything.get-tiny-image", "args": {}},
        {"id": 2, "tool": "everything.get-resource-links", "args": {"count": 2}},
        {"id": 3, "tool": "everything.get-structured-content", "args": {"location": "New York"}},
    ]

    run = start_run(author, steps)

    results = {i: s.result for i, s in steps_of(run).items()}
    image = next(part for part in results[1] if isinstance(part, dict))
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert 0 < image["bytes"] < 10_000  # its size, not its bytes
    links = [part for part in results[2] if isinstance(part, dict)]
    assert [link["type"] for link in links] == ["resource_link", "resource_link"]
    assert results[3]["temperature"] is not None  # structured content as is


def test_killing_the_server_during_a_call_fails_that_step_and_the_next_run_gets_a_fresh_one(
    author, mcp_servers
):
    mcp_servers(everything=EVERYTHING_STDIO)
    get_registry()  # started, so the only child process is the server
    [server_pid] = child_pids()
    long_call = [
        {
            "id": 1,
            "tool": "everything.trigger-long-running-operation",
            "args": {"duration": 20, "steps": 2},
        }
    ]
    done = threading.Event()
    runs: list[Run] = []
    runner = threading.Thread(
        target=lambda: (runs.append(start_run(author, long_call)), done.set())
    )
    runner.start()
    deadline = time.monotonic() + 30
    while not Step.objects.filter(status="running").exists():
        assert time.monotonic() < deadline, "the long call never started"
        time.sleep(0.02)

    import os
    import signal

    os.kill(server_pid, signal.SIGKILL)
    assert done.wait(30)
    runner.join()

    step = steps_of(runs[0])[1]
    assert step.status == "failed"
    assert "went away during trigger-long-running-operation" in step.error
    echo = [{"id": 1, "tool": "everything.echo", "args": {"message": "again"}}]
    assert steps_of(start_run(author, echo))[1].result == "Echo: again"
    assert server_pid not in child_pids()
    assert server_listings(start=False)[0].state.restarts == 1


def test_tools_over_streamable_http_validate_and_run(author, mcp_servers):
    with everything_over_http() as url:
        mcp_servers(remote={"url": url, "trust_annotations": True})
        steps = [
            {"id": 1, "tool": "remote.get-sum", "args": {"a": 2, "b": 40}},
            {"id": 2, "tool": "remote.echo", "args": {"message": "sum {{1}}"}, "depends_on": [1]},
        ]

        run = start_run(author, steps)

        results = {i: s.result for i, s in steps_of(run).items()}
        assert run.status == Run.Status.COMPLETED
        assert "42" in str(results[1])
        assert get_registry()["remote.toggle-simulated-logging"].destructive


def test_a_bad_argument_to_an_http_tool_names_the_step_and_the_argument(author, mcp_servers):
    from plans.services.plans import plan_check

    with everything_over_http() as url:
        mcp_servers(remote={"url": url})

        plan, problems = plan_check(
            {"steps": [{"id": 1, "tool": "remote.get-sum", "args": {"a": "two"}}]}, max_steps=5
        )

    assert plan is None
    assert problems == [
        "step 1: missing required argument 'b'",
        "step 1: argument 'a': 'two' is not of type 'number'",
    ]
