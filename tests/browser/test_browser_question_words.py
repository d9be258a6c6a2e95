"""A run that waits only for a person's answer is worded so wherever its status shows, never
"awaiting approval": the runs list, the plan graph's legend and the question's node. A run that
waits for both a reviewer and an answer says both."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_browser_truthful_graph import run_goal

pytestmark = pytest.mark.browser

QUESTION = {
    "id": 1,
    "tool": "ask_human",
    "args": {"question": "Which colour should the replacement be?", "choices": ["red", "blue"]},
    "depends_on": [],
}
REFUND = {
    "id": 2,
    "tool": "issue_refund",
    "args": {"order_id": "A-1001", "amount_inr": 100, "reason": "scratched case"},
    "depends_on": [],
}


def test_a_run_waiting_for_an_answer_says_so_on_the_runs_list_and_in_the_graph(
    sign_in, manage, daphne_server, tmp_path, screenshot
):
    asks = run_goal(manage, tmp_path / "asks.json", "Ask the colour", [QUESTION])
    both = run_goal(manage, tmp_path / "both.json", "Ask and refund", [QUESTION, REFUND])

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/")
    rows = author.locator("table.runs tbody tr")
    asks_row = rows.filter(has=author.locator(f'a[href="/runs/{asks}/"]'))
    both_row = rows.filter(has=author.locator(f'a[href="/runs/{both}/"]'))
    expect(asks_row.locator(".status")).to_have_text("waiting for an answer")
    expect(asks_row.locator(".status")).to_have_class(re.compile(r"\bstatus-awaiting_answer\b"))
    expect(both_row.locator(".status")).to_have_text("awaiting approval and an answer")
    expect(both_row).to_contain_text("1 waiting for a reviewer, 1 waiting for an answer")
    # The status filter finds both kinds of wait under one name that says so.
    expect(author.get_by_label("Status").locator("option[value=awaiting_approval]")).to_have_text(
        "Awaiting approval or an answer"
    )
    screenshot(author, "runs_list_waiting_for_an_answer", full_page=False)

    author.goto(f"{daphne_server}/runs/{asks}/")
    expect(author.locator("#run-status")).to_have_text("waiting for an answer")
    node = author.locator("#graph g#step-1")
    expect(node).to_have_class(re.compile(r"\bstatus-awaiting_answer\b"))
    expect(node.locator("g.tooltip > title")).to_have_text(
        "Waiting for an answer: Which colour should the replacement be?"
    )
    # The legend names the node's colour as the wait it is.
    fill = node.locator("polygon, path").first.get_attribute("fill")
    legend = author.locator(".graph-card .legend li").filter(
        has=author.locator(f'rect[fill="{fill}"]')
    )
    expect(legend).to_have_text("waiting for an answer")
    screenshot(author, "graph_waiting_for_an_answer", full_page=False)
    # The goal and its callout are not squeezed beside the header's buttons, and the totals
    # stay on one row whatever figures the run has.
    assert author.locator(".run-title").bounding_box()["width"] > 500
    tops = {
        round(figure.bounding_box()["y"]) for figure in author.locator("#run-totals > div").all()
    }
    assert len(tops) == 1, tops

    author.goto(f"{daphne_server}/runs/{both}/")
    expect(author.locator("#run-status")).to_have_text("awaiting approval and an answer")
    expect(author.locator("#graph g#step-2")).to_have_class(
        re.compile(r"\bstatus-awaiting_approval\b")
    )
