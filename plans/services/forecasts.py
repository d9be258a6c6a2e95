"""A plan's cost forecast, made as the plan is stored: what a reviewer approving it sees."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from plans import engine
from plans.engine.forecast import answer_tokens, tools_cost
from plans.llm import Usage, model_for
from plans.llm.pricing import cost_usd, prices_for
from plans.selectors.forecasts import answer_history
from plans.tools.registry import ToolSpec


def plan_forecast(
    *, plan: engine.Plan, registry: dict[str, ToolSpec], spent_usd: Decimal
) -> dict[str, Any]:
    """The forecast, in its stored form (amounts as strings of USD); an unpriced answer model
    gives a forecast with no answer price and says why."""
    calls = [step.tool for step in plan.steps]
    model = model_for("answer")
    expected = answer_tokens(calls, answer_history(model=model))
    declared = {name: registry[name].cost_usd for name in calls if name in registry}
    tools_usd, undeclared = tools_cost(calls, declared)
    forecast: dict[str, Any] = {
        "model": model,
        "basis": expected.basis,
        "samples": expected.samples,
        "answer_tokens": expected.tokens,
        "spent_usd": str(spent_usd),
        "tools_usd": str(tools_usd),
        "tools_undeclared": undeclared,
        "answer_usd": None,
        "model_usd": None,
        "problem": "",
    }
    try:
        prices = prices_for(model)
    except ValueError as exc:
        forecast["problem"] = str(exc)
        return forecast
    answer_usd = cost_usd(Usage(**expected.tokens), prices)
    forecast["answer_usd"] = str(answer_usd)
    forecast["model_usd"] = str(spent_usd + answer_usd)
    return forecast
