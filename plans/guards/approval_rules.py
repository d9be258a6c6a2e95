"""The approval rules in force: the modules AGENTSITE_APPROVAL_RULE_MODULES names, and the
context a rule sees (plans.engine.approval_rules does the matching)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, TextField
from django.db.models.functions import Cast

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
    """What these rules would have decided on the approvals asked since then (the same read on
    SQLite and PostgreSQL). Context as of now: the author's groups and the run's cost are
    today's, not the moment's.

    Fast at a million runs: calls of tools no rule names are only counted (one grouped query);
    the others are streamed, with only the columns a rule or a tally needs (the arguments as
    text, decoded here), and the authors' groups come in one query.
    """
    replay = Replay()
    for one in rules:
        replay.tallies[one.name] = RuleTally(one.name, one.outcome.describe())
    no_rule = replay.tallies[""] = RuleTally("", "no rule: 1 reviewer (any)")
    asked = Approval.objects.filter(requested_at__gte=since)
    # A rule without tools is about every tool: then every call is matched.
    named = None if any(not one.tools for one in rules) else set().union(*(r.tools for r in rules))
    if named is not None:
        unnamed = asked.exclude(tool__in=named).values_list("tool").annotate(n=Count("pk"))
        for _, count in unnamed.order_by():
            replay.approvals += count
            no_rule.matched += count
        asked = asked.filter(tool__in=named)
    meta = {name: _tool_meta(spec) for name, spec in get_registry().items()}
    groups_of = _groups_by_user()
    rows = (
        asked.order_by("pk")
        .annotate(args_text=Cast("requested_args", TextField()))
        .values_list(
            "pk",
            "run_id",
            "tool",
            "args_text",
            "decision",
            "via",
            "run__goal__author_id",
            "run__goal__author__username",
            "run__cost_usd",
        )
    )
    for pk, run_id, tool, args_text, decision, via, author_id, author, cost in rows.iterator(
        chunk_size=5000
    ):
        replay.approvals += 1
        args = json.loads(args_text) if args_text else {}
        call = Call(
            tool=tool,
            args=args if isinstance(args, dict) else {},
            author=author,
            author_groups=groups_of.get(author_id, frozenset()),
            cost_usd=Decimal(cost or 0),
            tool_meta=meta.get(tool, {}),
        )
        match = call_match(rules, call)
        if match.error:
            replay.errors += 1
        tally = no_rule if match.rule is None or match.error else replay.tallies[match.rule.name]
        tally.matched += 1
        kind = match.outcome.kind if match.rule is not None and not match.error else None
        against = (kind is Kind.APPROVE and decision == Approval.Decision.REJECTED) or (
            kind is Kind.DENY and decision == Approval.Decision.APPROVED
        )
        if not against:
            continue
        tally.decided_otherwise += 1
        if via in (Approval.Via.RULE, Approval.Via.TTL):
            continue  # decided by no person
        if kind is Kind.APPROVE:
            cases = replay.approve_rejected
            replay.approve_rejected_count += 1
        else:
            cases = replay.deny_approved
            replay.deny_approved_count += 1
        if len(cases) < listed:
            cases.append(
                Disagreement(
                    approval_id=pk,
                    run_id=run_id,
                    tool=tool,
                    args=args,
                    rule=tally.name,
                    decided=decision,
                    reason="",
                )
            )
    _who_and_why(replay.approve_rejected, replay.deny_approved)
    return replay


def _groups_by_user() -> dict[int, frozenset[str]]:
    """Every user's group names, by user id, in one query."""
    membership = get_user_model().groups.through.objects.values_list("user_id", "group__name")
    names: dict[int, set[str]] = {}
    for user_id, name in membership:
        names.setdefault(user_id, set()).add(name)
    return {user_id: frozenset(found) for user_id, found in names.items()}


def _who_and_why(*lists: list[Disagreement]) -> None:
    """The listed cases' reviewers and reasons, read for those few alone (not per streamed row)."""
    cases = [case for found in lists for case in found]
    rows = Approval.objects.filter(pk__in=[case.approval_id for case in cases]).values_list(
        "pk", "reviewer__username", "via", "reason"
    )
    by_id = {pk: (reviewer, via, reason) for pk, reviewer, via, reason in rows}
    for found in lists:
        for index, case in enumerate(found):
            reviewer, via, reason = by_id[case.approval_id]
            found[index] = replace(
                case, decided=f"{case.decided} by {reviewer or via}", reason=reason
            )
