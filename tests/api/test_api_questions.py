"""The API's questions: a person lists the ask_human questions put to them and answers one,
through the inbox's service and rule (the run's author, or a member of the role asked); a
refusal answers with its code."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group

from plans.api.tokens import token_create
from plans.models import HumanQuestion, Run, Step
from plans.roles import roles_ensure
from plans.runtime.advance import advance_run
from plans.runtime.sweeper import sweep_once
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


def ask(author, **ask_args):
    plan = {
        "steps": [
            {"id": 1, "tool": "ask_human", "args": ask_args, "depends_on": []},
            {"id": 2, "tool": "calculator", "args": {"expression": "{{1}} * 2"}, "depends_on": [1]},
        ]
    }
    run = run_create(author=author, goal_text="double what a person says", plan_data=plan)
    advance_run(run.pk)
    return HumanQuestion.objects.get(run=run)


def bearer(user, *roles):
    groups = roles_ensure()
    user.groups.add(*(groups[role] for role in roles))
    _, raw = token_create(user=user, name="t", roles=roles)
    return {"Authorization": f"Bearer {raw}"}


def answer(client, question, headers, text):
    return client.post(
        f"/api/v1/questions/{question.pk}/answer/",
        {"answer": text},
        content_type="application/json",
        headers=headers,
    )


def test_the_author_lists_the_question_put_to_them_and_answers_it(client, author):
    question = ask(author, question="Pick a <b>number</b>", choices=["3", "4"])
    headers = bearer(author, "authors")

    (listed,) = client.get("/api/v1/questions/", headers=headers).json()
    assert listed["id"] == question.pk and listed["run"] == question.run_id
    assert listed["question"] == "Pick a <b>number</b>"  # JSON: as asked, a client escapes
    assert listed["choices"] == ["3", "4"] and listed["audience"] == "author"
    assert listed["step"] == 1 and listed["author"] == "alice"
    assert listed["deadline"] > listed["asked_at"]

    answered = answer(client, question, headers, "4")

    assert answered.status_code == 200, answered.content
    assert answered.json()["state"] == "answered"
    assert answered.json()["answered_by"] == "alice" and answered.json()["answer"] == "4"
    assert Step.objects.get(plan__run=question.run, step_id=2).result == 8
    assert Run.objects.get(pk=question.run_id).status == Run.Status.COMPLETED
    assert client.get("/api/v1/questions/", headers=headers).json() == []


def test_a_question_for_a_role_is_listed_and_answered_by_its_members_only(
    client, author, reviewer, django_user_model
):
    question = ask(author, question="Which?", audience="reviewers")
    member = bearer(reviewer, "reviewers")
    outsider = bearer(django_user_model.objects.create_user("olga"), "operators")

    assert client.get("/api/v1/questions/", headers=bearer(author, "authors")).json() == []
    assert client.get("/api/v1/questions/", headers=outsider).json() == []
    assert [q["id"] for q in client.get("/api/v1/questions/", headers=member).json()] == [
        question.pk
    ]

    refused = answer(client, question, outsider, "5")
    assert refused.status_code == 403
    assert refused.json()["code"] == "not_in_audience"
    assert refused.json()["detail"] == "This question is for the reviewers."
    assert answer(client, question, member, "5").status_code == 200


def test_an_answer_is_final_and_says_who_gave_it(client, author):
    question = ask(author, question="Pick a number")
    headers = bearer(author, "authors")
    assert answer(client, question, headers, "1").status_code == 200

    again = answer(client, question, headers, "2")

    assert again.status_code == 409
    assert again.json() == {
        "code": "already_answered",
        "detail": "This question was already answered by alice; an answer is final.",
    }


def test_an_expired_question_is_refused_as_expired(client, author, settings):
    question = ask(author, question="Pick a number", audience="operators")
    operator = bearer(author, "authors", "operators")  # an author who operates, her own run
    HumanQuestion.objects.filter(pk=question.pk).update(
        asked_at=question.asked_at - timedelta(hours=1)
    )
    settings.AGENTSITE_APPROVAL_TTL_S = 60
    sweep_once()  # expires it

    refused = answer(client, question, operator, "1")

    assert refused.status_code == 409
    assert refused.json()["code"] == "question_expired"


def test_a_token_answers_only_in_the_roles_it_carries(client, author, reviewer):
    question = ask(author, question="Which?", audience="reviewers")
    reviewer.groups.add(roles_ensure()["reviewers"], roles_ensure()["authors"])
    _, raw = token_create(user=reviewer, name="authoring only", roles=["authors"])
    authoring_only = {"Authorization": f"Bearer {raw}"}
    own = ask(author, question="Yours?")
    Group.objects.get(name="reviewers").user_set.add(author)
    _, raw = token_create(user=author, name="no authors role", roles=["reviewers"])

    assert client.get("/api/v1/questions/", headers=authoring_only).json() == []
    # Without the reviewers role the token does not even see the run: as if there were none.
    assert answer(client, question, authoring_only, "1").json()["code"] == "not_found"
    not_as_author = {"Authorization": f"Bearer {raw}"}
    listed = client.get("/api/v1/questions/", headers=not_as_author).json()
    assert own.pk not in [q["id"] for q in listed]
    assert answer(client, own, not_as_author, "1").json()["code"] == "not_in_audience"


def test_a_wrong_choice_an_empty_answer_and_a_question_you_may_not_see(
    client, author, other_author
):
    question = ask(author, question="Which?", choices=["3", "4"])
    headers = bearer(author, "authors")

    wrong = answer(client, question, headers, "5")
    assert (wrong.status_code, wrong.json()["code"]) == (422, "not_a_choice")
    assert wrong.json()["detail"] == "Pick one of the choices: 3, 4."
    blank = answer(client, question, headers, "   ")
    assert (blank.status_code, blank.json()["code"]) == (422, "answer_invalid")
    hidden = answer(client, question, bearer(other_author, "authors"), "3")
    assert (hidden.status_code, hidden.json()["code"]) == (404, "not_found")
    assert answer(client, question, headers, "3").status_code == 200


def test_the_schema_describes_listing_and_answering_questions(client):
    schema = client.get("/api/v1/schema/").json()

    answering = schema["paths"]["/api/v1/questions/{question_id}/answer/"]["post"]
    assert {"200", "403", "404", "409", "422"} <= set(answering["responses"])
    assert "/api/v1/questions/" in schema["paths"]
    body = schema["components"]["schemas"]["AnswerIn"]
    assert body["properties"]["answer"]["maxLength"] == 10_000
    assert body["additionalProperties"] is False
