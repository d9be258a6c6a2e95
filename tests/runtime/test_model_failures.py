"""A model call that cannot be made, or whose backend breaks, ends the run as failed, once."""

import pytest

from plans.llm.offline import OfflineModel
from plans.models import ModelCall, Run, SpendRollup, Step
from plans.runtime import advance as execution
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.llm.anthropic_http import sse, stream_events, streamed

pytestmark = pytest.mark.django_db(transaction=True)

PRICE_GOAL = "Total price of an iPhone 16 and AirPods 4 in INR"


class BrokenAnswers(OfflineModel):
    """Plans as the offline model does, then breaks with a bug of its own when answering."""

    def complete(self, request, *, on_text=None):
        if request.purpose == "answer":
            raise TypeError("'NoneType' object is not iterable")
        return super().complete(request, on_text=on_text)


def test_a_model_backend_that_raises_ends_the_run_failed_keeping_the_step_results(
    author, monkeypatch
):
    monkeypatch.setattr(execution, "get_model", BrokenAnswers)
    run = run_create(author=author, goal_text=PRICE_GOAL)

    assert advance_run(run.pk) == "failed"

    run.refresh_from_db()
    assert run.error == "model call for answer failed: TypeError: 'NoneType' object is not iterable"
    assert run.lease_token is None and run.finished_at is not None
    results = dict(Step.objects.filter(plan__run=run).values_list("step_id", "result"))
    assert results == {1: 79900, 2: 12900, 3: 92800}
    answer_call = ModelCall.objects.get(run=run, purpose="answer")
    assert "TypeError" in answer_call.error and answer_call.cost_usd == 0
    advance_run(run.pk)  # taken up again, as a sweep would: it stays as it ended
    assert Run.objects.get(pk=run.pk).status == "failed"
    assert ModelCall.objects.filter(run=run).count() == 2


def test_a_model_missing_from_the_price_table_is_never_called_and_the_run_says_so(author, settings):
    settings.AGENTSITE_MODEL_PRICES = {
        name: prices
        for name, prices in settings.AGENTSITE_MODEL_PRICES.items()
        if name != "offline"
    }
    run = run_create(author=author, goal_text=PRICE_GOAL)

    assert advance_run(run.pk) == "failed"

    run = Run.objects.get(pk=run.pk)
    assert run.error.startswith(
        "model call for plan not made: no prices configured for model 'offline' in "
        "AGENTSITE_MODEL_PRICES"
    )
    assert not ModelCall.objects.filter(run=run).exists()


def test_an_answer_stream_cut_short_records_the_input_it_was_billed_for(author, claude_serves):
    # The answer's stream breaks off after its first words; message_start said 1200 went in.
    events = stream_events(["The"], input_usage={"input_tokens": 1200}, output_tokens=5)[:3]
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    claude_serves(lambda request: sse(*events))
    plan = {"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]}
    run = run_create(author=author, goal_text="Price of an iPhone 16", plan_data=plan)

    assert advance_run(run.pk) == "failed"

    call = ModelCall.objects.get(run=run, purpose="answer")
    assert "broke off part-way" in call.error
    assert (call.input_tokens, call.output_tokens) == (1200, 1)
    assert call.cost_usd > 0
    run.refresh_from_db()
    assert run.input_tokens == 1200 and run.cost_usd == call.cost_usd


def test_a_run_the_database_keeps_refusing_ends_failed_instead_of_being_retried(
    author, monkeypatch
):
    from django.db import DataError

    from plans.models import RunEvent, ToolCall
    from plans.runtime import recorder

    insert_rows = recorder.insert_rows

    def refuse_tool_calls(model, rows):
        if model is ToolCall and rows:
            raise DataError("unsupported Unicode escape sequence")  # as PostgreSQL says of NUL
        return insert_rows(model, rows)

    monkeypatch.setattr(recorder, "insert_rows", refuse_tool_calls)
    run = run_create(author=author, goal_text=PRICE_GOAL)

    assert advance_run(run.pk) == "failed"

    run.refresh_from_db()
    assert run.error.startswith("the run stopped on an internal error: DataError: unsupported")
    assert run.lease_token is None and run.finished_at is not None
    assert not Step.objects.filter(plan__run=run, status__in=["pending", "running"]).exists()
    assert RunEvent.objects.filter(run=run).last().kind == "run_finished"
    seqs = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    advance_run(run.pk)  # taken up again, as a sweep would: nothing more happens
    assert Run.objects.get(pk=run.pk).status == "failed"


class WorkerKilled(BaseException):
    """The worker process dying mid-call (nothing after it in that worker runs)."""


class DiesDuringTheAnswer(OfflineModel):
    def complete(self, request, *, on_text=None):
        if request.purpose == "answer":
            raise WorkerKilled
        return super().complete(request, on_text=on_text)


def test_a_model_call_is_on_record_before_it_is_made_and_a_dead_workers_call_counts_at_its_estimate(
    author, settings, monkeypatch, client
):
    from django.urls import reverse

    from plans.guards.budgets import author_spent_today

    settings.AGENTSITE_MODEL_BACKEND = "anthropic"
    settings.ANTHROPIC_API_KEY = "test-key"
    monkeypatch.setattr(execution, "get_model", DiesDuringTheAnswer)
    plan = {"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]}
    run = run_create(author=author, goal_text="Price of an iPhone 16", plan_data=plan)

    with pytest.raises(WorkerKilled):
        advance_run(run.pk)

    call = ModelCall.objects.get(run=run, purpose="answer")
    assert call.state == "started" and call.cost_usd == call.estimated_usd > 0
    assert author_spent_today(author.pk) == call.estimated_usd  # the daily cap counts it now

    monkeypatch.setattr(execution, "get_model", OfflineModel)  # a healthy worker takes it up
    Run.objects.filter(pk=run.pk).update(lease_token=None, lease_expires_at=None)
    advance_run(run.pk)

    call.refresh_from_db()
    run.refresh_from_db()
    assert call.state == "interrupted"
    assert run.cost_usd >= call.estimated_usd  # the run's budget counts it too
    assert run.model_call_count == ModelCall.objects.filter(run=run).count()
    client.force_login(author)
    audit = client.get(reverse("plans:run_audit", args=[run.pk])).content.decode()
    assert "interrupted" in audit


def test_a_billed_model_call_is_finished_on_its_started_row(author, claude_serves):
    claude_serves(lambda request: streamed(["79,900 INR"], input_tokens=80, output_tokens=4))
    plan = {"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]}
    run = run_create(author=author, goal_text="Price of an iPhone 16", plan_data=plan)

    assert advance_run(run.pk) == "completed"

    (call,) = ModelCall.objects.filter(run=run)
    assert call.state == "finished" and call.input_tokens == 80
    assert 0 < call.cost_usd < call.estimated_usd
    assert Run.objects.get(pk=run.pk).cost_usd == call.cost_usd
    # The rollup counted it once, at its estimate when it started, then took the difference.
    (spend,) = SpendRollup.objects.filter(author=author)
    assert (spend.calls, spend.input_tokens, spend.cost_usd) == (1, 80, call.cost_usd)
