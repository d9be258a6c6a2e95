"""Bidi controls and invisible characters in goals, errors and reasons are shown, not obeyed."""

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# Each hides itself and changes what the text around it seems to say.
HIDDEN = {
    "\u202e": "U+202E",  # RIGHT-TO-LEFT OVERRIDE: "gnp.exe" reads "exe.png"
    "\u2066": "U+2066",  # LEFT-TO-RIGHT ISOLATE
    "\u200b": "U+200B",  # ZERO WIDTH SPACE
    "\ufeff": "U+FEFF",  # ZERO WIDTH NO-BREAK SPACE
    "\U000e0041": "U+E0041",  # TAG LATIN CAPITAL LETTER A
    "\u2028": "U+2028",  # LINE SEPARATOR
}
GOAL = "Pay invoice \u202egnp.exe" + "".join(HIDDEN) + " today"
ERROR = "refused: \u202etxt.exe\u200b"


def assert_shown(locator, where):
    """The text holds none of the hidden characters and spells each of them as ⟨U+...⟩."""
    text = locator.first.inner_text()
    for char, code in HIDDEN.items():
        assert char not in text, f"{where} shows {code} raw"
    assert "\u27e8U+202E\u27e9gnp.exe" in text, f"{where}: {text!r}"
    for code in HIDDEN.values():
        assert f"\u27e8{code}\u27e9" in text, f"{where} hides {code}"


def test_a_spoofing_goal_is_shown_visibly_on_every_page_that_shows_it(
    sign_in, manage, daphne_server, tmp_path, screenshot, ends_runs
):
    steps = [
        {"id": 1, "tool": "explode", "args": {"message": ERROR}, "depends_on": []},
        {
            "id": 2,
            "tool": "send_email",
            "args": {"to": "x@example.com", "subject": "Invoice", "body": "paid"},
            "depends_on": [],
        },
    ]
    plan_file = tmp_path / "spoof.json"
    plan_file.write_text(json.dumps({"steps": steps}), encoding="utf-8")
    result = manage("run_goal", GOAL, "--plan-file", str(plan_file), "--author", "author", "--json")
    assert result.stdout.strip(), result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    ends_runs(run_id)

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    assert_shown(author.locator("h1.goal-text"), "the run page's heading")
    expect(author.locator("h1.goal-text mark.hidden-char").first).to_have_attribute(
        "title", "RIGHT-TO-LEFT OVERRIDE"
    )
    expect(author.locator("#step-row-1")).to_contain_text("refused: \u27e8U+202E\u27e9txt.exe")
    expect(author.locator("#timeline")).to_contain_text("\u27e8U+202E\u27e9txt.exe")
    assert "\u202e" not in author.locator("main").inner_text()
    screenshot(author, "run_page_hidden_characters")

    author.goto(f"{daphne_server}/runs/")
    assert_shown(author.locator(f'a[href="/runs/{run_id}/"][title]'), "the runs list")
    title = author.locator(f'a[href="/runs/{run_id}/"][title]').first.get_attribute("title")
    assert "\u202e" not in title and "\u27e8U+202E\u27e9" in title
    screenshot(author, "runs_list_hidden_characters", full_page=False)

    author.goto(f"{daphne_server}/")  # the new-goal page lists the author's recent runs
    assert_shown(author.locator(".run-row-goal"), "the new-goal page's recent runs")

    author.goto(f"{daphne_server}/runs/{run_id}/audit/")
    assert_shown(author.locator(".goal-text"), "the audit page")
    expect(author.locator("main")).to_contain_text("\u27e8U+202E\u27e9txt.exe")

    reviewer = sign_in("reviewer")
    reviewer.goto(f"{daphne_server}/approvals/")
    group = reviewer.locator(f'[id^="group-{run_id}-"]').first
    expect(group).to_contain_text("send_email")
    assert_shown(group.locator(".goal-text"), "the inbox")
    screenshot(reviewer, "inbox_hidden_characters")
    assert re.search(r"\u27e8U\+202E\u27e9", reviewer.locator("main").inner_text())
