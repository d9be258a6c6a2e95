"""Characters that change how text looks without showing themselves are shown to reviewers."""

import json

import pytest

from plans.models import Approval
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from plans.ui.charts import shown_json

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
