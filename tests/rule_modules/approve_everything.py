"""A rule module for tests: every destructive call is approved by the rule."""

from plans.engine.approval_rules import Call, approve, rule


@rule(outcome=approve())
def approve_everything(call: Call) -> bool:
    """Approves any call (a stand-in for a rule that was loosened)."""
    return True
