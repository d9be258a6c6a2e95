"""A rule module for tests: refunds routed to support, reminded, escalated to finance."""

from plans.engine.approval_rules import Call, route, rule


@rule(
    tools=["issue_refund"],
    outcome=route("support"),
    remind_after=600,
    escalate_after=3600,
    escalate_to=["finance"],
    ttl=7200,
)
def refunds_to_support(call: Call) -> bool:
    return True
