"""A refund's preview on its approval card; two runs refund the same order, and the second's
request comes back stale after the first refund, with both previews side by side."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser


def start_refund(author, site):
    author.goto(f"{site}/")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    return re.search(r"/runs/(\d+)/", author.url).group(1)


def test_the_second_refund_comes_back_stale_with_both_previews(sign_in, screenshot, daphne_server):
    author = sign_in("author")
    first = start_refund(author, daphne_server)
    second = start_refund(author, daphne_server)

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    for run_id in (first, second):
        preview = reviewer.locator(f"#group-{run_id}-2 .preview")
        expect(preview).to_contain_text(
            "Refund ₹2,499 of ₹2,499 to Visa …4242; already refunded ₹0"
        )
        expect(preview).to_contain_text("this refunds the whole order")
    screenshot(reviewer, "inbox_refund_preview")

    approved = reviewer.locator(f"#group-{first}-2")
    approved.get_by_role("button", name="Approve", exact=True).click()
    expect(approved.locator(".decision-stamp.stamp-approved")).to_have_count(1)
    author.goto(f"{daphne_server}/runs/{first}/")
    expect(author.locator("#step-row-2")).to_contain_text("succeeded")  # refunded

    racing = reviewer.locator(f"#group-{second}-2")
    racing.get_by_role("button", name="Approve", exact=True).click()
    expect(racing.locator(".decision-stamp.stamp-approved")).to_have_count(1)
    # Nothing was left on the page to decide, so it shows what arrived since: the first run's
    # next step, and the second's call asked again in the same round. What was decided stays.
    expect(reviewer.locator(f"#group-{first}-3")).to_be_visible()
    expect(racing.locator(".preview-stale")).to_be_visible()
    expect(racing.locator(".decision-stamp.stamp-approved")).to_have_count(1)
    expect(racing.locator(".approval-card").first).to_contain_text("approved by reviewer")
    screenshot(reviewer, "inbox_decided_then_asked_again")
    # The call does not run: the run's page says so as it happens.
    author.goto(f"{daphne_server}/runs/{second}/")
    expect(author.locator("#timeline")).to_contain_text(
        "was not called: its target changed since it was approved"
    )
    expect(author.locator("#run-status")).to_have_text("awaiting approval")

    # Back in the queue with both previews, to be decided afresh.
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    changed = reviewer.locator(f"#group-{second}-2 .preview-stale")
    expect(changed).to_contain_text("The target changed since reviewer approved this call")
    expect(changed.locator(".preview-changes")).to_contain_text("Already refunded: ₹0 → ₹2,499")
    expect(changed.locator(".preview-before")).to_contain_text("already refunded ₹0")
    expect(changed.locator(".preview-now")).to_contain_text("already refunded ₹2,499")
    expect(changed.locator(".preview-now")).to_contain_text(f"run #{first}")
    expect(reviewer.locator(f"#group-{second}-2 input[name=approval]")).to_be_checked()
    screenshot(reviewer, "inbox_stale_refund")
