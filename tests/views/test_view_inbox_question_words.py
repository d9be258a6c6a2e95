"""The inbox words a question as one: it waits for an answer, not a decision, and its card says
how long it has waited as the approval cards do ("asked just now", never "waiting 0 minutes")."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from plans.llm.offline import CONFIRMED_REFUND_GOAL
from plans.models import HumanQuestion, Run
from plans.runtime.advance import advance_run
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


def question_eyebrow(page):
    card = page[page.index('class="card decision-group question-card"') :]
    return re.sub(r"\s+", " ", card[card.index('class="eyebrow"') :].split("</p>")[0])


def test_a_question_card_says_how_long_it_has_waited(client, author):
    run = run_create(author=author, goal_text=CONFIRMED_REFUND_GOAL)
    advance_run(run.pk)
    assert Run.objects.get(pk=run.pk).status == Run.Status.AWAITING_APPROVAL
    client.force_login(author)

    fresh = question_eyebrow(client.get(reverse("plans:inbox")).content.decode())
    HumanQuestion.objects.filter(run=run).update(
        asked_at=HumanQuestion.objects.get(run=run).asked_at - timedelta(minutes=5)
    )
    later = question_eyebrow(client.get(reverse("plans:inbox")).content.decode())

    assert "asked just now" in fresh and "0 minutes" not in fresh
    assert "waiting 5 minutes" in later


def test_the_queue_says_questions_wait_for_an_answer(client, reviewer):
    client.force_login(reviewer)
    page = client.get(reverse("plans:inbox")).content.decode()

    lede = page[page.index('class="lede"') :].split("</p>")[0]
    assert "questions waiting for an answer" in lede
    assert "questions waiting for a decision" not in lede
