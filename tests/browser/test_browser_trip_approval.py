"""Scenario B: a reviewer approves a trip's bookings while its author watches, never reloading."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import TRIP_GOAL

pytestmark = pytest.mark.browser


def test_the_authors_open_page_follows_the_reviewers_approval_to_the_answer(
    sign_in, screenshot, daphne_server
):
    author = sign_in("author2")
    frames = []
    author.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(frame)))
    author.get_by_role("button", name=TRIP_GOAL).click()  # a one-click demo goal
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    author.evaluate("window.__marker = 1")
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    expect(author.locator("#step-row-4")).to_contain_text("awaiting approval")
    expect(author.locator("#run-live")).to_have_attribute("data-state", "live")
    screenshot(author, "run_page_awaiting_approval")

    reviewer = sign_in("reviewer")
    expect(reviewer.locator("#pending-count")).to_have_text("2")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    group = reviewer.locator(f"#group-{run_id}-3")
    expect(group.locator('input[name="approval"]:checked')).to_have_count(2)
    expect(group).to_contain_text("book_flight")
    expect(group).to_contain_text("book_hotel")
    screenshot(reviewer, "inbox")
    group.get_by_role("button", name="Approve", exact=True).click()
    expect(group.locator(".decision-stamp.stamp-approved")).to_have_count(2)
    expect(reviewer.locator("#pending-count")).to_have_attribute("data-count", "0")

    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#answer-text")).to_contain_text("booked")
    expect(author.locator("#step-row-5")).to_contain_text("succeeded")
    expect(author.locator("#timeline")).to_contain_text("reviewer approved step 4")
    assert author.evaluate("window.__marker") == 1  # the same page, never reloaded
    # The answer came over the socket as it was written (pieces that waited together, as the
    # offline model's instant ones do, go out as one message).
    streamed = "".join(str(frame) for frame in frames if "beforeend:#answer-text" in str(frame))
    assert "booked" in streamed
    screenshot(author, "run_page_after_approval")

    author.get_by_role("link", name="Audit").click()
    calls = author.locator(
        "section", has=author.get_by_role("heading", name=re.compile("Model calls"))
    )
    expect(calls.locator("tbody tr")).to_have_count(2)
    expect(calls).to_contain_text("offline")
    expect(author.locator(".audit-totals")).to_contain_text("Cost")
    screenshot(author, "audit", full_page=False)

    operator = sign_in("operator")
    operator.goto(f"{daphne_server}/runs/")
    expect(operator.get_by_text(TRIP_GOAL).first).to_be_visible()
    screenshot(operator, "runs_list")
    operator.goto(f"{daphne_server}/costs/")
    expect(operator.locator("main")).to_contain_text("offline")
    screenshot(operator, "costs")
