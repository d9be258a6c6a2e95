"""The model layer: the ChatModel interface, prompts, pricing and the two backends."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from plans.llm.base import SCHEMA_MODES, ChatModel, Completion, ModelError, ModelRequest, Usage
from plans.llm.offline import OFFLINE_DEMO_GOALS, OfflineModel

if TYPE_CHECKING:
    from plans.llm.anthropic_model import AnthropicModel

__all__ = [
    "OFFLINE_DEMO_GOALS",
    "AnthropicModel",
    "ChatModel",
    "Completion",
    "ModelError",
    "ModelRequest",
    "OfflineModel",
    "Usage",
    "get_model",
    "model_for",
    "model_named",
    "plan_schema_setting",
]

BACKENDS = ("anthropic", "offline")


def get_model(backend: str | None = None) -> ChatModel:
    """The model of a backend, "anthropic" or "offline" (settings.AGENTSITE_MODEL_BACKEND's by
    default)."""
    backend = backend or settings.AGENTSITE_MODEL_BACKEND
    if backend == "offline":
        return OfflineModel(latency_ms=settings.AGENTSITE_OFFLINE_LATENCY_MS)
    if backend == "anthropic":
        if not settings.ANTHROPIC_API_KEY:
            raise ImproperlyConfigured(
                "AGENTSITE_MODEL_BACKEND is 'anthropic' but ANTHROPIC_API_KEY is not set: "
                "set the key, or use AGENTSITE_MODEL_BACKEND=offline for the demo model."
            )
        return _anthropic_model(
            settings.ANTHROPIC_API_KEY,
            settings.AGENTSITE_MODEL_TIMEOUT_S,
            settings.AGENTSITE_MODEL_MAX_RETRIES,
        )
    raise ImproperlyConfigured(
        f"AGENTSITE_MODEL_BACKEND is {backend!r}; it must be one of: {', '.join(BACKENDS)}."
    )


def model_named(name: str) -> ChatModel:
    """The backend that serves a model name: the offline model for "offline", else Claude."""
    return get_model("offline" if name == OfflineModel.name else "anthropic")


def model_for(purpose: str) -> str:
    """The model a call for this purpose is made with, and so priced at."""
    if settings.AGENTSITE_MODEL_BACKEND == "offline":
        return OfflineModel.name
    if purpose == "answer":
        return settings.AGENTSITE_ANSWER_MODEL
    return settings.AGENTSITE_PLANNER_MODEL


def plan_schema_setting() -> str:
    """AGENTSITE_PLAN_SCHEMA, how plan replies are bound; ValueError when it names no mode."""
    mode = str(settings.AGENTSITE_PLAN_SCHEMA)
    if mode not in SCHEMA_MODES:
        raise ValueError(
            f"AGENTSITE_PLAN_SCHEMA is {mode!r}; it must be one of {', '.join(SCHEMA_MODES)}"
        )
    return mode


@functools.lru_cache(maxsize=4)
def _anthropic_model(api_key: str, timeout_s: float, max_retries: int) -> ChatModel:
    # One model (and SDK client) per configuration, so calls share its connection pool; the
    # arguments are the cache key, and AnthropicModel reads the same settings. Why imported
    # here: the SDK loads only when the Anthropic backend is wanted.
    from plans.llm.anthropic_model import AnthropicModel

    return AnthropicModel()


def __getattr__(name: str) -> Any:
    if name == "AnthropicModel":
        # Why imported here: the SDK loads only when the Anthropic backend is actually wanted.
        from plans.llm.anthropic_model import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
