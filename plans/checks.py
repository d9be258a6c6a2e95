"""System checks: settings mistakes that would otherwise fail every run, caught at start-up."""

from __future__ import annotations

from typing import Any

from django.core import checks

from plans.llm import model_for
from plans.llm.pricing import prices_for

_MODEL_SETTINGS = {"plan": "AGENTSITE_PLANNER_MODEL", "answer": "AGENTSITE_ANSWER_MODEL"}


@checks.register()
def check_models_are_priced(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every model a run will call has prices: an unpriced call is refused, failing the run."""
    errors: list[checks.CheckMessage] = []
    seen: set[str] = set()
    for purpose, setting in _MODEL_SETTINGS.items():
        model = model_for(purpose)
        if model in seen:
            continue
        seen.add(model)
        try:
            prices_for(model)
        except ValueError as exc:
            errors.append(
                checks.Error(
                    str(exc),
                    hint=f"Fix {setting}, or add the model's prices to AGENTSITE_MODEL_PRICES.",
                    id="plans.E001",
                )
            )
    return errors
