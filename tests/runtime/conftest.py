"""Runs that ask Claude: the real SDK, its HTTP served by the test (tests/llm/anthropic_http.py)."""

import json
import random

import pytest

from tests.llm.anthropic_http import Claude, model_served_by


@pytest.fixture
def claude_serves(settings, monkeypatch):
    """Runs advanced in the test ask the Anthropic backend, whose requests handler answers."""
    from plans.runtime import advance

    settings.AGENTSITE_MODEL_BACKEND = "anthropic"
    settings.ANTHROPIC_API_KEY = "test-key"

    def install(handler, **options):
        model = model_served_by(handler, **options)
        monkeypatch.setattr(advance, "get_model", lambda: model)
        return handler

    return install


@pytest.fixture
def claude_replies(claude_serves):
    """Serves the given replies in order; returns the bodies of the requests, as sent."""
    bodies = []

    def install(*replies):
        queue = list(replies)

        def serve(request):
            bodies.append(json.loads(request.content))
            return queue.pop(0)

        claude_serves(serve)
        return bodies

    return install


@pytest.fixture
def claude_plans(settings, claude_serves):
    """Claude plans first_plan, then each of replans in turn when told steps failed; the
    tools are tests.support_tools, each tried once."""
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    settings.AGENTSITE_TOOL_MAX_ATTEMPTS = 1

    def install(first_plan, *replans):
        return claude_serves(Claude(first_plan, replans), rng=random.Random(1))

    return install
