"""A rule module for tests: a broken rule placed before one that would approve."""

from plans.engine.approval_rules import Call, approve, rule


@rule(tools=["issue_refund"], outcome=approve())
def broken_lookup(call: Call) -> bool:
    """Reads an argument the tool does not have."""
    return call.args["no_such_argument"] > 0


@rule(outcome=approve())
def approve_the_rest(call: Call) -> bool:
    return True
