"""The approval rules in force: the modules AGENTSITE_APPROVAL_RULE_MODULES names, and the
context a rule sees (plans.engine.approval_rules does the matching)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from plans.engine.approval_rules import Call, Rule, RuleInvalid, rules_in, rules_problems
from plans.models import Run
from plans.tools import ToolSpec


def rule_modules() -> list[str]:
    """The configured rule modules, in the order their rules are tried."""
    configured = getattr(settings, "AGENTSITE_APPROVAL_RULE_MODULES", [])
    if isinstance(configured, str) or not all(isinstance(m, str) for m in configured):
        raise ImproperlyConfigured(
            f"AGENTSITE_APPROVAL_RULE_MODULES must be a list of module names, got {configured!r}"
        )
    return list(dict.fromkeys(configured))


def rules_load(modules: list[str] | None = None) -> list[Rule]:
    """The rules of these modules (default: the configured ones), first to be tried first.

    Raises ImproperlyConfigured naming the module and what is wrong with it.
    """
    rules: list[Rule] = []
    for module in rule_modules() if modules is None else modules:
        try:
            loaded = importlib.import_module(module)
        except RuleInvalid as exc:
            raise ImproperlyConfigured(f"approval rule module {module!r}: {exc}") from exc
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"AGENTSITE_APPROVAL_RULE_MODULES: cannot import {module!r}: {exc}"
            ) from exc
        found = rules_in(vars(loaded), loaded.__name__)
        if not found:
            raise ImproperlyConfigured(
                f"approval rule module {module!r} defines no rule (decorate functions with @rule)"
            )
        rules.extend(found)
    problems = rules_problems(rules)
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
    return rules


def call_context(*, run: Run, spec: ToolSpec | None, tool: str, args: Mapping[str, Any]) -> Call:
    """What a rule sees of a call: its arguments, the run's author and groups, its cost so far
    and the tool's metadata."""
    author = run.goal.author
    return Call(
        tool=tool,
        args=args,
        author=author.get_username(),
        author_groups=frozenset(author.groups.values_list("name", flat=True)),
        cost_usd=Decimal(run.cost_usd or 0),
        tool_meta=_tool_meta(spec),
    )


def _tool_meta(spec: ToolSpec | None) -> dict[str, Any]:
    if spec is None:
        return {}
    return {
        "destructive": spec.destructive,
        "pure": spec.pure,
        "server": spec.server,
        "description": spec.description,
    }
