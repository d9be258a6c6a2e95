"""A model call that cannot be made, or whose backend breaks, ends the run as failed, once."""

import pytest

from plans import execution
from plans.execution import advance_run
from plans.llm.offline import OfflineModel
from plans.models import ModelCall, Run, Step
from plans.services.runs import run_create

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
