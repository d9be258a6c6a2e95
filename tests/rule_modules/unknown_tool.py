"""A rule module for tests: a rule naming a tool nobody registered (a typo)."""

from plans.engine.approval_rules import Call, approve, rule


@rule(tools=["issue_refnud"], outcome=approve())
def small_refunds(call: Call) -> bool:
    return call.args["amount_inr"] < 100
