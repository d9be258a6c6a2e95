"""The demo shop's approval rules (AGENTSITE_APPROVAL_RULE_MODULES=plans.demo.approval_rules).

Tried in this order; the first that matches decides. A refund no rule matches is decided by
one reviewer, as without rules.
"""

from __future__ import annotations

import json
from pathlib import Path

from plans.engine.approval_rules import Call, approve, deny, require, route, rule

HOUR = 3600

# The shop's orders as shipped with the demo (read once: a rule sees only fixed data).
_ORDERS = {
    order["id"]: order
    for order in json.loads(
        (Path(__file__).parent.parent / "tools" / "data" / "orders.json").read_text()
    )["orders"]
}


def _delivered(call: Call) -> bool:
    order = _ORDERS.get(str(call.args.get("order_id", "")).strip().upper())
    return order is not None and order.get("status") == "delivered"


@rule(
    tools=["issue_refund"],
    outcome=deny("refunds over ₹5,00,000 are made by the bank desk, not by the agent"),
)
def huge_refund(call: Call) -> bool:
    """Beyond what the shop lets any agent refund, whoever would approve it."""
    return call.args["amount_inr"] > 500_000


@rule(tools=["issue_refund"], outcome=approve())
def small_refund_on_delivered_order(call: Call) -> bool:
    """Up to ₹1,000 back on an order the customer has received: routine."""
    return call.args["amount_inr"] <= 1_000 and _delivered(call)


@rule(
    tools=["issue_refund"],
    outcome=require(2),
    remind_after=1 * HOUR,
    escalate_after=4 * HOUR,
    escalate_to=["finance"],
)
def large_refund_needs_two_reviewers(call: Call) -> bool:
    """Over ₹50,000: two distinct reviewers approve the same amount."""
    return call.args["amount_inr"] > 50_000


@rule(tools=["issue_refund"], outcome=route("finance"), remind_after=2 * HOUR)
def refund_before_delivery_goes_to_finance(call: Call) -> bool:
    """An order not delivered yet: finance checks the shipment before money goes back."""
    return not _delivered(call)
