"""An MCP server's destructive tool waits in the reviewer's inbox and runs once approved."""

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

GOAL = "Tell me the time in Tokyo and switch on the everything server's simulated logging"
PLAN = {
    "steps": [
        {"id": 1, "tool": "time.get_current_time", "args": {"timezone": "Asia/Tokyo"}},
        {"id": 2, "tool": "everything.toggle-simulated-logging", "args": {}, "depends_on": [1]},
    ]
}


def test_a_destructive_mcp_step_waits_in_the_inbox_and_runs_after_approval(
    sign_in, manage, daphne_server, tmp_path, screenshot
):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(PLAN))
    result = manage("run_goal", GOAL, "--plan-file", str(plan_file), "--author", "author", "--json")
    assert result.returncode == 3, result.stderr  # parked on the destructive step
    run_id = json.loads(result.stdout)["run_id"]

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    group = reviewer.locator(f"#group-{run_id}-2")
    expect(group).to_contain_text("everything.toggle-simulated-logging")
    screenshot(reviewer, "inbox_mcp_destructive_step")
    group.get_by_role("button", name="Approve", exact=True).click()
    expect(group.locator(".decision-stamp")).to_have_text(re.compile("approved by reviewer"))

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#step-row-1")).to_contain_text("Asia/Tokyo")
    expect(author.locator("#step-row-2")).to_contain_text("succeeded")
    author.goto(f"{daphne_server}/runs/{run_id}/audit/")
    expect(author.locator("body")).to_contain_text("everything.toggle-simulated-logging")
