"""Cited answers: citations checked against the steps, figures against their results."""

import json

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from plans.engine.citations import CITATION, FIGURE, _known_values, _value, answer_check
from plans.llm.offline import PRICE_GOAL
from plans.models import Run, RunEvent
from plans.runtime.advance import advance_run
from plans.services.runs import run_create

OUTCOMES = [
    {"id": 1, "status": "succeeded", "args": {"item": "iPhone 16"}, "result": 79900},
    {"id": 2, "status": "succeeded", "args": {"item": "AirPods 4"}, "result": 12900},
    {"id": 3, "status": "failed", "args": {"expression": "79900 + 12900"}, "result": None},
]


def test_a_wrong_figure_and_a_citation_of_a_failed_step_are_both_flagged():
    check = answer_check(
        "The total is INR 95,000 [step 3]; the iPhone is 79,900 [step 1].", OUTCOMES
    )

    assert [f.text for f in check.unsupported] == ["95,000"]
    assert [(c.step, c.valid, c.reason) for c in check.citations] == [
        (3, False, "step 3 failed"),
        (1, True, ""),
    ]
    assert not check.ok


def test_figures_from_results_or_call_arguments_and_names_are_not_flagged():
    check = answer_check(
        "An iPhone 16 costs 79900.00 and AirPods 4 cost 12,900 [step 2]; 79900 + 12900 [step 1].",
        OUTCOMES,
    )
    assert check.unsupported == [] and check.ok


def test_a_citation_of_a_step_that_does_not_exist_is_not_valid():
    (citation,) = answer_check("As shown [step 7].", OUTCOMES).citations
    assert not citation.valid and citation.reason == "there is no step 7"


def test_dates_are_figures_too():
    check = answer_check("It ships on 2026-12-19 [step 1].", OUTCOMES)
    assert [f.text for f in check.unsupported] == ["2026-12-19"]


db = pytest.mark.django_db(transaction=True)


@db
def test_the_offline_model_cites_correctly_and_the_check_is_on_record(author, client):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)
    run.refresh_from_db()

    assert run.status == Run.Status.COMPLETED
    assert "[step 1]" in run.answer
    assert run.answer_check["ok"], run.answer_check
    assert all(c["valid"] for c in run.answer_check["citations"])
    event = RunEvent.objects.get(run=run, kind="answer_checked")
    assert event.payload["ok"] is True
    assert event.payload["cited"] == len(run.answer_check["citations"]) > 0
    assert "citations" not in event.payload  # a summary: the run holds every span
    client.force_login(author)
    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()
    step_1 = reverse("plans:step_detail", args=[run.pk, 1])
    assert f'<a class="citation" href="{step_1}"' in page
    export = json.loads(
        b"".join(client.get(reverse("plans:run_export", args=[run.pk])).streaming_content)
    )
    assert export["run"]["answer_check"]["ok"] is True


@db
def test_the_run_page_and_audit_flag_a_wrong_figure_and_a_bad_citation(author, client):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)
    answer = "The total is <b>INR 95,000</b> [step 9]."
    outcomes = [{"id": 1, "status": "succeeded", "args": {}, "result": 79900}]
    Run.objects.filter(pk=run.pk).update(
        answer=answer, answer_check=answer_check(answer, outcomes).as_json()
    )
    client.force_login(author)

    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()
    assert (
        '<mark class="unsupported-figure" title="This figure appears in no step result">'
        "95,000</mark>" in page
    )
    assert "citation not valid: there is no step 9" in page
    assert "&lt;b&gt;INR " in page and "<b>INR" not in page  # the answer's own text is escaped
    audit = client.get(reverse("plans:run_audit", args=[run.pk])).content.decode()
    assert "figure “95,000”: appears in no step result" in audit
    assert "not valid: there is no step 9" in audit


def _answer_check_by_rescanning(answer, outcomes):
    """The check as first written (every figure against every citation span): the oracle."""
    spans = [(m.start(), m.end()) for m in CITATION.finditer(answer)]
    known = _known_values(outcomes)
    return [
        (m.group(0), m.start())
        for m in FIGURE.finditer(answer)
        if not any(s <= m.start() < e for s, e in spans) and _value(m.group(0)) not in known
    ]


@given(
    st.lists(
        st.sampled_from(
            [
                "[step 1]",
                "[step 22]",
                "[ step 3 ]",
                "79,900",
                "95000",
                "2026-12-19",
                "16",
                " ",
                "A-1001",
                "iPhone 16",
                ".",
                "4.50",
                "[step",
                "]",
            ]
        ),
        max_size=60,
    )
)
def test_the_linear_scan_flags_exactly_what_comparing_every_span_would(pieces):
    answer = "".join(pieces)
    outcomes = [{"id": 1, "status": "succeeded", "args": {}, "result": 79900}]

    flagged = [(f.text, f.start) for f in answer_check(answer, outcomes).unsupported]

    assert flagged == _answer_check_by_rescanning(answer, outcomes)


def test_the_event_summarises_a_long_answers_check_and_the_run_keeps_every_span():
    outcomes = [{"id": n, "status": "succeeded", "args": {}, "result": n} for n in range(1, 401)]
    answer = " ".join(f"Item {n} is {n * 7} [step {n}] [step {n + 1000}]." for n in range(1, 401))

    check = answer_check(answer, outcomes)
    summary = check.summary()

    assert len(check.citations) == 800 and len(check.as_json()["citations"]) == 800
    assert summary["cited"] == 800
    assert summary["citations_invalid_count"] == 400
    assert len(summary["citations_invalid"]) == 20
    assert summary["citations_invalid"][0] == {"step": 1001, "reason": "there is no step 1001"}
    assert summary["figures_unsupported"] == len(check.unsupported) > 0
    assert summary["ok"] is False


def test_step_numbers_and_figures_of_a_step_error_are_facts_of_the_run():
    outcomes = [
        {"id": 1, "status": "succeeded", "args": {"order_id": "A-1001"}, "result": 2499},
        {
            "id": 3,
            "status": "failed",
            "args": {"to": "x@example.com"},
            "result": None,
            "error": "[Errno 111] Connection refused",
        },
    ]
    check = answer_check(
        "Step 3 (send_email) failed: [Errno 111] Connection refused. The total was 2499 [step 1].",
        outcomes,
    )
    assert check.unsupported == [] and check.ok
    # A figure that is in no result, argument or error is still flagged.
    flagged = answer_check("Step 3 (send_email) failed after 112 tries.", outcomes)
    assert [f.text for f in flagged.unsupported] == ["112"]
