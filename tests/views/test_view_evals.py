"""The evals page: operators see experiments and two side by side, each case linked to its run."""

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from plans.models import EvalResult, Experiment
from tests.html_safety import SCRIPT, executable_markup

pytestmark = pytest.mark.django_db

URL = reverse("plans:evals")


def experiment(agent="plan_execute", label="", **rates):
    rows = {
        name: {"passed": p, "trials": 2, "rate": p / 2, "low": 0, "high": 1}
        for name, p in rates.items()
    }
    passed = sum(r["passed"] for r in rows.values())
    trials = sum(r["trials"] for r in rows.values())
    overall = {"passed": passed, "trials": trials, "rate": passed / trials}
    return Experiment.objects.create(
        label=label,
        agent=agent,
        model="offline",
        prompt_version="abc123",
        cases_file="planner.json",
        cases_version="1",
        summary={"categories": rows, "overall": overall},
        trials=trials,
        passed=passed,
        model_calls=10,
        input_tokens=1000,
        output_tokens=100,
        cost_usd=Decimal("0.01"),
        finished_at=timezone.now(),
    )


def result(exp, case_id, passed, category="demo", failures=()):
    return EvalResult.objects.create(
        experiment=exp,
        case_id=case_id,
        category=category,
        passed=passed,
        failures=list(failures),
        model_calls=2,
    )


def test_the_evals_page_is_for_operators_only(client, author, operator):
    client.force_login(author)
    assert client.get(URL).status_code == 403

    client.force_login(operator)
    assert client.get(URL).status_code == 200


def test_experiments_are_listed_with_pass_rates_per_category_and_cost(client, operator):
    experiment(demo=2, arithmetic=1)
    client.force_login(operator)

    page = client.get(URL).content.decode()

    assert "75.0%" in page  # overall 3 of 4
    assert "arithmetic</span> 50.0%" in page
    assert "$0.010000" in page
    assert "abc123" in page


def test_two_experiments_side_by_side_show_the_cases_that_changed_with_their_runs(
    client, operator, author
):
    from plans.services.runs import run_create

    before, after = experiment(demo=2), experiment(agent="react", demo=1)
    run = run_create(author=author, goal_text="g")
    result(before, "kept", True)
    result(after, "kept", True)
    result(before, "broke", True)
    broken = result(
        after, "broke", False, failures=["answer.contains: '92800' is not in the answer"]
    )
    broken.run = run
    broken.save()
    client.force_login(operator)

    page = client.get(URL, {"a": before.pk, "b": after.pk}).content.decode()

    changed = page.split("Cases that changed")[1].split("<details>")[0]
    assert "broke" in changed and "kept" not in changed
    assert "answer.contains: &#x27;92800&#x27; is not in the answer" in changed
    assert reverse("plans:run_detail", args=[run.pk]) in changed
    assert "-50.0%" in page


def test_the_comparison_alone_is_returned_to_htmx(client, operator):
    a, b = experiment(demo=1), experiment(demo=2)
    client.force_login(operator)

    response = client.get(
        URL, {"a": a.pk, "b": b.pk}, headers={"HX-Request": "true", "HX-Target": "comparison"}
    )

    html = response.content.decode()
    assert html.lstrip().startswith('<section id="comparison"')
    assert "<html" not in html


def test_a_missing_experiment_is_reported_not_a_crash(client, operator):
    experiment(demo=1)
    client.force_login(operator)

    page = client.get(URL, {"a": 1, "b": 999}).content.decode()

    assert "There is no experiment 1 or 999 to compare." in page


def test_hostile_text_in_failures_and_labels_is_escaped(client, operator):
    a, b = experiment(label=SCRIPT, demo=2), experiment(demo=1)
    result(a, "x", True)
    result(b, "x", False, failures=[SCRIPT])
    client.force_login(operator)

    page = client.get(URL, {"a": a.pk, "b": b.pk}).content.decode()

    assert executable_markup(page) == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_eval_runs_are_off_the_runs_list_unless_asked_for(client, operator, author):
    from plans.services.runs import run_create

    tagged = experiment(demo=1)
    mine = run_create(author=author, goal_text="an ordinary goal")
    hidden = run_create(author=author, goal_text="an eval goal", experiment=tagged)
    client.force_login(operator)
    url = reverse("plans:run_list")

    default = client.get(url).content.decode()
    asked = client.get(url, {"evals": "on"}).content.decode()

    detail = reverse("plans:run_detail", args=[hidden.pk])
    assert reverse("plans:run_detail", args=[mine.pk]) in default
    assert detail not in default
    assert detail in asked
