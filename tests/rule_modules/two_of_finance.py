"""A rule module for tests: refunds need two approvals from finance; e-mails go to support."""

from plans.engine.approval_rules import Call, require, route, rule


@rule(tools=["issue_refund"], outcome=require(2, groups=["finance"]))
def refunds_need_two_from_finance(call: Call) -> bool:
    return True


@rule(tools=["send_email"], outcome=route("support"))
def emails_go_to_support(call: Call) -> bool:
    return True
