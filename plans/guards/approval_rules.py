"""The approval rules in force: the modules AGENTSITE_APPROVAL_RULE_MODULES names, and the
context a rule sees (plans.engine.approval_rules does the matching)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured

from plans.engine.approval_rules import (
    Call,
    Kind,
    Rule,
    RuleInvalid,
    call_match,
    rules_in,
    rules_problems,
)
from plans.models import Approval, Run
from plans.roles import group_names
from plans.tools import ToolSpec, get_registry


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
    """What a rule sees of a call: its arguments, the run's author and groups (read once per
    author object, as plans.roles reads a reviewer's), its cost so far and the tool's metadata."""
    author = run.goal.author
    return Call(
        tool=tool,
        args=args,
        author=author.get_username(),
        author_groups=group_names(author),
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


def rules_check(rules: list[Rule]) -> list[str]:
    """What would make rules silently useless: tools that are not registered, groups that do
    not exist (nobody could decide what they route)."""
    registry = get_registry()
    known_groups = set(Group.objects.values_list("name", flat=True))
    problems = []
    for one in rules:
        for tool in sorted(one.tools - set(registry)):
            problems.append(f"rule {one.name} ({one.module}) names tool {tool!r}, not registered")
        wanted = [*one.outcome.groups, *one.deadlines.escalate_to]
        for group in dict.fromkeys(g for g in wanted if g not in known_groups):
            problems.append(
                f"rule {one.name} ({one.module}) names group {group!r}, which does not exist"
            )
    return problems


@dataclass
class RuleTally:
    """What one rule (or no rule: name "") would have decided in a replay."""

    name: str
    outcome: str
    matched: int = 0
    decided_otherwise: int = 0  # its outcome differs from what was decided then


@dataclass(frozen=True)
class Disagreement:
    """A past approval a rule would have decided against the person who decided it."""

    approval_id: int
    run_id: int
    tool: str
    args: Any
    rule: str
    decided: str  # approved / rejected, by whom
    reason: str


@dataclass
class Replay:
    """Past approvals against a set of rules: counts per rule, and the cases that matter."""

    approvals: int = 0
    tallies: dict[str, RuleTally] = field(default_factory=dict)
    approve_rejected: list[Disagreement] = field(default_factory=list)
    deny_approved: list[Disagreement] = field(default_factory=list)
    # How many of each there are (the lists hold the first `listed`).
    approve_rejected_count: int = 0
    deny_approved_count: int = 0
    errors: int = 0


def rules_replay(rules: list[Rule], *, since: datetime, listed: int = 50) -> Replay:
    """What these rules would have decided on the approvals asked since then, streamed in
    chunks (the same read on SQLite and PostgreSQL). Context as of now: the author's groups
    and the run's cost are today's, not the moment's."""
    registry = get_registry()
    meta = {name: _tool_meta(spec) for name, spec in registry.items()}
    replay = Replay()
    for one in rules:
        replay.tallies[one.name] = RuleTally(one.name, one.outcome.describe())
    replay.tallies[""] = RuleTally("", "no rule: 1 reviewer (any)")
    groups_of: dict[int, frozenset[str]] = {}
    rows = (
        Approval.objects.filter(requested_at__gte=since)
        .order_by("pk")
        .values_list(
            "pk",
            "run_id",
            "tool",
            "requested_args",
            "decision",
            "via",
            "reason",
            "reviewer__username",
            "run__goal__author_id",
            "run__goal__author__username",
            "run__cost_usd",
        )
    )
    for (
        pk,
        run_id,
        tool,
        args,
        decision,
        via,
        reason,
        reviewer,
        author_id,
        author,
        cost,
    ) in rows.iterator(chunk_size=2000):
        replay.approvals += 1
        if author_id not in groups_of:
            groups_of[author_id] = frozenset(
                Group.objects.filter(user__pk=author_id).values_list("name", flat=True)
            )
        call = Call(
            tool=tool,
            args=args if isinstance(args, dict) else {},
            author=author,
            author_groups=groups_of[author_id],
            cost_usd=Decimal(cost or 0),
            tool_meta=meta.get(tool, {}),
        )
        match = call_match(rules, call)
        if match.error:
            replay.errors += 1
        tally = replay.tallies["" if match.rule is None or match.error else match.rule.name]
        tally.matched += 1
        kind = match.outcome.kind if match.rule is not None and not match.error else None
        by_person = via not in (Approval.Via.RULE, Approval.Via.TTL) and decision in (
            Approval.Decision.APPROVED,
            Approval.Decision.REJECTED,
        )
        against = (kind is Kind.APPROVE and decision == Approval.Decision.REJECTED) or (
            kind is Kind.DENY and decision == Approval.Decision.APPROVED
        )
        if not against:
            continue
        tally.decided_otherwise += 1
        if not by_person:
            continue
        case = Disagreement(
            approval_id=pk,
            run_id=run_id,
            tool=tool,
            args=args,
            rule=tally.name,
            decided=f"{decision} by {reviewer or via}",
            reason=reason,
        )
        if kind is Kind.APPROVE:
            cases = replay.approve_rejected
            replay.approve_rejected_count += 1
        else:
            cases = replay.deny_approved
            replay.deny_approved_count += 1
        if len(cases) < listed:
            cases.append(case)
    return replay
