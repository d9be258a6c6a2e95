"""The inbox shows a page of what waits: "more steps are waiting" means new ones, not the rest
of the pages."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import PRICE_GOAL, TRIP_GOAL

pytestmark = pytest.mark.browser


def start_trip(author, ends_runs) -> str:
    author.goto(re.sub(r"/runs/.*|/approvals/.*", "/", author.url))
    author.get_by_role("button", name=TRIP_GOAL).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    ends_runs(run_id)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    return run_id


def test_a_page_of_the_inbox_says_more_are_waiting_only_when_new_ones_come(sign_in, ends_runs):
    author = sign_in("author2")
    for _ in range(2):
        start_trip(author, ends_runs)

    reviewer = sign_in("reviewer")
    base = reviewer.url.split("/", 3)[:3]
    with reviewer.expect_websocket(lambda ws: "/ws/approvals/" in ws.url) as badge_socket:
        reviewer.goto("/".join(base) + "/approvals/?runs=1")  # one run's group on the page
    expect(reviewer.locator("form.decision-group")).to_have_count(1)
    waiting = reviewer.locator("#pending-count").get_attribute("data-count")

    # A run that ends without asking anything still tells the badge to look again.
    with badge_socket.value.expect_event("framereceived", timeout=30_000):
        author.goto(re.sub(r"/runs/.*", "/", author.url))
        author.get_by_role("button", name=PRICE_GOAL).click()
        expect(author.locator("#run-status")).to_have_text("completed")
    reviewer.evaluate("1")  # after the page has handled that message
    expect(reviewer.locator("#pending-count")).to_have_attribute("data-count", waiting)
    expect(reviewer.locator("#inbox-stale")).to_be_hidden()

    start_trip(author, ends_runs)

    expect(reviewer.locator("#inbox-stale")).to_be_visible()
    expect(reviewer.locator("form.decision-group")).to_have_count(1)  # nothing swapped away
