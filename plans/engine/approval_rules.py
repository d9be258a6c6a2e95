"""Approval policies as code: rules that decide a destructive call before a person is asked.

A rule module is a Python module of ``@rule``-decorated predicates, in the order they are
tried; the first whose tools and predicate match gives the outcome. Matching is pure: it sees
only the ``Call`` it is given (the exact resolved arguments and the run's context, frozen),
so the same call and rules always give the same answer. Which rule decided is recorded with a
version hash of its source, and a decision once stored is never re-evaluated (plans.runtime.gate).
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import Any

RULE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,79}$")


class Kind(StrEnum):
    APPROVE = "approve"  # decided by the rule itself: no person is asked
    REQUIRE = "require"  # n distinct reviewers from the groups
    ROUTE = "route"  # one reviewer, from the groups only
    DENY = "deny"  # refused by the rule, with its reason


@dataclass(frozen=True)
class Outcome:
    """What a matching rule decides: approve, require n reviewers, route, or deny."""

    kind: Kind
    approvals: int = 1
    groups: tuple[str, ...] = ()
    reason: str = ""

    def describe(self) -> str:
        """The outcome in a few words, as pages and commands show it."""
        groups = " or ".join(self.groups)
        if self.kind is Kind.APPROVE:
            return "approve automatically"
        if self.kind is Kind.DENY:
            return f"deny: {self.reason}"
        if self.kind is Kind.ROUTE:
            return f"route to {groups}"
        who = f"from {groups}" if groups else "(any reviewer)"
        if self.approvals == 1:
            return f"1 reviewer {who}"
        return f"{self.approvals} distinct reviewers {who}"


def approve() -> Outcome:
    """Approve automatically: recorded as decided by the rule, never by a person."""
    return Outcome(Kind.APPROVE)


def require(approvals: int, *, groups: Sequence[str] = ()) -> Outcome:
    """Run only after ``approvals`` distinct reviewers (members of ``groups``, if named) approved
    the same arguments."""
    if isinstance(approvals, bool) or not isinstance(approvals, int) or not 1 <= approvals <= 20:
        raise RuleInvalid(
            f"require(): approvals must be a whole number from 1 to 20, got {approvals!r}"
        )
    named = _groups(groups, "require") if groups else ()
    return Outcome(Kind.REQUIRE, approvals=approvals, groups=named)


def route(*groups: str) -> Outcome:
    """Decidable (by one reviewer) only by members of these groups."""
    return Outcome(Kind.ROUTE, groups=_groups(groups, "route"))


def deny(reason: str) -> Outcome:
    """Refuse the call with this reason (it is shown to the run and the model)."""
    if not isinstance(reason, str) or not reason.strip():
        raise RuleInvalid("deny(): a reason is required")
    return Outcome(Kind.DENY, reason=reason.strip())


def _groups(groups: Iterable[str], where: str) -> tuple[str, ...]:
    named = tuple(groups)
    if not named or not all(isinstance(g, str) and g.strip() for g in named):
        raise RuleInvalid(f"{where}(): name at least one group, each a non-empty string")
    return tuple(dict.fromkeys(g.strip() for g in named))


class RuleInvalid(ValueError):
    """A rule that cannot be used; the message names it and what is wrong."""


@dataclass(frozen=True)
class Deadlines:
    """When a person's decision is chased: a reminder, an escalation to groups, expiry."""

    remind_after_s: float | None = None
    escalate_after_s: float | None = None
    escalate_to: tuple[str, ...] = ()
    ttl_s: float | None = None


@dataclass(frozen=True)
class Call:
    """What a rule sees: the exact resolved arguments and the run's context, read-only."""

    tool: str
    args: Mapping[str, Any]
    author: str = ""
    author_groups: frozenset[str] = frozenset()
    cost_usd: Decimal = Decimal(0)
    tool_meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """One rule: the tools it is about, its predicate, its outcome and deadlines."""

    name: str
    tools: frozenset[str]
    when: Callable[[Call], bool]
    outcome: Outcome
    deadlines: Deadlines
    version: str  # hash of the predicate's source and the rule's settings
    module: str
    doc: str = ""

    def applies_to(self, tool: str) -> bool:
        return not self.tools or tool in self.tools


