"""The plan graph tells a reviewer what happened: why steps were skipped, what a bad plan was."""

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def run_goal(manage, plan_file, goal, steps):
    plan_file.write_text(json.dumps({"steps": steps}), encoding="utf-8")
    result = manage("run_goal", goal, "--plan-file", str(plan_file), "--author", "author", "--json")
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)["run_id"]


def test_an_invalid_plan_is_drawn_as_proposed_with_its_problems_beside_it(
    sign_in, manage, daphne_server, tmp_path, screenshot
):
    steps = [
        {"id": 1, "tool": "echo", "args": {"text": "a"}, "depends_on": [3]},
        {"id": 2, "tool": "teleport", "args": {"to": "Goa"}, "depends_on": [9]},
        {"id": 3, "tool": "echo", "args": {"text": "{{1}}"}, "depends_on": [1]},
    ]
    run_id = run_goal(manage, tmp_path / "bad.json", "A plan with problems", steps)

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("invalid plan")
    graph = author.locator("#graph")
    expect(graph.locator("g#proposed-2")).to_have_class(re.compile(r"\binvalid\b"))
    expect(graph.locator("g#proposed-2")).to_contain_text("teleport")
    expect(graph.locator("g#missing-9")).to_contain_text("does not exist")
    expect(graph.locator("g#plan-problems")).to_contain_text("unknown tool")
    expect(graph.locator("g#plan-problems")).to_contain_text("cycle")
    expect(graph.locator("g.edge.invalid")).to_have_count(3)  # 9 -> 2 and the 1 <-> 3 cycle
    box = graph.locator("svg").bounding_box()
    assert box["width"] > 200 and box["height"] > 100  # a drawing, not an empty 8x8 box
    screenshot(author, "run_page_invalid_plan")


def test_a_skipped_step_says_why_in_its_tooltip(
    sign_in, manage, daphne_server, tmp_path, screenshot
):
    steps = [
        {"id": 1, "tool": "explode", "args": {"message": "warehouse offline"}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "got {{1}}"}, "depends_on": [1]},
    ]
    run_id = run_goal(manage, tmp_path / "skip.json", "A failing first step", steps)

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#graph g#step-2")).to_have_class(re.compile(r"\bstatus-skipped\b"))
    tooltip = author.locator("#graph g#step-2 g.tooltip > title")
    expect(tooltip).to_have_text(re.compile(r"^Skipped: .*step 1"))
    expect(author.locator("#graph g#step-1 g.tooltip > title")).to_have_text(
        "Failed: warehouse offline"
    )
    screenshot(author, "run_page_skipped_tooltip", full_page=False)
