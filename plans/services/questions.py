"""Where ask_human questions are answered by a person, or expire unanswered.

The executor's side (asking, parking, turning the answer into the step's result) is
plans.runtime.steps; this module records people's answers and the time limit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from plans.journal.events import INBOX_GROUP, append_events, group_send
from plans.journal.tasks import run_enqueue
from plans.models import HumanQuestion, Run
from plans.roles import questions_answerable
from plans.services.refusals import Refused, text_clean

ANSWER_MAX_CHARS = 10_000


class AnswerRefused(Refused):
    """An answer that cannot be recorded; nothing was changed. Codes: answer_invalid,
    not_in_audience, already_answered, question_expired, run_ended, not_a_choice."""


def question_audience_includes(*, question: HumanQuestion, user: User | AnonymousUser) -> bool:
    """May this person answer? The run's author, or a member of the question's role
    (roles.questions_answerable, which the inbox and the API list by)."""
    answerable = HumanQuestion.objects.filter(pk=question.pk).filter(questions_answerable(user))
    return answerable.exists()


def question_answer(*, question: HumanQuestion, user: User | AnonymousUser, answer: str) -> None:
    """Record a person's answer; the run continues with it as the step's result."""
    answer = text_clean(
        answer,
        refused=AnswerRefused,
        code="answer_invalid",
        holds="The answer holds",
        empty="Type an answer (or pick a choice) first.",
        max_chars=ANSWER_MAX_CHARS,
        too_long="An answer may be at most {limit:,} characters.",
    )
    with transaction.atomic():
        locked = (
            HumanQuestion.objects.select_for_update(of=("self",))
            .select_related("run__goal", "step", "answered_by")
            .get(pk=question.pk)
        )
        if not question_audience_includes(question=locked, user=user):
            who = "the run's author" if locked.audience == "author" else f"the {locked.audience}"
            raise AnswerRefused("not_in_audience", f"This question is for {who}.")
        if locked.state == HumanQuestion.State.EXPIRED:
            raise AnswerRefused(
                "question_expired",
                "This question expired unanswered: its step failed and it is not asked again.",
            )
        if locked.state != HumanQuestion.State.PENDING:
            who = locked.answered_by.get_username() if locked.answered_by else "someone"
            raise AnswerRefused(
                "already_answered",
                f"This question was already answered by {who}; an answer is final.",
            )
        if locked.run.is_terminal or locked.run.cancel_requested:
            raise AnswerRefused(
                "run_ended", f"The run has ended ({locked.run.status}); nothing to answer."
            )
        if locked.choices and answer not in locked.choices:
            raise AnswerRefused(
                "not_a_choice", "Pick one of the choices: " + ", ".join(locked.choices) + "."
            )
        assert isinstance(user, User)
        locked.state = HumanQuestion.State.ANSWERED
        locked.answer = answer
        locked.answered_by = user
        locked.answered_at = timezone.now()
        locked.save()
        append_events(locked.run_id, [answered_event(locked)])
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
        if locked.run.status == Run.Status.AWAITING_APPROVAL:
            run_enqueue(locked.run_id)


def questions_expire() -> list[int]:
    """Expire questions unanswered for AGENTSITE_APPROVAL_TTL_S; returns their runs' ids."""
    cutoff = timezone.now() - timedelta(seconds=settings.AGENTSITE_APPROVAL_TTL_S)
    stale = list(
        HumanQuestion.objects.filter(state=HumanQuestion.State.PENDING, asked_at__lt=cutoff)
        .exclude(run__status__in=Run.TERMINAL)
        .values_list("pk", flat=True)
    )
    runs: set[int] = set()
    for question_id in stale:
        with transaction.atomic():
            question = (
                HumanQuestion.objects.select_for_update(of=("self",))
                .select_related("step", "run")
                .get(pk=question_id)
            )
            if question.state != HumanQuestion.State.PENDING:
                continue  # answered in the meantime
            question.state = HumanQuestion.State.EXPIRED
            question.answered_at = timezone.now()
            question.save()
            append_events(question.run_id, [answered_event(question)])
            if question.run.status == Run.Status.AWAITING_APPROVAL:
                run_enqueue(question.run_id)
            runs.add(question.run_id)
    if stale:
        transaction.on_commit(lambda: group_send(INBOX_GROUP, {"type": "inbox.changed"}))
    return sorted(runs)


def answered_event(question: HumanQuestion) -> tuple[str, dict[str, Any]]:
    """The run event recording an answer, or that none came in time."""
    payload: dict[str, Any] = {
        "question": question.pk,
        "step": question.step.step_id,
        "state": question.state,
        "at": question.answered_at.isoformat() if question.answered_at else None,
    }
    if question.state == HumanQuestion.State.ANSWERED:
        assert question.answered_by is not None
        payload["answer"] = question.answer
        payload["answered_by"] = question.answered_by.get_username()
    else:
        payload["error"] = question_expired_error()
    return ("question_answered", payload)


def question_expired_error() -> str:
    """The step error when nobody answered an ask_human question within the approval TTL."""
    ttl = settings.AGENTSITE_APPROVAL_TTL_S
    return f"no one answered the question within the time limit ({ttl:g} s); not asked again"
