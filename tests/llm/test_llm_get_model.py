import pytest
from django.core.exceptions import ImproperlyConfigured

import plans.llm
from plans.llm import ChatModel, OfflineModel, get_model


def test_the_offline_backend_gives_the_offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    model = get_model()
    assert isinstance(model, OfflineModel)
    assert isinstance(model, ChatModel)


def test_the_anthropic_backend_needs_an_api_key(settings):
    settings.AGENTSITE_MODEL_BACKEND = "anthropic"
    settings.ANTHROPIC_API_KEY = ""
    with pytest.raises(ImproperlyConfigured, match="ANTHROPIC_API_KEY is not set"):
        get_model()


def test_the_anthropic_backend_with_a_key_gives_the_anthropic_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "anthropic"
    settings.ANTHROPIC_API_KEY = "sk-test"
    model = get_model()
    assert isinstance(model, plans.llm.AnthropicModel)
    assert isinstance(model, ChatModel)
    # Reused while the configuration stands, so calls share one connection pool.
    assert get_model() is model
    settings.ANTHROPIC_API_KEY = "sk-other"
    assert get_model() is not model
    assert get_model().client.api_key == "sk-other"


def test_an_unknown_backend_is_a_configuration_error(settings):
    settings.AGENTSITE_MODEL_BACKEND = "gpt"
    with pytest.raises(ImproperlyConfigured, match=r"'gpt'.*anthropic, offline"):
        get_model()


def test_the_base_types_are_exported_from_the_package():
    from plans.llm import base

    for name in ("ChatModel", "Completion", "ModelError", "ModelRequest", "Usage"):
        assert name in plans.llm.__all__
        assert getattr(plans.llm, name) is getattr(base, name)
