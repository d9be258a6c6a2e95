"""Every page, walked with hidden characters in every text a person or a tool can put there:
none reaches the page raw, outside the <pre> JSON blocks (which write them as \\u escapes)."""

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# Bidi controls, zero-width and other invisible characters, a line separator, a tag character.
CORPUS = "\u202egnp.exe\u2066\u200b\ufeff\U000e0041\u2028"
GOAL = f"Pay invoice {CORPUS} today"
ANSWER = f"yes {CORPUS}"
REASON = f"not this one {CORPUS}"

# What a page must never show raw: C0/C1 controls (but tab and newlines), format characters
# (bidi, zero-width, the BOM), line and paragraph separators, tag characters.
RAW_HIDDEN = (
    r"/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u00ad\u061c\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
    r"|\udb40[\udc00-\udc7f]/"
)
FIND_RAW = f"""() => {{
  const bad = {RAW_HIDDEN};
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {{
    const inJson = node.parentElement && node.parentElement.closest("pre.json");
    if (!inJson && bad.test(node.nodeValue)) found.push("text: " + JSON.stringify(node.nodeValue));
  }}
  for (const element of document.querySelectorAll("*")) {{
    for (const attribute of element.attributes) {{
      if (bad.test(attribute.value)) found.push(element.tagName + "[" + attribute.name + "]");
    }}
    if ((element.tagName === "TEXTAREA" || element.tagName === "INPUT") && bad.test(element.value))
      found.push(element.tagName + ".value " + JSON.stringify(element.value));
  }}
  if (bad.test(document.title)) found.push("title");
  return found;
}}"""


def assert_no_raw_hidden(page, where):
    found = page.evaluate(FIND_RAW)
    assert found == [], f"{where} ({page.url}) shows hidden characters raw: {found[:5]}"


def test_no_page_shows_a_hidden_character_raw(sign_in, manage, daphne_server, tmp_path, ends_runs):
    steps = [
        {
            "id": 1,
            "tool": "send_email",
            "args": {"to": "x@example.com", "subject": GOAL, "body": "b"},
        },
        {"id": 2, "tool": "explode", "args": {"message": f"refused: {CORPUS}"}},
        {"id": 3, "tool": "echo", "args": {"text": f"echoed {CORPUS}"}},
        {"id": 4, "tool": "ask_human", "args": {"question": f"Really {CORPUS}?"}},
    ]
    plan_file = tmp_path / "corpus.json"
    plan_file.write_text(json.dumps({"steps": steps}), encoding="utf-8")
    made = manage("run_goal", GOAL, "--plan-file", str(plan_file), "--author", "author", "--json")
    assert made.stdout.strip(), made.stderr
    run_id = json.loads(made.stdout)["run_id"]
    ends_runs(run_id)
    base = f"{daphne_server}"
    run_pages = [
        f"/runs/{run_id}/",
        f"/runs/{run_id}/audit/",
        f"/runs/{run_id}/fork/",
        f"/runs/{run_id}/again/",
        *(f"/runs/{run_id}/steps/{step}/" for step in (1, 2, 3, 4)),
    ]

    author = sign_in("author")
    author.goto(f"{base}/approvals/")
    card = author.locator(".question-card").filter(has_text=f"Run #{run_id}")
    expect(card).to_contain_text("\u27e8U+202E\u27e9gnp.exe")
    assert_no_raw_hidden(author, "the inbox with a question")
    for path in ["/", "/runs/", *run_pages]:
        author.goto(f"{base}{path}")
        assert_no_raw_hidden(author, f"{path} while the run waits")

    author.goto(f"{base}/approvals/")
    card.get_by_label(re.compile("Your answer")).fill(ANSWER)
    card.get_by_role("button", name="Answer", exact=True).click()
    expect(author.locator(".messages")).to_contain_text(f"of run #{run_id}")
    reviewer = sign_in("reviewer")
    reviewer.goto(f"{base}/approvals/")
    group = reviewer.locator(f"#group-{run_id}-1")
    expect(group).to_contain_text("send_email")
    assert_no_raw_hidden(reviewer, "the inbox with an approval")
    group.get_by_label("Reason").fill(REASON)
    group.get_by_role("button", name="Reject", exact=True).click()
    expect(group.locator(".decision-stamp")).to_contain_text("rejected")

    author.goto(f"{base}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("blocked")
    expect(author.locator("#answer-text")).to_contain_text("\u27e8U+202E\u27e9")
    for path in ["/", "/runs/", *run_pages]:
        author.goto(f"{base}{path}")
        assert_no_raw_hidden(author, f"{path} after the run ended")
    operator = sign_in("operator")
    for path in ["/costs/", "/evals/", "/settings/", "/webhooks/", f"/runs/{run_id}/audit/"]:
        operator.goto(f"{base}{path}")
        assert_no_raw_hidden(operator, path)
