"""ReAct observations by reference, through the real Anthropic SDK on a mock transport: a 200 KB
observation goes into the next turn's prompt as an extract with its reference, not whole, and
result_slice (offered once a result is held) reads on from it."""

import json
import random

import httpx2
import pytest

from plans.llm.anthropic_model import AnthropicModel
from plans.models import Goal, ModelCall, Run, Step
from plans.runtime import advance as execution
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.llm.anthropic_http import client_served_by

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = {"tool": "sales_report", "args": {"rows": 500}}  # about 205,000 chars of JSON
LAST_ROW = {"tool": "result_slice", "args": {"ref": "v1.step1", "path": "[499]"}}
ANSWER = {"answer": "The report has 500 rows; the last is SKU-00499."}


class ReactTurns:
    """The Messages API for a ReAct run: each turn's reply is the next of turns. Its usage counts
    a token per four bytes of the request, so the recorded tokens follow the prompt's size."""

    def __init__(self, *turns):
        self.turns = [json.dumps(turn) for turn in turns]
        self.bodies = []

    def __call__(self, request):
        self.bodies.append(json.loads(request.content))
        return httpx2.Response(
            200,
            json={
                "id": f"msg_{len(self.bodies)}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-5-5",
                "content": [{"type": "text", "text": self.turns.pop(0)}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": len(request.content) // 4, "output_tokens": 20},
            },
        )

    def observations(self, turn):
        """The text of every observation the turn's request showed the model."""
        messages = self.bodies[turn]["messages"]
        return [m["content"] for m in messages if m["role"] == "user"][1:]


@pytest.fixture
def claude(settings, monkeypatch):
    settings.AGENTSITE_MODEL_BACKEND = "anthropic"
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    settings.AGENTSITE_TOOL_MAX_ATTEMPTS = 1

    def install(*turns):
        server = ReactTurns(*turns)
        model = AnthropicModel(client_served_by(server), sleep=lambda s: None, rng=random.Random(1))
        monkeypatch.setattr(execution, "get_model", lambda: model)
        return server

    return install


def react_run(author):
    run = run_create(author=author, goal_text="Summarise the sales report", agent=Goal.Agent.REACT)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def test_a_200_kb_observation_is_an_extract_by_reference_and_result_slice_reads_on(author, claude):
    server = claude(REPORT, LAST_ROW, ANSWER)

    run = react_run(author)

    assert run.status == Run.Status.COMPLETED
    report, sliced = Step.objects.filter(plan__run=run).order_by("step_id")
    whole = json.dumps(report.result, ensure_ascii=False)
    assert len(report.result) == 500 and len(whole) > 200_000  # stored whole
    (observation,) = server.observations(1)
    assert f"result of step 1: {len(whole):,} chars, held whole as ref v1.step1" in observation
    assert "shape: list of 500 objects with keys row, region, sku, amount_inr, note" in observation
    assert whole[:2000] in observation and whole[:2001] not in observation  # its first part only
    assert len(json.dumps(server.bodies[1])) < 20_000
    # result_slice is offered only once an observation is held, and reads the run's own result.
    first, second = (
        json.dumps([body.get("system"), body.get("tools")]) for body in server.bodies[:2]
    )
    assert "result_slice" not in first and "result_slice" in second
    assert sliced.tool == "result_slice" and sliced.status == Step.Status.SUCCEEDED
    assert json.loads(sliced.result["text"])["sku"] == "SKU-00499"
    assert "SKU-00499" in server.observations(2)[1]


def test_the_turn_after_a_200_kb_observation_costs_a_fraction_of_the_tokens(
    author, claude, settings
):
    def tokens_after_the_report():
        claude(REPORT, ANSWER)
        run = react_run(author)
        assert run.status == Run.Status.COMPLETED
        _report_turn, after_it = ModelCall.objects.filter(run=run).order_by("pk")
        return after_it.input_tokens

    settings.AGENTSITE_PROMPT_RESULT_MAX_CHARS = 10**9  # every observation whole, as before
    whole = tokens_after_the_report()
    settings.AGENTSITE_PROMPT_RESULT_MAX_CHARS = 8000  # the default: by reference
    held = tokens_after_the_report()

    print(f"tokens of the turn after the report: {whole:,} whole, {held:,} by reference")
    assert whole > 50_000
    assert held < 5_000
    assert held / whole < 0.1
