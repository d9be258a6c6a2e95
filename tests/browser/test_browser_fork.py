"""A run is forked with an edited argument; the fork runs and asks for a fresh approval."""

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# Orders of its own: the browser tests share one server and its refund ledger.
REFUND_GOAL = "Refund order A-1003 for a damaged item"


def test_a_fork_with_an_edited_argument_runs_and_asks_for_a_fresh_approval(sign_in, screenshot):
    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    origin_page = author.url
    origin_id = re.search(r"/runs/(\d+)/", origin_page).group(1)
    inbox = origin_page.rsplit("/runs/", 1)[0] + "/approvals/"

    reviewer = sign_in("reviewer")
    reviewer.goto(inbox)
    reviewer.locator(f"#group-{origin_id}-2").get_by_role("button", name="Approve").click()
    expect(author.locator("#step-row-3")).to_contain_text("awaiting")
    reviewer.goto(inbox)
    reviewer.locator(f"#group-{origin_id}-3").get_by_role("button", name="Approve").click()
    expect(author.locator("#run-status")).to_have_text("completed")

    author.get_by_role("link", name="Fork from this plan").click()
    editor = author.get_by_label(re.compile("Plan \\(JSON"))
    preview = author.locator("#fork-check")
    expect(preview.locator("#preview-step-2")).to_contain_text("would repeat an effect")
    editor.fill("{not json")
    expect(preview).to_contain_text("the plan is not valid JSON")
    plan = {
        "steps": [
            {"id": 1, "tool": "order_total", "args": {"order_id": "A-1004"}, "depends_on": []},
            {
                "id": 2,
                "tool": "issue_refund",
                # A-1003 was refunded in full by the origin: the ledger would refuse more.
                "args": {"order_id": "A-1004", "amount_inr": 100, "reason": "goodwill"},
                "depends_on": [1],
            },
        ]
    }
    editor.fill(json.dumps(plan, indent=2))
    expect(preview.locator("#preview-step-2")).to_contain_text("needs a fresh approval")
    expect(preview.locator("#preview-step-2")).not_to_contain_text("would repeat")
    screenshot(author, "fork_editor")
    author.get_by_role("button", name="Run the fork").click()

    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    fork_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    assert fork_id != origin_id
    expect(author.locator(".lineage")).to_contain_text(f"forked from run #{origin_id}")
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    reviewer.goto(inbox)
    fresh = reviewer.locator(f"#group-{fork_id}-2")
    expect(fresh).to_contain_text('"amount_inr": 100')
    fresh.get_by_role("button", name="Approve").click()
    expect(author.locator("#run-status")).to_have_text("completed")
    # The pushes that brought it there left the page's lineage in place (hx-preserve).
    expect(author.locator("#run-lineage .lineage")).to_contain_text(f"forked from run #{origin_id}")
    screenshot(author, "fork_completed")
