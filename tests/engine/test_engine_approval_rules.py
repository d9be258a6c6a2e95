"""Approval rules: first match wins, pure and deterministic, broken rules fail closed."""

from decimal import Decimal

import pytest

from plans.engine.approval_rules import (
    NO_RULE,
    Call,
    Kind,
    RuleInvalid,
    approve,
    call_match,
    deny,
    require,
    route,
    rule,
    rules_in,
    rules_problems,
)


def refund(amount, **context):
    return Call(tool="issue_refund", args={"order_id": "A-1", "amount_inr": amount}, **context)


@rule(tools=["issue_refund"], outcome=approve())
def small(call):
    return call.args["amount_inr"] <= 1000


@rule(tools=["issue_refund"], outcome=require(2, groups=["finance"]))
def large(call):
    return call.args["amount_inr"] > 50_000


@rule(outcome=deny("no e-mails on Sundays"))
def any_email(call):
    return call.tool == "send_email"


RULES = [small, large, any_email]


def test_the_first_matching_rule_gives_the_outcome():
    assert call_match(RULES, refund(800)).rule is small
    assert call_match(RULES, refund(60_000)).outcome == require(2, groups=["finance"])
    assert call_match([large, small], refund(800)).rule is small


def test_no_matching_rule_means_one_reviewer_as_before():
    match = call_match(RULES, refund(5_000))
    assert match.rule is None
    assert match.outcome == NO_RULE
    assert (NO_RULE.kind, NO_RULE.approvals, NO_RULE.groups) == (Kind.REQUIRE, 1, ())


def test_a_rule_only_sees_the_tools_it_names():
    mail = Call(tool="send_email", args={"to": "x"})
    assert call_match([small, large], mail).rule is None
    assert call_match(RULES, mail).outcome.kind is Kind.DENY


def test_matching_is_deterministic_on_the_same_call():
    call = refund(800, author="alice", author_groups=frozenset({"authors"}))
    assert {call_match(RULES, call).rule.version for _ in range(50)} == {small.version}


def test_a_rule_that_raises_stops_the_search_and_leaves_it_to_a_person():
    @rule(outcome=approve())
    def broken(call):
        return call.args["missing"] > 0

    match = call_match([broken, small], refund(800))
    assert match.rule is broken
    assert "KeyError" in match.error
    assert match.outcome == NO_RULE  # not the approve of the broken rule, nor the next one's


def test_a_rule_answering_other_than_true_or_false_does_not_decide():
    @rule(outcome=approve())
    def sloppy(call):
        return call.args["amount_inr"]  # truthy, but not an answer

    match = call_match([sloppy], refund(800))
    assert "not True or False" in match.error
    assert match.outcome == NO_RULE


def test_a_rule_cannot_change_the_arguments_the_call_is_made_with():
    @rule(outcome=approve())
    def meddling(call):
        call.args["amount_inr"] = 1
        return True

    args = {"order_id": "A-1", "amount_inr": 90_000}
    match = call_match([meddling], Call(tool="issue_refund", args=args))
    assert args["amount_inr"] == 90_000
    assert match.error and match.outcome == NO_RULE


def test_the_context_reaches_the_predicate():
    @rule(outcome=route("finance"))
    def expensive_interns(call):
        return "interns" in call.author_groups and call.cost_usd > Decimal("0.10")

    cheap = refund(10, author="ivy", author_groups=frozenset({"interns"}), cost_usd=Decimal("0.01"))
    dear = refund(10, author="ivy", author_groups=frozenset({"interns"}), cost_usd=Decimal("0.20"))
    assert call_match([expensive_interns], cheap).rule is None
    assert call_match([expensive_interns], dear).outcome.groups == ("finance",)


def test_the_version_changes_with_the_source_and_the_settings():
    def make(outcome, limit):
        namespace = {"rule": rule, "outcome": outcome}
        exec(  # noqa: S102 - the test's own source text, to compare two versions of one rule
            f"@rule(outcome=outcome)\ndef r(call):\n    return call.args['amount_inr'] < {limit}\n",
            namespace,
        )
        return namespace["r"]

    assert make(approve(), 10).version == make(approve(), 10).version
    assert make(approve(), 10).version != make(approve(), 11).version
    assert make(approve(), 10).version != make(route("finance"), 10).version


def helper_limit():
    return 1000


@rule(outcome=approve())
def uses_a_helper(call):
    return call.args["amount_inr"] <= helper_limit()


def test_the_version_covers_the_helpers_a_rule_calls(monkeypatch):
    import inspect

    from plans.engine import approval_rules

    real = inspect.getsource

    def helper_changed(fn):
        return real(fn) + "# changed" if fn is helper_limit else real(fn)

    monkeypatch.setattr(approval_rules.inspect, "getsource", helper_changed)
    again = rule(outcome=approve())(uses_a_helper.when)
    assert again.version != uses_a_helper.version


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: require(0), "from 1 to 20"),
        (lambda: require(True), "from 1 to 20"),
        (lambda: route(), "at least one group"),
        (lambda: route(""), "at least one group"),
        (lambda: deny(" "), "a reason is required"),
        (lambda: rule(outcome="approve"), "outcome must be"),
        (lambda: rule(outcome=approve(), tools="issue_refund"), "not one string"),
        (lambda: rule(outcome=route("x"), escalate_after=60), "needs escalate_to"),
        (lambda: rule(outcome=approve(), remind_after=60), "deadlines only apply"),
        (lambda: rule(outcome=route("x"), ttl=0), "above 0"),
        (lambda: rule(outcome=approve())(lambda call: True), "a named function"),
    ],
)
def test_a_badly_written_rule_is_refused_with_a_message_naming_the_problem(make, message):
    with pytest.raises(RuleInvalid, match=message):
        make()


def test_a_module_s_rules_are_its_own_in_definition_order():
    namespace = {"small": small, "large": large, "imported": any_email}
    assert rules_in(namespace, __name__) == [small, large, any_email]
    assert rules_in(namespace, "elsewhere") == []


def test_two_rules_of_one_name_are_a_problem():
    assert rules_problems([small, small]) and not rules_problems(RULES)
