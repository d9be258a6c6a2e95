"""/api/v1/questions/: the ask_human questions put to you, and answering one (the inbox's rule)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja import Router

from plans.api.approvals import DECISION_ERRORS
from plans.api.errors import ErrorOut, not_found
from plans.api.runs import run_url
from plans.api.schemas import AnsweredOut, AnswerIn, QuestionOut
from plans.selectors.approvals import question_visible, questions_waiting
from plans.services.questions import question_answer

router = Router(tags=["questions"])


@router.get(
    "/questions/",
    response={200: list[QuestionOut], 401: ErrorOut},
    summary="Questions asked of you (ask_human): as the run's author or in one of your roles",
)
def list_questions(request: HttpRequest) -> list[dict[str, Any]]:
    return [
        {
            "id": question.pk,
            "run": question.run_id,
            "run_url": run_url(request, question.run_id),
            "goal": question.run.goal.text,
            "author": question.run.goal.author.get_username(),
            "step": question.step.step_id,
            "question": question.question,
            "choices": [str(choice) for choice in question.choices],
            "audience": question.audience,
            "asked_at": question.asked_at,
            "deadline": question.deadline,
        }
        for question in questions_waiting(request.user)
    ]


@router.post(
    "/questions/{int:question_id}/answer/",
    response={200: AnsweredOut, **DECISION_ERRORS},
    summary="Answer a question; the run continues with the answer as the step's result",
    description="The same rule as the inbox: the run's author answers a question for the "
    "author, a member of the role one for a role (403 not_in_audience). An answer is final: "
    "409 already_answered, or question_expired once its time limit passed.",
)
def answer(request: HttpRequest, question_id: int, body: AnswerIn) -> dict[str, Any]:
    user: User = request.user  # type: ignore[assignment]
    in_range = 0 < question_id < 2**63  # a larger id names no row (and overflows SQLite)
    question = question_visible(user, question_id) if in_range else None
    if question is None:
        raise not_found("question")
    question_answer(question=question, user=user, answer=body.answer)
    answered = question_visible(user, question.pk)
    assert answered is not None and answered.answered_by is not None
    return {
        "id": answered.pk,
        "run": answered.run_id,
        "step": answered.step.step_id,
        "state": answered.state,
        "answer": answered.answer,
        "answered_by": answered.answered_by.get_username(),
        "answered_at": answered.answered_at,
    }
