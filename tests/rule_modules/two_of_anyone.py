"""A rule module for tests: every refund needs two distinct reviewers."""

from plans.engine.approval_rules import Call, require, rule


@rule(tools=["issue_refund"], outcome=require(2))
def refunds_need_two_reviewers(call: Call) -> bool:
    return True
