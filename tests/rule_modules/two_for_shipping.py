"""A rule module for tests: every shipment (tests.preview_tools) needs two distinct reviewers."""

from plans.engine.approval_rules import Call, require, rule


@rule(tools=["ship", "ship_hanging"], outcome=require(2))
def shipments_need_two_reviewers(call: Call) -> bool:
    return True
