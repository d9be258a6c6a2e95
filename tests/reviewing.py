"""Approval requests and the people who decide them, as the approval tests make them."""

from __future__ import annotations

import threading

from django.contrib.auth.models import Group, Permission
from django.db import connections

from plans.engine import preview_token
from plans.models import Approval
from plans.runtime.advance import advance_run
from plans.services.approvals import ApprovalRefused, approvals_decide
from plans.services.runs import run_create


def decider(django_user_model, name, *groups, **fields):
    """A user who may decide approvals, in the groups named (made when missing)."""
    user = django_user_model.objects.create_user(name, **fields)
    user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return django_user_model.objects.get(pk=user.pk)  # fresh permission cache


def refund_plan(order_id="A-1001", amount=2000, *, reason="r"):
    """One issue_refund step, with nothing before it."""
    args = {"order_id": order_id, "amount_inr": amount, "reason": reason}
    return {"steps": [{"id": 1, "tool": "issue_refund", "args": args, "depends_on": []}]}


def refund_of_order_total(reason, order_id="A-1001"):
    """order_total, then issue_refund of that amount."""
    return {
        "steps": [
            {"id": 1, "tool": "order_total", "args": {"order_id": order_id}, "depends_on": []},
            {
                "id": 2,
                "tool": "issue_refund",
                "args": {"order_id": order_id, "amount_inr": "{{1}}", "reason": reason},
                "depends_on": [1],
            },
        ]
    }


def shown_token(approval):
    """The token of the preview a card (or an e-mail link's page) shows with the approval."""
    return preview_token(approval.args_sha256, approval.preview)


def waiting_approval(author, plan, *, goal="refund"):
    """The approval request a run of the plan waits on (one, and only one)."""
    run = run_create(author=author, goal_text=goal, plan_data=plan)
    advance_run(run.pk)
    return Approval.objects.get(run=run)


def approve_all_at_once(approval, reviewers):
    """Each reviewer approves in a thread of their own, all released together; what each got:
    "recorded", or the code of the refusal."""
    barrier = threading.Barrier(len(reviewers))
    outcomes = []

    def approve(user):
        barrier.wait(30)
        try:
            approvals_decide(approvals=[approval], reviewer=user, approve=True, resume=False)
            outcomes.append("recorded")
        except ApprovalRefused as refused:
            outcomes.append(refused.code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approve, args=(user,)) for user in reviewers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
