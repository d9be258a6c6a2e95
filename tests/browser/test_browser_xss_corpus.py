"""Hostile goals, tool results, errors and answers stay inert text on every page and the graph."""

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# Each payload either opens a dialog or sets window.__pwned if it ever runs.
CORPUS = [
    "<script>window.__pwned=1</script>",
    "<script>alert(1)</script>",
    '<div hx-get="/runs/" hx-trigger="load" hx-on::load="window.__pwned=1">hx load</div>',
    '<button hx-post="/approvals/decide/" hx-on:click="window.__pwned=1">hx click</button>',
    '<a href="javascript:window.__pwned=1">js link</a>',
    '<a href="java\nscript:window.__pwned=1">split js link</a>',
    '<a href="JaVaScRiPt:window.__pwned=1">mixed case link</a>',
    "[md link](javascript:window.__pwned=1)",
    "data:image/svg+xml,<svg onload=window.__pwned=1>",
    '<img src="data:image/svg+xml,<svg onload=alert(1)>">',
    '<svg><set attributeName="onmouseover" to="window.__pwned=1"/></svg>',
    "<img src=x onerror=window.__pwned=1>",
    '"><svg/onload=window.__pwned=1>',
    "'><img src=x onerror=alert(1)>",
    '<iframe src="javascript:window.__pwned=1"></iframe>',
    '"]; x [label="',
    '"]; x [URL="javascript:window.__pwned=1" label="',
    "line one\nline two {braces} } {",
]
HOSTILE_GOAL = "Echo these: " + " ".join(text.replace("\n", " ") for text in CORPUS[:8])
PARKED_GOAL = "Email about " + CORPUS[12]
SUBJECT = '<img src=x onerror=window.__pwned=1> "]; x [label="\'><svg/onload=alert(1)>'

# Attributes through which a string would run, load or fire a request if the page had one.
DANGEROUS_DOM = """() => {
  const problems = [];
  const risky = /^(on|hx-|href$|src$|srcdoc$|action$|formaction$|xlink:href$|to$|values$|style$)/i;
  for (const element of document.querySelectorAll("*")) {
    for (const attribute of element.attributes) {
      const value = attribute.value;
      if (risky.test(attribute.name) && /__pwned|alert\\(/.test(value)) {
        problems.push(`<${element.localName} ${attribute.name}=${value.slice(0, 60)}>`);
      }
      if (/^on/i.test(attribute.name)) problems.push(`<${element.localName} ${attribute.name}>`);
    }
    const name = element.localName;
    if (["iframe", "object", "embed", "set", "animate", "foreignobject"].includes(name)) {
      problems.push(`<${name}>`);
    }
    if (name === "img" && element.getAttribute("src") === "x") problems.push("<img src=x>");
    if (name === "script" && !element.src && /__pwned|alert\\(/.test(element.textContent)
        && !/json/.test(element.type)) {
      problems.push("an inline script with a payload");
    }
  }
  return problems;
}"""


@pytest.fixture
def watched(sign_in):
    """watched("author") -> a signed-in page; dialogs and javascript:/data: requests are kept."""
    seen = {"dialogs": [], "requests": []}

    def open_as(username):
        page = sign_in(username)
        page.on("dialog", lambda dialog: (seen["dialogs"].append(dialog.message), dialog.dismiss()))
        page.on(
            "request",
            lambda request: (
                request.url.lower().startswith(("javascript:", "data:"))
                and seen["requests"].append(request.url)
            ),
        )
        return page

    open_as.seen = seen
    return open_as


def assert_inert(page, where, seen):
    assert page.evaluate("typeof window.__pwned") == "undefined", f"a payload ran on {where}"
    assert page.evaluate(DANGEROUS_DOM) == [], f"live markup on {where}"
    assert seen["dialogs"] == [], f"a dialog opened on {where}: {seen['dialogs']}"
    assert seen["requests"] == [], f"{where} asked for {seen['requests']}"


