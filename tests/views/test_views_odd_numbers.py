"""Numbers in query strings and forms are whatever was typed: odd ones are refused, never a 500."""

import pytest

from plans.engine.text import MAX_ID, whole_number
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("text", "number"),
    [
        *[("0", 0), ("42", 42), (str(MAX_ID), MAX_ID)],
        *[("", None), ("²", None), ("٣", None), ("-1", None), ("1.0", None), (" 1", None)],
        *[(str(MAX_ID + 1), None), ("9" * 40, None)],
    ],
)
def test_a_whole_number_is_ascii_digits_within_a_database_integer(text, number):
    assert whole_number(text) == number


@pytest.mark.parametrize(
    "form",
    [
        {"decision": "approve", "group": "1-²"},
        {"decision": "approve", "group": "²-1"},
        {"decision": "approve", "group": "99999999999999999999-3"},
        {"decision": "approve", "group": "1-1", "approval": ["²"]},
        {"decision": "approve", "group": "1-1", "approval": ["99999999999999999999"]},
    ],
)
def test_a_decision_with_odd_ids_is_refused_or_finds_nothing(client, reviewer, form):
    client.force_login(reviewer)

    response = client.post("/approvals/decide/", form, headers={"HX-Request": "true"})

    assert response.status_code in (400, 422)


def test_the_last_day_there_is_can_end_the_run_list_filter(client, author):
    run_create(author=author, goal_text="Total price of an iPhone 16 and AirPods 4 in INR")
    client.force_login(author)

    response = client.get("/runs/", {"date_from": "0001-01-01", "date_to": "9999-12-31"})

    assert response.status_code == 200
    assert b"Total price of an iPhone 16" in response.content


def test_an_odd_plan_version_is_not_found(client, author):
    run = run_create(author=author, goal_text="Total price of an iPhone 16 and AirPods 4 in INR")
    client.force_login(author)

    for version in ("²", "99999999999999999999"):
        response = client.get(f"/runs/{run.pk}/graph.svg", {"version": version})
        assert response.status_code == 404


def test_an_odd_cost_window_falls_back_to_the_default(client, operator):
    client.force_login(operator)

    assert client.get("/costs/", {"days": "²"}).status_code == 200
