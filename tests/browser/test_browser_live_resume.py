"""A run page that loses its socket, or some pushes, still shows every event exactly once."""

import re
import time

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser

# Read together: a message may land between two separate reads.
TIMELINE_AND_LAST_SEQ = """() => [
    Array.from(document.querySelectorAll('#timeline li')).map(li => +li.dataset.seq),
    +document.getElementById('last-seq').dataset.seq,
]"""


def wait_until(condition, page, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        page.wait_for_timeout(100)


def assert_timeline_is_the_whole_log(page):
    seqs, last = page.evaluate(TIMELINE_AND_LAST_SEQ)
    assert sorted(seqs) == list(range(1, last + 1))  # none missing, none twice


def run_sockets_through_a_proxy(page, passes):
    """Route the page's run sockets through a proxy that hands the page only the server's
    messages passes(message) lets through; the (url, page side) of each connection opened."""
    sockets = []

    def through_a_proxy(page_side):
        server_side = page_side.connect_to_server()
        server_side.on_message(lambda message: passes(message) and page_side.send(message))
        page_side.on_message(lambda message: server_side.send(message))
        sockets.append((page_side.url, page_side))

    page.route_web_socket(re.compile(r"/ws/runs/"), through_a_proxy)
    return sockets


def test_a_reconnect_and_lost_pushes_leave_no_gap_and_no_duplicate(sign_in):
    author = sign_in("author")
    dropping = {"on": False}
    sockets = run_sockets_through_a_proxy(author, lambda message: not dropping["on"])
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    author.evaluate("window.__marker = 1")
    expect(author.locator("#step-row-2")).to_contain_text("awaiting approval")
    expect(author.locator("#timeline")).to_contain_text("Waiting for a decision")  # parked
    wait_until(lambda: sockets, author)

    # The server restarts: the page reconnects asking for the events after the last whose
    # changes it shows (the header, totals and rows follow an event's line on the timeline).
    shown = author.locator("#last-seq").get_attribute("data-seq")
    expect(author.locator("#stated-seq")).to_have_attribute("data-seq", shown)
    sockets[-1][1].close(code=1012, reason="service restart")
    wait_until(lambda: len(sockets) == 2, author)
    assert sockets[1][0].endswith(f"/ws/runs/{run_id}/?after={shown}")
    expect(author.locator("#run-live")).to_have_attribute("data-state", "live")

    # Pushes are lost while the refund is approved and the run parks again for the email.
    dropping["on"] = True
    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    reviewer.locator(f"#group-{run_id}-2").get_by_role("button", name="Approve").click()
    expect(reviewer.locator(f"#group-{run_id}-3")).to_contain_text("send_email")
    dropping["on"] = False

    # Nothing after the lost batches reveals the gap: the page's periodic catch-up finds them.
    expect(author.locator("#step-row-2")).to_contain_text("succeeded")
    expect(author.locator("#step-row-3")).to_contain_text("awaiting approval")
    assert_timeline_is_the_whole_log(author)

    reviewer.locator(f"#group-{run_id}-3").get_by_role("button", name="Approve").click()
    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#timeline")).to_contain_text("Run finished")
    assert_timeline_is_the_whole_log(author)
    assert author.evaluate("window.__marker") == 1


def test_a_socket_closed_between_an_events_line_and_its_changes_brings_the_changes(sign_in):
    author = sign_in("author")
    lines_only = {"on": False}
    # An event's line carries last-seq; what it changed (rows, header) follows apart.
    sockets = run_sockets_through_a_proxy(
        author, lambda message: not lines_only["on"] or 'id="last-seq"' in message
    )
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    expect(author.locator("#step-row-2")).to_contain_text("awaiting approval")
    wait_until(lambda: sockets, author)
    expect(author.locator("#run-live")).to_have_attribute("data-state", "live")

    # The lines of the approval's events reach the page; what they changed does not.
    lines_only["on"] = True
    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    reviewer.locator(f"#group-{run_id}-2").get_by_role("button", name="Approve").click()
    expect(author.locator("#timeline")).to_contain_text("Step 3 send_email waits for")
    expect(author.locator("#step-row-2")).to_contain_text("awaiting approval")  # stale

    # The socket closes before the changes come: the page reconnects asking for them.
    lines_only["on"] = False
    sockets[-1][1].close(code=1012, reason="service restart")
    wait_until(lambda: len(sockets) == 2, author)
    expect(author.locator("#step-row-2")).to_contain_text("succeeded")
    expect(author.locator("#step-row-3")).to_contain_text("awaiting approval")
    assert_timeline_is_the_whole_log(author)

    author.get_by_role("button", name="Cancel run").click()  # leave nothing waiting
    expect(author.locator("#run-status")).to_have_text("cancelled")


def test_a_page_whose_session_ends_in_another_tab_says_it_is_signed_out(sign_in):
    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author.locator("#step-row-2")).to_contain_text("awaiting approval")
    live = author.locator("#run-live")
    expect(live).to_have_attribute("data-state", "live")

    other_tab = author.context.new_page()
    other_tab.goto(author.url)
    other_tab.get_by_role("button", name="Log out").click()

    expect(live).to_have_attribute("data-state", "signed-out")
    expect(live).to_contain_text("Session ended: reload the page")

    # Leave nothing waiting for the tests after this one: sign in again and cancel the run.
    run_url = author.url
    again = sign_in("author")
    again.goto(run_url)
    again.get_by_role("button", name="Cancel run").click()
    expect(again.locator("#run-status")).to_have_text("cancelled")
