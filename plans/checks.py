"""System checks: settings mistakes that would otherwise fail every run, caught at start-up."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from plans.guards.approval_rules import rules_load
from plans.llm import model_for, plan_schema_setting
from plans.llm.pricing import prices_for
from plans.mcp.config import configured_servers

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


@checks.register()
def check_parallel_steps(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A run allowed no steps at a time would never start one."""
    steps = settings.AGENTSITE_MAX_PARALLEL_STEPS
    if steps >= 1:
        return []
    return [
        checks.Error(
            f"AGENTSITE_MAX_PARALLEL_STEPS is {steps}; a run needs at least 1 step at a time",
            hint="Set it to 1 or more (the default is 16).",
            id="plans.E002",
        )
    ]


@checks.register()
def check_plan_schema_mode(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A mistyped way of binding plan replies would fail every plan call, not start-up."""
    try:
        plan_schema_setting()
    except ValueError as exc:
        return [checks.Error(str(exc), hint='Leave it unset for "auto".', id="plans.E003")]
    return []


@checks.register()
def check_mcp_servers(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """AGENTSITE_MCP_SERVERS reads cleanly, so a typo stops start-up rather than a run."""
    try:
        configured_servers()
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="See the README, Tools from MCP servers.",
                id="plans.E010",
            )
        ]
    return []


@checks.register()
def check_approval_rules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The approval rule modules import and define rules: a broken module would leave every
    call to a reviewer (fail closed) until someone noticed."""
    try:
        rules_load()
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix AGENTSITE_APPROVAL_RULE_MODULES or the module (manage.py policy_check).",
                id="plans.E020",
            )
        ]
    return []