def rule(
    *,
    outcome: Outcome,
    tools: Iterable[str] = (),
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: Sequence[str] = (),
    ttl: float | None = None,
) -> Callable[[Callable[[Call], bool]], Rule]:
    """Make the decorated predicate a rule (its name is the function's; times in seconds)."""
    if isinstance(tools, str):
        raise RuleInvalid("tools must be a list of tool names, not one string")
    if not isinstance(outcome, Outcome):
        raise RuleInvalid(
            f"outcome must be approve(), require(), route() or deny(), got {outcome!r}"
        )
    deadlines = Deadlines(
        remind_after_s=_seconds(remind_after, "remind_after"),
        escalate_after_s=_seconds(escalate_after, "escalate_after"),
        escalate_to=_groups(escalate_to, "escalate_to") if escalate_to else (),
        ttl_s=_seconds(ttl, "ttl"),
    )
    if deadlines.escalate_after_s is not None and not deadlines.escalate_to:
        raise RuleInvalid("escalate_after needs escalate_to: the groups it escalates to")
    if outcome.kind in (Kind.APPROVE, Kind.DENY) and deadlines != Deadlines():
        raise RuleInvalid("deadlines only apply to outcomes a person decides (require, route)")

    def make(when: Callable[[Call], bool]) -> Rule:
        name = getattr(when, "__name__", "")
        if not RULE_NAME.match(name):
            raise RuleInvalid(
                f"a rule is a named function (lower_case_with_underscores), got {name!r}"
            )
        settings_text = repr((sorted(tools), outcome, deadlines))
        return Rule(
            name=name,
            tools=frozenset(tools),
            when=when,
            outcome=outcome,
            deadlines=deadlines,
            version=rule_version(_source(when), settings_text),
            module=getattr(when, "__module__", ""),
            doc=inspect.getdoc(when) or "",
        )

    return make


def _seconds(value: float | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise RuleInvalid(f"{what} must be a number of seconds above 0, got {value!r}")
    return float(value)


def _source(fn: Callable[..., Any], seen: set[int] | None = None) -> str:
    """The predicate's source, with that of the module's functions it calls (its helpers)."""
    seen = seen if seen is not None else set()
    seen.add(id(fn))
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        # No source file (a rule built at run time): its compiled code identifies it instead.
        code = getattr(fn, "__code__", None)
        return repr(code.co_code + repr(code.co_consts).encode()) if code else repr(fn)
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", {})
    for name in sorted(code.co_names if code else ()):
        helper = namespace.get(name)
        if (
            inspect.isfunction(helper)
            and helper.__module__ == fn.__module__
            and id(helper) not in seen
        ):
            text += "\n" + _source(helper, seen)
    return text


def rule_version(source: str, settings_text: str = "") -> str:
    """The short hash naming one version of a rule: its source and its settings."""
    return hashlib.sha256(f"{source}\n{settings_text}".encode()).hexdigest()[:12]


def rules_in(namespace: Mapping[str, Any], module: str) -> list[Rule]:
    """The rules a module defines, in the order it defines them (imported ones excluded)."""
    return [v for v in namespace.values() if isinstance(v, Rule) and v.module == module]


def rules_problems(rules: Sequence[Rule]) -> list[str]:
    """What is wrong with a list of rules as a whole (names must be unique)."""
    seen: dict[str, str] = {}
    problems = []
    for one in rules:
        if one.name in seen:
            problems.append(
                f"rule {one.name!r} is defined in both {seen[one.name]} and {one.module}: "
                "names must be unique"
            )
        seen.setdefault(one.name, one.module)
    return problems


@dataclass(frozen=True)
class Match:
    """The rule that matched a call (None: no rule did), or the error one raised."""

    rule: Rule | None
    error: str = ""

    @property
    def outcome(self) -> Outcome:
        if self.rule is None or self.error:
            # No rule, or a broken one: a person decides, as before rules existed.
            return NO_RULE
        return self.rule.outcome


# What happens when no rule matches: one reviewer, whoever may decide (today's behaviour).
NO_RULE = Outcome(Kind.REQUIRE, approvals=1)


# Values that are read-only already (checked by exact type first: isinstance against the
# Mapping ABC is most of a small call's matching cost).
_IMMUTABLE = frozenset({str, int, float, bool, type(None), Decimal})


def frozen(value: Any) -> Any:
    """A read-only copy of JSON data: a rule cannot change what the call will be made with."""
    if type(value) in _IMMUTABLE:
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


def call_match(rules: Sequence[Rule], call: Call) -> Match:
    """The first rule that matches the call; a rule that raises, or answers other than True or
    False, stops the search there (fail closed: a person decides, and the error is kept)."""
    call = Call(
        tool=call.tool,
        args=frozen(call.args),
        author=call.author,
        author_groups=frozenset(call.author_groups),
        cost_usd=call.cost_usd,
        tool_meta=frozen(call.tool_meta),
    )
    for one in rules:
        if not one.applies_to(call.tool):
            continue
        try:
            answer = one.when(call)
        except Exception as exc:  # a rule's bug must not decide a call
            return Match(one, error=f"rule {one.name} raised {type(exc).__name__}: {exc}")
        if answer is True:
            return Match(one)
        if answer is not False:
            return Match(one, error=f"rule {one.name} answered {answer!r}, not True or False")
    return Match(None)
