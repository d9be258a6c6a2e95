"""A reviewer edits a refund's amount in the inbox: the first Approve shows the preview of the
edited arguments (the draft kept), the second binds the approval to it."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser


def test_an_edited_refund_shows_its_own_preview_before_it_is_approved(
    sign_in, screenshot, daphne_server
):
    author = sign_in("author")
    author.goto(f"{daphne_server}/")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    group = reviewer.locator(f"#group-{run_id}-2")
    expect(group.locator(".preview")).to_contain_text("Refund ₹2,499 of ₹2,499")
    group.get_by_text("Edit the arguments before approving").click()
    box = group.locator("textarea")
    box.fill(box.input_value().replace("2499", "1000"))
    group.get_by_role("button", name="Approve", exact=True).click()

    group = reviewer.locator(f"#group-{run_id}-2")
    edited = group.locator(".preview-unseen")
    expect(edited).to_contain_text("Preview of your edited arguments")
    expect(edited).to_contain_text("Refund ₹1,000 of ₹2,499")
    expect(group.locator(".alert-info")).to_contain_text("approve again to confirm it")
    expect(group.locator("textarea")).to_have_value(re.compile('"amount_inr": 1000'))
    expect(group.locator(".decision-summary")).to_contain_text("INR 1,000")  # what runs
    expect(group.locator(".decision-stamp")).to_have_count(0)  # nothing decided yet
    screenshot(reviewer, "inbox_edit_preview")

    group.get_by_role("button", name="Approve", exact=True).click()
    expect(group.locator(".decision-stamp.stamp-approved")).to_have_count(1)
    expect(group.locator(".preview")).to_contain_text("of the edited arguments")
    expect(group.locator(".preview")).to_contain_text("Refund ₹1,000 of ₹2,499")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#step-row-2")).to_contain_text("succeeded")
