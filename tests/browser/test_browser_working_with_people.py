"""Working with people, as the pages word it: questions, requests for changes, forks and runs
again, with what they would repeat shown before they start."""

import json
import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import CONFIRMED_REFUND_GOAL

pytestmark = pytest.mark.browser

# An order of its own: the browser tests share one server (clean_slate forgets its effects).
REFUND_GOAL = "Refund order A-1004 for a damaged item"


def new_run(page, goal):
    page.get_by_label("Goal").fill(goal)
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    return re.search(r"/runs/(\d+)/", page.url).group(1)


def test_a_question_waits_for_an_answer_and_the_step_panel_says_who_gave_it(
    sign_in, screenshot, daphne_server
):
    author = sign_in("author")
    run_id = new_run(author, CONFIRMED_REFUND_GOAL)
    run_page = author.url
    expect(author.locator("#run-status")).to_have_text("waiting for an answer")
    expect(author.locator("#step-row-2")).to_contain_text("waiting for an answer")
    expect(author.locator("#run-progress")).to_contain_text("1 waiting for an answer")
    timeline = author.locator("#timeline")
    expect(timeline).to_contain_text("Step 2 asks the run's author a question")
    expect(timeline).to_contain_text("Waiting for an answer from the run's author (step 2)")
    expect(timeline).not_to_contain_text("Waiting for a decision")

    author.goto(f"{daphne_server}/approvals/")
    card = author.locator(".question-card").filter(has_text=f"Run #{run_id}")
    expect(card).to_contain_text("step 2 asks you, its author")
    screenshot(author, "inbox_with_a_question")
    card.get_by_label(re.compile("Your answer")).fill("500")
    card.get_by_role("button", name="Answer", exact=True).click()
    expect(author.locator(".messages")).to_contain_text(f"Answered step 2 of run #{run_id}")

    author.goto(run_page)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")  # now the refund
    author.get_by_role("link", name="Details of step 2").click()
    facts = author.locator("#step-panel .step-question")
    expect(facts).to_contain_text("Answered by")
    expect(facts).to_contain_text("author")
    expect(facts).to_contain_text("“500”")
    expect(author.locator("#timeline")).to_contain_text("author answered step 2's question")


def test_a_request_for_changes_reads_as_one_and_the_new_version_has_not_started(
    sign_in, screenshot, daphne_server
):
    author = sign_in("author")
    run_id = new_run(author, REFUND_GOAL)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    run_page = author.url

    reviewer = sign_in("reviewer")
    reviewer.goto(f"{daphne_server}/approvals/")
    group = reviewer.locator(f"#group-{run_id}-2")
    group.get_by_label("Reason").fill("refund 500, not 21297")
    group.get_by_role("button", name="Request changes", exact=True).click()

    reviewer.goto(run_page)
    expect(reviewer.locator("#run-status")).to_have_text("awaiting plan approval")
    totals = reviewer.locator("#run-totals")
    expect(totals).to_contain_text("not started · 3 planned in plan v2")
    expect(totals).not_to_contain_text("3 of 3")
    timeline = reviewer.locator("#timeline")
    expect(timeline).to_contain_text("reviewer asked for changes to step 2 issue_refund")
    expect(timeline).to_contain_text("set aside for the requested changes")
    expect(timeline).not_to_contain_text("rejected")
    expect(timeline).not_to_contain_text("blocked")
    screenshot(reviewer, "run_after_request_changes")


def test_the_origin_lists_its_fork_and_re_run_and_run_again_shows_what_it_repeats_first(
    sign_in, manage, screenshot, daphne_server, ends_runs
):
    made = manage(
        "run_goal", REFUND_GOAL, "--author", "author", "--approve-all", "--json"
    )  # a finished refund: its effects are done
    assert made.returncode == 0, made.stdout + made.stderr
    origin = json.loads(made.stdout)["run_id"]
    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{origin}/")
    expect(author.locator("#run-status")).to_have_text("completed")

    author.get_by_role("link", name="Fork from this plan").click()
    author.get_by_role("button", name="Run the fork").click()
    expect(author.locator(".run-header .lineage")).to_contain_text(f"forked from run #{origin}")
    fork = re.search(r"/runs/(\d+)/", author.url).group(1)
    ends_runs(fork)

    author.goto(f"{daphne_server}/runs/{origin}/")
    author.get_by_role("link", name="Run again").click()
    expect(author).to_have_url(re.compile(rf"/runs/{origin}/again/$"))
    preview = author.locator(".run-again-preview")
    expect(preview).to_contain_text("What it would likely repeat")
    expect(preview.locator("#preview-step-2")).to_contain_text(
        f"it would repeat an effect of run #{origin}"
    )
    screenshot(author, "run_again_preview")
    author.get_by_role("button", name="Run again").click()
    expect(author.locator(".run-header .lineage")).to_contain_text(f"re-run of run #{origin}")
    again = re.search(r"/runs/(\d+)/", author.url).group(1)
    ends_runs(again)

    author.goto(f"{daphne_server}/runs/{origin}/")
    derived = author.locator("#lineage-derived")
    expect(derived).to_contain_text(f"forked as run #{fork} (plan v1)")
    expect(derived).to_contain_text(f"re-run as run #{again}")
    screenshot(author, "origin_lists_its_fork")
    derived.get_by_role("link", name=f"run #{fork}").click()
    expect(author).to_have_url(re.compile(rf"/runs/{fork}/$"))
    author.goto(f"{daphne_server}/runs/{origin}/audit/")
    expect(author.locator("#lineage-derived")).to_contain_text(f"forked as run #{fork}")
