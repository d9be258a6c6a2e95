"""Cited answers: citations checked against the steps, figures against their results."""

import json

import pytest
from django.urls import reverse

from plans.engine.citations import answer_check
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
