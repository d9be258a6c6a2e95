import random
from decimal import Decimal

import pytest

from plans.engine import (
    Budget,
    args_match_sha256,
    args_sha256,
    backoff_delay,
    blocked_result,
    budget_problem,
    canonical_json,
    idempotency_key,
    legacy_args_sha256,
)


def test_canonical_json_sorts_keys_drops_spaces_and_keeps_unicode():
    assert canonical_json({"b": 1, "a": ["₹", {"d": None, "c": True}]}) == (
        '{"a":["₹",{"c":true,"d":null}],"b":1}'
    )


def test_the_args_hash_ignores_key_order_but_not_the_tool_or_values():
    digest = args_sha256("issue_refund", {"order_id": "A-1001", "amount_inr": 2499})

    assert digest == args_sha256("issue_refund", {"amount_inr": 2499, "order_id": "A-1001"})
    assert digest != args_sha256("issue_refund", {"order_id": "A-1001", "amount_inr": 2500})
    assert digest != args_sha256("send_email", {"order_id": "A-1001", "amount_inr": 2499})
    assert len(digest) == 64
    assert int(digest, 16) >= 0


def test_identical_calls_of_a_run_step_share_an_idempotency_key():
    def key(args, run_id=1, step=""):
        return idempotency_key("send_email", args, run_id=run_id, step=step)

    first = key({"to": "a@example.com", "body": "hi", "copies": 1})

    assert first == key({"copies": 1.0, "body": "hi", "to": "a@example.com"})
    assert first != key({"to": "b@example.com", "body": "hi", "copies": 1})
    assert first != key({"to": "a@example.com", "body": "hi", "copies": 1}, run_id=2)
    assert first != key({"to": "a@example.com", "body": "hi", "copies": 1}, step="repeat")


def test_a_call_hash_compares_numbers_by_value_in_nested_arguments():
    assert args_sha256("t", {"n": 1, "xs": [2, {"y": -0.0}]}) == args_sha256(
        "t", {"n": 1.0, "xs": [2.0, {"y": 0}]}
    )
    assert args_sha256("t", {"n": 1.5}) != args_sha256("t", {"n": 1})
    assert args_sha256("t", {"flag": True}) != args_sha256("t", {"flag": 1})


def test_a_hash_stored_before_numbers_were_compared_by_value_still_matches():
    args = {"amount": 30.0}
    stored = legacy_args_sha256("transfer", args)

    assert stored != args_sha256("transfer", args)
    assert args_match_sha256(stored, "transfer", args)
    assert not args_match_sha256(stored, "transfer", {"amount": 31.0})


@pytest.mark.parametrize(
    ("attempt", "ceiling"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (50, 3.0)]
)
def test_backoff_is_full_jitter_under_an_exponential_ceiling(attempt, ceiling):
    rng = random.Random(7)
    delays = [backoff_delay(attempt, base=0.5, cap=3.0, rng=rng) for _ in range(200)]

    assert all(0 <= delay <= ceiling for delay in delays)
    assert max(delays) > ceiling * 0.9  # spread over the whole range, not pinned low


def test_backoff_is_reproducible_with_the_same_random_source():
    first = [backoff_delay(3, base=1, cap=10, rng=random.Random(1)) for _ in range(3)]

    assert first == [backoff_delay(3, base=1, cap=10, rng=random.Random(1)) for _ in range(3)]


def test_backoff_survives_absurd_attempt_numbers():
    assert 0 <= backoff_delay(10**6, base=1.0, cap=30.0, rng=random.Random(0)) <= 30.0


@pytest.mark.parametrize(
    ("attempt", "base", "cap"), [(0, 1.0, 1.0), (1, -1.0, 1.0), (1, 1.0, -1.0)]
)
def test_backoff_refuses_meaningless_arguments(attempt, base, cap):
    with pytest.raises(ValueError):
        backoff_delay(attempt, base=base, cap=cap, rng=random.Random(0))


BUDGET = Budget(usd=Decimal("0.50"), tokens=200_000)


def test_a_call_that_fits_the_budget_exactly_is_allowed():
    assert (
        budget_problem(
            budget=BUDGET,
            spent_usd=Decimal("0.40"),
            spent_tokens=150_000,
            next_call_usd=Decimal("0.10"),
            next_call_tokens=50_000,
        )
        is None
    )


def test_a_call_over_the_cost_budget_names_the_cost():
    problem = budget_problem(
        budget=BUDGET,
        spent_usd=Decimal("0.45"),
        spent_tokens=1_000,
        next_call_usd=Decimal("0.0612346"),
        next_call_tokens=4_100,
    )

    assert problem == (
        "The next model call (about $0.061235 and 4,100 tokens) would bring the run to "
        "$0.511235 of its $0.50 cost budget."
    )


def test_a_call_over_the_token_budget_names_the_tokens():
    problem = budget_problem(
        budget=BUDGET,
        spent_usd=Decimal("0.01"),
        spent_tokens=199_000,
        next_call_usd=Decimal("0.01"),
        next_call_tokens=4_100,
    )

    assert problem == (
        "The next model call (about $0.01 and 4,100 tokens) would bring the run to "
        "203,100 of its 200,000-token budget."
    )


def test_a_call_over_both_budgets_names_both():
    problem = budget_problem(
        budget=BUDGET,
        spent_usd=Decimal("0.5"),
        spent_tokens=200_000,
        next_call_usd=Decimal("0.1"),
        next_call_tokens=1,
    )

    assert problem is not None
    assert "$0.60 of its $0.50 cost budget and 200,001 of its 200,000-token budget" in problem


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("Wrong amount", "Wrong amount"),
        ("  Wrong amount.  ", "Wrong amount"),
        ("", "none given"),
    ],
)
def test_a_blocked_result_tells_the_model_not_to_retry(reason, text):
    assert blocked_result("issue_refund", reason) == (
        f"BLOCKED: a reviewer declined issue_refund. Reason: {text}. Do not retry."
    )
