"""Answering an ask_human question from the inbox."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from plans.selectors.approvals import question_get
from plans.services.questions import AnswerRefused, question_answer
from plans.views.forms import QuestionAnswerForm
from plans.views.params import SignedInRequest


@require_POST
def answer(request: SignedInRequest, question_id: int) -> HttpResponse:
    """Record the answer; the run continues with it as the step's result."""
    question = question_get(question_id)
    if question is None:
        raise Http404("No such question.")
    form = QuestionAnswerForm(request.POST)
    form.is_valid()  # both fields are optional text: always valid
    try:
        question_answer(question=question, user=request.user, answer=form.text)
    except AnswerRefused as refused:
        messages.error(request, str(refused))
    else:
        messages.success(
            request, f"Answered step {question.step.step_id} of run #{question.run_id}."
        )
    return redirect("plans:inbox")
