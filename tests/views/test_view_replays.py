"""The run page's Replay form: an operator picks the model and prompt version, as
`manage.py replay RUN_ID --model M --prompt-version V` does; what is not known is refused,
naming what is wrong."""

import json
import random

import httpx2
import pytest
from django.conf import settings as live_settings
from django.urls import reverse

from plans.evals import replay as replay_module
from plans.evals.runner import prompt_version
from plans.llm.anthropic_model import AnthropicModel
from plans.llm.offline import REFUND_GOAL
from plans.models import RunReplay
from plans.services.runs import run_create
from tests.llm.anthropic_http import client_served_by

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def offline(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    settings.ANTHROPIC_API_KEY = ""


@pytest.fixture
def replayer(django_user_model):
    from plans.roles import roles_ensure

    user = django_user_model.objects.create_user("otto", password="otto-pass-123")
    user.groups.add(roles_ensure()["operators"])
    return user


@pytest.fixture
def run(author):
    return run_create(author=author, goal_text=REFUND_GOAL)  # never advanced: nothing recorded


def replays_url(run):
    return reverse("plans:run_replays", args=[run.pk])


def test_the_form_offers_every_known_model_and_this_checkouts_prompts(client, replayer, run):
    client.force_login(replayer)
    page = client.get(replays_url(run)).content.decode()

    for name in ("offline", "claude-haiku-4-5", "claude-opus-4-5", "claude-sonnet-5-5"):
        assert f'<option value="{name}"' in page
    assert '<option value="offline" selected>' in page  # the configured model
    assert f'<option value="{prompt_version()}" selected>' in page


def test_an_operator_replays_on_the_model_and_prompt_version_chosen(client, replayer, run):
    client.force_login(replayer)
    response = client.post(
        replays_url(run), {"model": "offline", "prompt_version": prompt_version()}
    )

    stored = RunReplay.objects.get(run=run)
    assert response.status_code == 302
    assert response["Location"] == reverse("plans:run_replay", args=[run.pk, stored.pk])
    assert (stored.model, stored.prompt_version) == ("offline", prompt_version())


@pytest.mark.parametrize(
    ("posted", "message"),
    [
        (
            {"model": "gpt-5", "prompt_version": "current"},
            "model &#x27;gpt-5&#x27; is not known: it has no prices in AGENTSITE_MODEL_PRICES "
            "(known: offline, claude-haiku-4-5, claude-opus-4-5, claude-sonnet-5-5)",
        ),
        (
            {"model": "claude-haiku-4-5", "prompt_version": "current"},
            "model &#x27;claude-haiku-4-5&#x27; needs ANTHROPIC_API_KEY, which is not set; "
            "use offline",
        ),
        (
            {"model": "offline", "prompt_version": "abc123"},
            "prompt version &#x27;abc123&#x27; is not available here",
        ),
    ],
)
def test_a_model_or_prompt_version_not_known_is_refused_naming_it(
    client, replayer, run, posted, message
):
    client.force_login(replayer)
    response = client.post(replays_url(run), posted)

    assert response.status_code == 400
    assert message in response.content.decode()
    assert not RunReplay.objects.exists()


def test_a_replay_on_claude_uses_that_model_for_every_call_and_leaves_the_settings_alone(
    client, replayer, run, settings, monkeypatch
):
    settings.ANTHROPIC_API_KEY = "test-key"
    seen = []

    def api(request):
        body = json.loads(request.content)
        # The process's own model is untouched while the replay runs: its runs go on as before.
        seen.append((body["model"], live_settings.AGENTSITE_MODEL_BACKEND))
        planning = "Plan for a goal" in json.dumps(body.get("system"))
        text = json.dumps({"steps": []}) if planning else "Nothing was done."
        return httpx2.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 20},
            },
        )

    claude = AnthropicModel(client_served_by(api), sleep=lambda s: None, rng=random.Random(1))
    backends = []
    monkeypatch.setattr(replay_module, "model_named", lambda name: backends.append(name) or claude)
    client.force_login(replayer)

    response = client.post(replays_url(run), {"model": "claude-haiku-4-5"})

    assert response.status_code == 302, response.content.decode()
    assert backends == ["claude-haiku-4-5"]
    assert seen and all(call == ("claude-haiku-4-5", "offline") for call in seen)
    assert RunReplay.objects.get(run=run).model == "claude-haiku-4-5"
