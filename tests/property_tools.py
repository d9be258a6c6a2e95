"""Tools for the executor's property test: pure, impure and destructive, counting their calls.

An impure call may also play the reviewer mid-run, deciding what is waiting at that moment.
"""

from __future__ import annotations

import threading
from collections import Counter

from plans.tools import tool

pure_calls: Counter[int] = Counter()
impure_calls: Counter[int] = Counter()
effects: Counter[int] = Counter()  # destructive label -> times its effect happened
done_keys: set[str] = set()
# The reviewer's answer for each destructive label: True approve, False reject.
decisions: dict[int, bool] = {}
reviewer_id: list[int] = []
_lock = threading.Lock()


def reset(answers: dict[int, bool], reviewer: int) -> None:
    with _lock:
        pure_calls.clear()
        impure_calls.clear()
        effects.clear()
        done_keys.clear()
        decisions.clear()
        decisions.update(answers)
        reviewer_id[:] = [reviewer]


def decide_waiting(run_id: int | None = None) -> int:
    """Decide every pending approval now, as the test's reviewer; how many were decided."""
    from django.contrib.auth import get_user_model

    from plans.models import Approval
    from plans.services.approvals import ApprovalRefused, approval_decide

    reviewer = get_user_model().objects.get(pk=reviewer_id[0])
    pending = Approval.objects.filter(decision="pending")
    if run_id is not None:
        pending = pending.filter(run_id=run_id)
    decided = 0
    for approval in pending:
        try:
            approval_decide(
                approval=approval,
                reviewer=reviewer,
                approve=decisions[approval.args["label"]],
                reason="no",
                resume=False,
            )
            decided += 1
        except ApprovalRefused:
            pass  # decided meanwhile
    return decided


@tool(pure=True)
def pure_op(x: int) -> int:
    """Twice x."""
    with _lock:
        pure_calls[x] += 1
    return 2 * x


@tool
def impure_op(x: int, review_now: bool = False) -> int:
    """How many effects have happened so far, plus x; may decide waiting approvals first."""
    from django.db import connection

    with _lock:
        impure_calls[x] += 1
    if review_now:
        try:
            decide_waiting()
        finally:
            connection.close()
    with _lock:
        return sum(effects.values()) * 1000 + x


@tool(destructive=True)
def effect_op(label: int, idempotency_key: str) -> int:
    """An effect, once per key (checked, done, then recorded: the usual user shape)."""
    with _lock:
        if idempotency_key in done_keys:
            return effects[label]
    with _lock:
        effects[label] += 1
        done_keys.add(idempotency_key)
        return effects[label]
