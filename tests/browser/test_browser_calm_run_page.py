"""The run page reads calmly: progress, a timeline oldest first by round, folded long results."""

import json
import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import PRICE_GOAL

pytestmark = pytest.mark.browser


def test_a_finished_run_reads_oldest_first_with_noise_folded_and_long_results_cut(
    sign_in, manage, daphne_server, tmp_path, screenshot
):
    steps = [
        {"id": 1, "tool": "echo", "args": {"text": "a long line " * 80}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "after {{1}}"}, "depends_on": [1]},
    ]
    plan_file = tmp_path / "calm.json"
    plan_file.write_text(json.dumps({"steps": steps}), encoding="utf-8")
    result = manage(
        "run_goal", "Echo twice", "--plan-file", str(plan_file), "--author", "author", "--json"
    )
    run_id = json.loads(result.stdout)["run_id"]

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#run-progress")).to_have_text("2 of 2 steps done")
    expect(author.locator(".run-header .eyebrow")).to_contain_text("just now")

    timeline = author.locator("#timeline > li")
    expect(timeline.first).to_contain_text("Goal submitted by")  # oldest first
    expect(author.locator("#timeline .event-round_started")).to_have_count(2)
    noise = author.locator("#timeline .event-noise")
    assert noise.count() > 0
    expect(noise.first).to_be_hidden()
    author.get_by_label("Show every event").check()
    expect(noise.first).to_be_visible()
    author.get_by_label("Show every event").uncheck()

    result_box = author.locator("#step-row-1 .folded:has(#fold-result-1)")
    expect(result_box.locator(".fold-label")).to_contain_text(
        re.compile(r"Show all \([\d,]+ characters\)")
    )
    folded_height = result_box.locator("pre").bounding_box()["height"]
    result_box.locator(".fold-label").click()
    expect(result_box.locator(".fold-label")).to_have_text("Show less", use_inner_text=True)
    assert result_box.locator("pre").bounding_box()["height"] > 2 * folded_height
    screenshot(author, "run_page_calm")


def test_the_live_run_page_shows_progress_and_costs_in_cents_or_four_figures(sign_in, screenshot):
    author = sign_in("author")
    author.get_by_role("button", name=PRICE_GOAL).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#run-progress")).to_contain_text(re.compile(r"(\d+) of \1 steps done"))
    cost = author.locator(".totals .money").first
    expect(cost).to_have_attribute("title", re.compile(r"^\$[\d.]+ exactly$"))
    expect(cost).to_have_text(re.compile(r"^\$(\d+\.\d\d|0\.0\d*)$"))
    # The timeline's new events arrived over the socket in order: oldest stays first.
    expect(author.locator("#timeline > li").first).to_contain_text("Goal submitted by")
    screenshot(author, "run_page_live_calm")