def poke(page, locator):
    """Hover and click every match (not links or buttons), as a curious reader would."""
    for index in range(min(locator.count(), 8)):
        element = locator.nth(index)
        if element.is_visible():
            element.hover()
            element.click(position={"x": 2, "y": 2})


def run_goal(manage, plan_file, goal, steps, *extra):
    """Run a plan through manage.py run_goal as the demo author; returns the run's id."""
    plan_file.write_text(json.dumps({"steps": steps}), encoding="utf-8")
    result = manage(
        "run_goal",
        goal,
        "--plan-file",
        str(plan_file),
        "--author",
        "author",
        "--json",
        *extra,
        AGENTSITE_MAX_PLAN_STEPS="50",
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)["run_id"]


def test_a_hostile_corpus_is_inert_text_on_every_page_and_in_the_graph(
    watched, manage, daphne_server, tmp_path
):
    echoes = [
        {"id": number, "tool": "echo", "args": {"text": text}, "depends_on": []}
        for number, text in enumerate(CORPUS, start=1)
    ]
    explode = {
        "id": len(CORPUS) + 1,
        "tool": "explode",
        "args": {"message": " ".join(CORPUS)},
        "depends_on": [],
    }
    run_id = run_goal(
        manage, tmp_path / "hostile.json", HOSTILE_GOAL, [*echoes, explode], "--approve-all"
    )
    email = {
        "id": 1,
        "tool": "send_email",
        "args": {"to": "x@example.com", "subject": SUBJECT, "body": "\n".join(CORPUS)},
        "depends_on": [],
    }
    parked_id = run_goal(
        manage, tmp_path / "parked.json", PARKED_GOAL, [echoes[0], {**email, "id": 2}]
    )

    author = watched("author")
    seen = watched.seen
    author.goto(f"{daphne_server}/")
    author.get_by_label("Goal").fill("\n".join(CORPUS))
    author.get_by_label("Goal").hover()
    assert_inert(author, "the new-goal page", seen)

    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text(re.compile("failed|completed"))
    expect(author.locator("#answer-text")).to_contain_text("__pwned")
    for number in (1, 5, 10, 11, 12, len(CORPUS) + 1):
        author.locator(f"#graph g#step-{number}").click()
        expect(author.locator(f'#step-panel [data-step="{number}"]')).to_be_visible()
        poke(author, author.locator("#step-panel pre"))
    poke(author, author.locator("#answer-text, h1, .goal-text, #steps td:not(.step-id)"))
    assert_inert(author, "the run page", seen)

    author.goto(f"{daphne_server}/runs/")
    expect(author.locator("body")).to_contain_text("Echo these")
    poke(author, author.locator("td:not(:has(a))"))
    assert_inert(author, "the runs list", seen)

    author.goto(f"{daphne_server}/runs/{run_id}/audit/")
    poke(author, author.locator(".goal-text, .answer-text, .step-error"))
    assert_inert(author, "the audit page", seen)

    exported = author.request.get(f"{daphne_server}/runs/{run_id}/export.json")
    assert exported.ok
    assert "<" not in exported.text() and ">" not in exported.text()
    assert CORPUS[0] in exported.text().replace("\\u003c", "<").replace("\\u003e", ">")

    author.goto(f"{daphne_server}/runs/{run_id}/graph.svg")
    expect(author.locator("svg")).to_be_visible()
    for node in author.locator("g.node").all():
        node.hover()
        node.click()
    assert_inert(author, "graph.svg", seen)

    reviewer = watched("reviewer")
    reviewer.goto(f"{daphne_server}/approvals/")
    group = reviewer.locator(f'[id^="group-{parked_id}-"]').first
    expect(group).to_contain_text("send_email")
    poke(reviewer, group.locator("pre, td, .goal-text"))
    assert_inert(reviewer, "the inbox", seen)

    operator = watched("operator")
    for path in ("/runs/", f"/runs/{parked_id}/audit/", "/costs/"):
        operator.goto(f"{daphne_server}{path}")
        assert_inert(operator, path, seen)
