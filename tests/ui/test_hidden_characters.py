"""Characters that change how text looks without showing themselves are shown to reviewers."""

import json

import pytest

from plans.models import Approval
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from plans.ui.charts import shown_json, terminal_text

pytestmark = pytest.mark.django_db(transaction=True)

SPOOF = "invoice \u202egnp.exe"  # shows as "invoice exe.png"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (SPOOF, '"invoice \\u202egnp.exe"'),
        ("a\u200bb\u2028c\ufeff", '"a\\u200bb\\u2028c\\ufeff"'),
        ("tag \U000e0041", '"tag \\udb40\\udc41"'),
        ("café ✓ 😀 אבג", '"café ✓ 😀 אבג"'),  # visible letters and symbols stay as they are
    ],
)
def test_hidden_characters_are_written_as_escapes_that_read_back_the_same(value, shown):
    assert shown_json(value) == shown
    assert json.loads(shown_json({"v": value}, indent=2)) == {"v": value}


def test_a_c1_control_character_is_escaped_in_shown_json_too():
    # U+009B is a one-byte CSI to many terminals: as good as ESC [.
    assert shown_json("a\x9b2Kb\x85") == '"a\\u009b2Kb\\u0085"'


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ok\x1b[2K\rfine", "ok\u27e8U+001B\u27e9[2K\u27e8U+000D\u27e9fine"),
        (
            "back\x08\x08up \x7f\x9b",
            "back\u27e8U+0008\u27e9\u27e8U+0008\u27e9up \u27e8U+007F\u27e9\u27e8U+009B\u27e9",
        ),
        (SPOOF, "invoice \u27e8U+202E\u27e9gnp.exe"),
        ("zero\u200bwidth\u2066", "zero\u27e8U+200B\u27e9width\u27e8U+2066\u27e9"),
        ("two\nlines\tand a tab", "two\u27e8U+000A\u27e9lines\tand a tab"),
        ("café ✓ 😀 אבג", "café ✓ 😀 אבג"),
    ],
)
def test_terminal_text_spells_out_what_a_terminal_would_obey_or_hide(text, shown):
    assert terminal_text(text) == shown
    assert terminal_text("two\nlines\r", one_line=False) == "two\nlines\u27e8U+000D\u27e9"


def test_a_reviewer_sees_a_bidi_override_in_the_arguments_to_approve(client, author, reviewer):
    email = {"to": "a@example.com", "subject": SPOOF, "body": "see attachment"}
    steps = [{"id": 1, "tool": "send_email", "args": email, "depends_on": []}]
    run = run_create(author=author, goal_text="email", plan_data={"steps": steps})
    advance_run(run.pk)
    assert Approval.objects.filter(run=run).exists()
    client.force_login(reviewer)

    page = client.get("/approvals/").content.decode()

    assert "invoice \\u202egnp.exe" in page
    assert "\u202e" not in page
    client.force_login(author)
    svg = client.get(f"/runs/{run.pk}/graph.svg").content.decode()
    assert "\u202e" not in svg and "\\u202e" in svg


@pytest.mark.parametrize(
    ("text", "html"),
    [
        (
            SPOOF,
            'invoice <mark class="hidden-char" title="RIGHT-TO-LEFT OVERRIDE">'
            "\u27e8U+202E\u27e9</mark>gnp.exe",
        ),
        (
            "a\x1bb",
            'a<mark class="hidden-char" title="invisible character">\u27e8U+001B\u27e9</mark>b',
        ),
        ("<b>café ✓</b>\nline\ttab", "&lt;b&gt;café ✓&lt;/b&gt;\nline\ttab"),
        (None, ""),
        (42, "42"),
    ],
)
def test_the_shown_filter_escapes_text_and_spells_hidden_characters(text, html):
    from plans.templatetags.agentsite import shown

    assert shown(text) == html


def test_the_shown_filter_spells_hidden_characters_without_markup_for_attributes():
    from plans.templatetags.agentsite import shown

    assert shown('"' + SPOOF, "plain") == "&quot;invoice \u27e8U+202E\u27e9gnp.exe"


def test_a_spoofing_goal_is_spelled_out_on_the_run_page_list_inbox_and_audit(
    client, author, reviewer
):
    goal = "Pay invoice \u202egnp.exe"
    email = {"to": "a@example.com", "subject": "Invoice", "body": "paid"}
    steps = [{"id": 1, "tool": "send_email", "args": email, "depends_on": []}]
    run = run_create(author=author, goal_text=goal, plan_data={"steps": steps})
    advance_run(run.pk)
    client.force_login(author)
    pages = [f"/runs/{run.pk}/", "/runs/", f"/runs/{run.pk}/audit/"]
    shown = [client.get(path).content.decode() for path in pages]
    client.force_login(reviewer)
    shown.append(client.get("/approvals/").content.decode())

    for path, page in zip([*pages, "/approvals/"], shown, strict=True):
        assert "\u202e" not in page, path
        assert "\u27e8U+202E\u27e9</mark>gnp.exe" in page, path


def test_the_answer_question_cards_fork_page_and_replan_requests_show_hidden_characters(
    author, reviewer, client, settings
):
    from plans.llm.offline import CONFIRMED_REFUND_GOAL
    from plans.models import Run
    from plans.templatetags.citations import cited_answer

    settings.AGENTSITE_MODEL_BACKEND = "offline"
    spoof_goal = CONFIRMED_REFUND_GOAL + " \u202egnp.exe"
    run = run_create(author=author, goal_text=spoof_goal)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL  # the question waits
    client.force_login(author)

    inbox = client.get("/approvals/").content.decode()
    card = inbox[inbox.index('class="card decision-group question-card"') :].split("</form>")[0]
    fork = client.get(f"/runs/{run.pk}/fork/").content.decode()
    lede = fork[fork.index('<p class="lede">') :].split("</p>")[0]
    run.answer = "Paid \u202egnp.exe [step 1], total 92800."
    run.answer_check = None
    answer = str(cited_answer(run))

    for where, html in (("question card", card), ("fork page", lede), ("answer", answer)):
        assert "\u202e" not in html, f"the {where} shows U+202E raw"
        assert "\u27e8U+202E\u27e9" in html, f"the {where} hides U+202E"
