"""A rule module for tests: e-mails to customers approved by the rule, refunds decided by a
reviewer under a rule (so the review rollup has both kinds under rule names)."""

from plans.engine.approval_rules import Call, approve, require, rule


@rule(tools=["send_email"], outcome=approve())
def customer_emails_go_out(call: Call) -> bool:
    return str(call.args.get("to", "")).startswith("customer-")


@rule(tools=["issue_refund"], outcome=require(1))
def refunds_need_a_reviewer(call: Call) -> bool:
    return True
