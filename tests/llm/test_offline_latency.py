"""The offline model's latency is configurable, to measure concurrency as with a real model."""

from plans.llm import get_model


def test_the_offline_model_takes_its_latency_from_settings(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    settings.AGENTSITE_OFFLINE_LATENCY_MS = 250

    assert get_model().latency_ms == 250  # type: ignore[attr-defined]


def test_the_offline_model_has_no_latency_by_default(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"

    assert get_model().latency_ms == 0  # type: ignore[attr-defined]
