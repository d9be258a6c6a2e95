"""ask_human: a step that asks a person, parks the run, and continues with the answer."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from plans.llm.offline import CONFIRMED_REFUND_GOAL
from plans.models import Approval, HumanQuestion, LedgerEntry, Run, RunEvent, Step
from plans.runtime.advance import advance_run
from plans.runtime.launching import answer_value
from plans.runtime.sweeper import sweep_once
from plans.selectors.approvals import questions_waiting
from plans.services.approvals import approval_decide
from plans.services.questions import AnswerRefused, question_answer
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


def ask_plan(**ask_args):
    return {
        "steps": [
            {"id": 1, "tool": "ask_human", "args": ask_args, "depends_on": []},
            {"id": 2, "tool": "calculator", "args": {"expression": "{{1}} * 2"}, "depends_on": [1]},
        ]
    }


def start(author, plan):
    run = run_create(author=author, goal_text="double what a person says", plan_data=plan)
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def step(run, step_id):
    return Step.objects.get(plan__run=run, step_id=step_id)


def test_an_ask_human_step_parks_the_run_with_a_question_for_the_author(author):
    run = start(author, ask_plan(question="Pick a number"))

    question = HumanQuestion.objects.get(run=run)
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert run.lease_token is None  # parked: holds no worker
    assert question.question == "Pick a number"
    assert question.audience == "author"
    assert step(run, 1).status == Step.Status.AWAITING_APPROVAL
    assert questions_waiting(author) == [question]
    assert RunEvent.objects.filter(run=run, kind="question_asked").count() == 1


def test_the_answer_becomes_the_steps_result_and_the_run_finishes_with_it(author):
    run = start(author, ask_plan(question="Pick a number"))

    question_answer(question=HumanQuestion.objects.get(run=run), user=author, answer=" 21 ")

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert step(run, 1).result == 21
    assert step(run, 2).result == 42
    answered = RunEvent.objects.get(run=run, kind="question_answered").payload
    assert answered["answer"] == "21"
    assert answered["answered_by"] == "alice"
    assert answered["at"]
    question = HumanQuestion.objects.get(run=run)
    assert question.answered_by == author and question.answered_at is not None


def test_only_the_audience_may_answer_and_an_answer_is_final(author, outsider, reviewer):
    run = start(author, ask_plan(question="Pick a number"))
    question = HumanQuestion.objects.get(run=run)

    with pytest.raises(AnswerRefused, match="for the run's author"):
        question_answer(question=question, user=outsider, answer="1")
    with pytest.raises(AnswerRefused, match="for the run's author"):
        question_answer(question=question, user=reviewer, answer="1")
    assert questions_waiting(outsider) == []
    question_answer(question=question, user=author, answer="1")
    with pytest.raises(AnswerRefused, match="already answered"):
        question_answer(question=question, user=author, answer="2")
    assert step(run, 1).result == 1


def test_a_question_for_a_role_goes_to_its_members_and_choices_are_enforced(author, reviewer):
    Group.objects.get_or_create(name="reviewers")[0].user_set.add(reviewer)
    run = start(author, ask_plan(question="Which?", choices=["3", "4"], audience="reviewers"))
    question = HumanQuestion.objects.get(run=run)

    assert questions_waiting(author) == []
    assert questions_waiting(reviewer) == [question]
    with pytest.raises(AnswerRefused, match="Pick one of the choices: 3, 4"):
        question_answer(question=question, user=reviewer, answer="5")
    question_answer(question=question, user=reviewer, answer="4")
    assert step(run, 2).result == 8


def test_an_unanswered_question_expires_with_the_approval_ttl_and_its_dependants_are_skipped(
    author, settings
):
    run = start(author, ask_plan(question="Pick a number"))
    HumanQuestion.objects.filter(run=run).update(
        asked_at=HumanQuestion.objects.get(run=run).asked_at - timedelta(hours=1)
    )
    settings.AGENTSITE_APPROVAL_TTL_S = 60

    sweep_once()  # expires it; the continuation runs inline

    run.refresh_from_db()
    first, second = step(run, 1), step(run, 2)
    assert first.status == Step.Status.FAILED
    assert "no one answered the question within the time limit (60 s)" in first.error
    assert second.status == Step.Status.SKIPPED
    assert HumanQuestion.objects.get(run=run).state == HumanQuestion.State.EXPIRED
    assert run.is_terminal


def test_an_answer_is_never_reused_by_another_ask_human_step(author):
    plan = {
        "steps": [
            {"id": 1, "tool": "ask_human", "args": {"question": "Again?"}, "depends_on": []},
            {"id": 2, "tool": "ask_human", "args": {"question": "Again?"}, "depends_on": [1]},
        ]
    }
    run = start(author, plan)
    question_answer(question=HumanQuestion.objects.get(run=run), user=author, answer="yes")

    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert HumanQuestion.objects.filter(run=run).count() == 2
    assert not step(run, 2).reused_from


def test_the_offline_demo_refunds_the_amount_the_author_confirmed(author, reviewer):
    run = run_create(author=author, goal_text=CONFIRMED_REFUND_GOAL)
    advance_run(run.pk)
    question = HumanQuestion.objects.get(run=run)
    assert "INR 92800" in question.question

    question_answer(question=question, user=author, answer="500")
    refund = Approval.objects.get(run=run, tool="issue_refund")
    assert refund.requested_args["amount_inr"] == 500
    approval_decide(approval=refund, reviewer=reviewer, approve=True)
    approval_decide(
        approval=Approval.objects.get(run=run, tool="send_email"), reviewer=reviewer, approve=True
    )

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert LedgerEntry.objects.get(kind="refund").details["amount_inr"] == 500
    assert "INR 500" in run.answer


def test_the_inbox_shows_the_question_and_takes_the_answer(client, author):
    run = start(author, ask_plan(question="Pick a <b>number</b>"))
    question = HumanQuestion.objects.get(run=run)
    client.force_login(author)

    page = client.get(reverse("plans:inbox")).content.decode()
    assert "Pick a &lt;b&gt;number&lt;/b&gt;" in page
    response = client.post(
        reverse("plans:question_answer", args=[question.pk]), {"answer": "5"}, follow=True
    )

    assert "Answered step 1" in response.content.decode()
    assert step(run, 2).result == 10


@pytest.mark.parametrize(
    ("typed", "value"),
    [("500", 500), ("1,000", 1000), ("2.5", 2.5), ("yes", "yes"), ("nan", "nan")],
)
def test_an_answer_is_a_number_when_it_reads_as_one(typed, value):
    assert answer_value(typed) == value


def test_a_react_run_can_ask_a_person_and_the_next_turn_sees_the_answer(author, monkeypatch):
    import json

    from plans.llm import offline
    from plans.models import Goal

    seen = []
    replies = iter(
        [
            json.dumps({"tool": "ask_human", "args": {"question": "Which item?"}}),
            json.dumps({"answer": "You chose the iPhone 16."}),
        ]
    )

    def scripted(goal, outcomes, *, final=False):
        seen.append([(o["tool"], o["status"], o["result"]) for o in outcomes])
        return next(replies)

    monkeypatch.setattr(offline, "react_turn", scripted)
    run = run_create(author=author, goal_text="pick one", agent=Goal.Agent.REACT)
    advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL

    question_answer(question=HumanQuestion.objects.get(run=run), user=author, answer="iPhone 16")

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert seen[-1] == [("ask_human", "succeeded", "iPhone 16")]


def test_the_nav_badge_counts_the_questions_a_person_is_asked(author, outsider):
    from plans.selectors.approvals import pending_approvals_count

    start(author, ask_plan(question="Pick a number"))
    assert pending_approvals_count(author) == 1
    assert pending_approvals_count(outsider) == 0
