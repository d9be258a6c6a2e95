"""The costs page: spend per day, by model, author and tool; tokens per run; health rates."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from plans.journal.rollup import rollup_rebuild
from plans.models import Approval, Goal, ModelCall, Plan, Run, Step, ToolCall
from tests.html_safety import executable_markup
from tests.pages import section

pytestmark = pytest.mark.django_db

URL = reverse("plans:costs")


def make_run(author, *, status=Run.Status.COMPLETED, tokens=0, cost="0", days_ago=0, tools=()):
    run = Run.objects.create(
        goal=Goal.objects.create(author=author, text="Total price"),
        tools_used=sorted(tools),
        status=status,
        budget_usd=Decimal("0.5"),
        budget_tokens=200000,
        input_tokens=tokens,
        cost_usd=Decimal(cost),
    )
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return run


def model_call(run, *, cost, model="claude-sonnet-5-5", days_ago=0, tokens=(100, 10)):
    call = ModelCall.objects.create(
        run=run,
        purpose="plan",
        model=model,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        prices={},
        cost_usd=Decimal(cost),
        latency_ms=100,
    )
    ModelCall.objects.filter(pk=call.pk).update(
        created_at=timezone.now() - timedelta(days=days_ago)
    )


def tool_call(run, tool, *, error="", step_id=None):
    plan, _ = Plan.objects.get_or_create(run=run, version=1, defaults={"is_valid": True})
    step_id = step_id or plan.steps.count() + 1
    step = Step.objects.create(plan=plan, step_id=step_id, tool=tool, args={}, round=1)
    ToolCall.objects.create(
        run=run,
        step=step,
        tool=tool,
        attempt=1,
        args={},
        error=error,
        idempotency_key="k",
        started_at=timezone.now(),
        duration_ms=250.0,
    )


def approval(run, decision):
    plan, _ = Plan.objects.get_or_create(run=run, version=1, defaults={"is_valid": True})
    step = Step.objects.create(
        plan=plan, step_id=plan.steps.count() + 1, tool="issue_refund", args={}, round=1
    )
    Approval.objects.create(
        run=run,
        step=step,
        tool="issue_refund",
        requested_args={},
        args={},
        args_sha256="0" * 64,
        decision=decision,
        decided_at=None if decision == "pending" else timezone.now(),
    )


def costs_page(client, **params):
    rollup_rebuild()  # the rows above were written directly, not by the recording services
    response = client.get(URL, params)
    assert response.status_code == 200
    return response.content.decode()


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(URL)

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_people_without_the_costs_permission_are_refused(client, author, reviewer):
    for person in (author, reviewer):
        client.force_login(person)
        assert client.get(URL).status_code == 403


def test_spend_per_day_is_a_bar_per_day_of_the_window(client, author, operator):
    run = make_run(author)
    model_call(run, cost="0.000100")
    model_call(run, cost="0.000023")
    model_call(run, cost="0.5", days_ago=2)
    model_call(run, cost="9", days_ago=30)  # before the 30-day window
    client.force_login(operator)

    page = costs_page(client)

    chart = section(page, "daily-heading")
    assert chart.count('class="bar"') == 30
    today = timezone.localdate()
    assert f"{today:%a %b %-d}: $0.000123 in 2 calls" in chart
    assert f"{today - timedelta(days=2):%a %b %-d}: $0.500000 in 1 call" in chart
    assert "<dt>Model spend</dt><dd>$0.500123</dd>" in page
    assert "<dt>Model calls</dt><dd>3</dd>" in page


def test_the_window_can_be_seven_thirty_or_ninety_days(client, author, operator):
    model_call(make_run(author), cost="9", days_ago=30)
    client.force_login(operator)

    assert section(costs_page(client, days=90), "daily-heading").count('class="bar"') == 90
    assert section(costs_page(client, days=7), "daily-heading").count('class="bar"') == 7
    assert "$9.000000" in costs_page(client, days=90)
    assert section(costs_page(client, days=12), "daily-heading").count('class="bar"') == 30


def test_spend_is_broken_down_by_model_and_by_author(client, author, other_author, operator):
    alices = make_run(author)
    carols = make_run(other_author)
    model_call(alices, cost="0.3", model="claude-opus-4-5", tokens=(1500, 20))
    model_call(alices, cost="0.1", model="claude-haiku-4-5")
    model_call(carols, cost="0.1", model="claude-haiku-4-5")
    client.force_login(operator)

    page = costs_page(client)

    models = section(page, "models-heading")
    assert models.index("claude-opus-4-5") < models.index("claude-haiku-4-5")  # dearest first
    assert re.search(r"claude-haiku-4-5</code></td>\s*<td class=\"num\">2</td>", models)
    assert "1,500" in models and "$0.300000" in models and "$0.200000" in models
    authors = section(page, "authors-heading")
    assert re.search(
        r"<td>alice</td>\s*<td class=\"num\">1</td>\s*<td class=\"num\">2</td>", authors
    )
    assert "$0.400000" in authors and "$0.100000" in authors


def test_tools_show_calls_error_rates_and_what_the_runs_using_them_cost(client, author, operator):
    first = make_run(author, cost="0.25", tools=["calculator", "price"])
    second = make_run(author, cost="0.5", tools=["price"])
    make_run(author, cost="4", tools=["flight_price"])  # not "price"
    tool_call(first, "price")
    tool_call(first, "price", error="no such item")
    tool_call(first, "calculator")
    tool_call(second, "price")
    client.force_login(operator)

    tools = section(costs_page(client), "tools-heading")

    price = re.search(r"<code>price</code>.*?</tr>", tools, re.S).group(0)
    cells = re.findall(r'<td class="num">([^<]*)</td>', price)
    assert cells == ["3", "1", "33.3%", "250 ms", "2", "$0.750000"]
    calculator = re.search(r"<code>calculator</code>.*?</tr>", tools, re.S).group(0)
    assert re.findall(r'<td class="num">([^<]*)</td>', calculator)[-1] == "$0.250000"
    assert "counts under each" in tools  # the overlap is explained


def test_tokens_per_completed_run_give_average_median_and_p95(client, author, operator):
    for tokens in range(100, 2100, 100):  # 20 completed runs: 100 .. 2000
        make_run(author, tokens=tokens)
    make_run(author, status=Run.Status.FAILED, tokens=10**6)
    client.force_login(operator)

    tokens = section(costs_page(client), "tokens-heading")

    assert "<dt>Completed runs</dt><dd>20</dd>" in tokens
    assert "<dt>Average</dt><dd>1,050</dd>" in tokens
    assert "<dt>Median (p50)</dt><dd>1,000</dd>" in tokens
    assert "<dt>p95</dt><dd>1,900</dd>" in tokens


def test_health_shows_rejection_tool_error_and_budget_exhaustion_rates(client, author, operator):
    run = make_run(author)
    for decision in ("approved", "approved", "approved", "rejected", "pending", "expired"):
        approval(run, decision)
    tool_call(run, "price", error="offline", step_id=50)
    for step_id in (51, 52, 53):
        tool_call(run, "price", step_id=step_id)
    make_run(author, status=Run.Status.BUDGET_EXHAUSTED)
    make_run(author, status=Run.Status.RUNNING)  # not finished: not counted
    client.force_login(operator)

    health = section(costs_page(client), "health-heading")

    rates = re.findall(
        r'<td class="num rate">([^<]*)</td>\s*<td class="num muted">([^<]*)</td>', health
    )
    assert rates == [("25.0%", "1 of 4"), ("25.0%", "1 of 4"), ("50.0%", "1 of 2")]


def test_rates_with_nothing_to_divide_by_are_a_dash_not_an_error(client, operator):
    client.force_login(operator)

    page = costs_page(client)

    assert page.count('<td class="num rate">—</td>') == 3
    assert "No model calls in this window." in page
    assert "No run completed in this window." in page


def test_circuit_breakers_have_a_marked_place(client, operator):
    client.force_login(operator)

    page = costs_page(client)

    assert 'id="circuit-breakers"' in page
    assert executable_markup(page) == []


def test_the_page_reads_the_rollup_not_the_calls_or_the_runs(client, author, operator):
    run = make_run(author, tools=["price"])
    model_call(run, cost="0.25")
    tool_call(run, "price")
    rollup_rebuild()
    client.force_login(operator)

    with CaptureQueriesContext(connection) as queries:
        page = client.get(URL).content.decode()

    assert "$0.250000" in page
    sql = [query["sql"] for query in queries]
    raw = ('"plans_modelcall"', '"plans_toolcall"', 'FROM "plans_run"')
    assert [q for q in sql if any(table in q for table in raw)] == []
    assert len([q for q in sql if "rollup" in q]) <= 9


@pytest.mark.django_db
def test_the_health_page_shows_each_tools_circuit_breaker_state(client, operator):
    from django.utils import timezone

    from plans.models import CircuitBreaker

    CircuitBreaker.objects.create(
        tool="flight_price",
        state="open",
        consecutive_failures=5,
        opened_at=timezone.now(),
        last_error="<script>alert(1)</script>",
    )
    client.force_login(operator)

    page = client.get("/costs/").content.decode()

    assert "flight_price" in page and "breaker-open" in page
    assert "<script>alert(1)</script>" not in page


def test_one_hour_cache_writes_and_web_searches_are_broken_out_by_model_and_in_total(
    client, author, operator
):
    from plans.journal.rollup import model_calls_recorded, rollup_drift

    run = make_run(author)
    call = ModelCall(
        run=run,
        purpose="answer",
        model="claude-sonnet-5-5",
        input_tokens=100,
        output_tokens=10,
        cache_write_tokens=1200,
        cache_write_1h_tokens=800,
        web_search_requests=3,
        prices={},
        cost_usd=Decimal("0.05"),
        latency_ms=100,
    )
    call.save()
    model_calls_recorded(run.pk, [call])  # as the recorder keeps the rollup current
    # A rebuild from the calls agrees (the run itself was written around the rollup).
    assert [d for d in rollup_drift() if d.startswith("SpendRollup")] == []
    client.force_login(operator)

    page = client.get(URL).content.decode()

    models = section(page, "models-heading")
    assert re.search(r'<div class="cache-written">1,200 <span class="muted">written', models)
    assert re.search(r'<div class="cache-1h">800 <span class="muted">of them kept 1 h', models)
    assert '<td class="num web-searches">3</td>' in models
    assert re.search(r"Cache writes kept 1 h</dt><dd>800", page)
    assert re.search(r"Web searches</dt><dd>3</dd>", page)


def test_the_eval_judges_spend_is_on_the_costs_page_apart_from_model_spend(client, operator):
    from plans.models import EvalResult, Experiment

    experiment = Experiment.objects.create(
        label="judged",
        agent="plan_execute",
        model="offline",
        prompt_version="abc",
        cases_file="planner.json",
        cases_version="1",
    )
    for case_id, cost in (("a", "0.0125"), ("b", "0.0075")):
        EvalResult.objects.create(
            experiment=experiment,
            case_id=case_id,
            category="demo",
            passed=True,
            judge={"verdict": "pass", "model": "claude-sonnet-5-5", "cost_usd": cost},
        )
    EvalResult.objects.create(  # a judge that could not answer cost nothing on record
        experiment=experiment, case_id="c", category="demo", passed=True, judge={"error": "x"}
    )
    client.force_login(operator)

    page = costs_page(client)

    judge = re.search(r'<div id="judge-spend">.*?</div>', page, re.S).group(0)
    assert "$0.020000" in judge and "2 answers judged" in judge
    assert re.search(r"Model spend</dt><dd>\$0.000000", page)
