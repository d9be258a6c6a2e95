"""Matching a later plan version's destructive calls to the effects earlier versions made."""

import pytest
from engine_catalog import CATALOG, step
from hypothesis import given
from hypothesis import strategies as st

from plans.engine import (
    EFFECT_DONE,
    EFFECT_NOT_DONE,
    EFFECT_UNKNOWN,
    AttemptRecord,
    PastEffect,
    PlanInvalid,
    effect_state,
    past_effect_for,
    past_effects,
    validate_plan,
)


def effect(call, key, state=EFFECT_DONE, origin="plan v1 step 1", result=None):
    return PastEffect(call=call, key=key, state=state, result=result, origin=origin)


def test_identical_calls_match_in_order_the_nth_keeping_the_nth_key():
    past = [effect("refund", "k1"), effect("email", "k2"), effect("refund", "k3")]

    first = past_effect_for("refund", past=past, held=set(), repeat=False)
    second = past_effect_for("refund", past=past, held={"k1"}, repeat=False)
    third = past_effect_for("refund", past=past, held={"k1", "k3"}, repeat=False)

    assert (first.key, second.key, third) == ("k1", "k3", None)


def test_a_call_marked_repeat_or_never_made_before_continues_nothing():
    past = [effect("refund", "k1")]
    assert past_effect_for("refund", past=past, held=set(), repeat=True) is None
    assert past_effect_for("other", past=past, held=set(), repeat=False) is None


def test_a_key_is_listed_once_and_a_later_holder_only_raises_what_is_known():
    past = past_effects(
        [
            effect("refund", "k1", EFFECT_NOT_DONE, "plan v1 step 2"),
            effect("email", "k2", EFFECT_DONE, "plan v1 step 3"),
            effect("refund", "k1", EFFECT_DONE, "plan v2 step 2", result="RF-1"),
            effect("refund", "k1", EFFECT_NOT_DONE, "plan v3 step 2"),
            effect("email", "k2", EFFECT_DONE, "plan v1 step 3"),  # v2's reuse of it
        ]
    )

    assert [(e.key, e.state, e.origin, e.result) for e in past] == [
        ("k1", EFFECT_DONE, "plan v2 step 2", "RF-1"),
        ("k2", EFFECT_DONE, "plan v1 step 3", None),
    ]


@pytest.mark.parametrize(
    ("succeeded", "attempts", "calls", "state"),
    [
        (True, 1, [AttemptRecord("")], EFFECT_DONE),
        (True, 0, [], EFFECT_DONE),  # a reuse: it happened where it came from
        (False, 0, [], None),
        (False, 2, [AttemptRecord("refused"), AttemptRecord("refused")], EFFECT_NOT_DONE),
        (False, 2, [AttemptRecord("refused")], EFFECT_UNKNOWN),  # the worker died mid-call
        (False, 1, [AttemptRecord("timed out; outcome unknown", timed_out=True)], EFFECT_UNKNOWN),
        (
            False,
            1,
            [AttemptRecord("timed out", timed_out=True, late_arrived=True, late_result="RF")],
            EFFECT_DONE,
        ),
        (
            False,
            1,
            [AttemptRecord("timed out", timed_out=True, late_arrived=True, late_error="no")],
            EFFECT_NOT_DONE,
        ),
    ],
)
def test_what_became_of_a_destructive_step(succeeded, attempts, calls, state):
    known = effect_state(succeeded=succeeded, attempts=attempts, calls=calls)
    assert (known[0] if known else None) == state


@given(
    calls=st.lists(st.sampled_from("abc"), max_size=8),
    later=st.lists(st.sampled_from("abc"), max_size=8),
)
def test_no_two_later_calls_continue_one_key_and_each_continues_an_identical_call(calls, later):
    past = past_effects(effect(call, f"k{n}") for n, call in enumerate(calls))
    held: set[str] = set()
    for call in later:
        match = past_effect_for(call, past=past, held=held, repeat=False)
        if match is not None:
            assert match.call == call and match.key not in held
            held.add(match.key)
        else:  # every identical earlier call is taken already
            assert sum(c == call for c in calls) == sum(
                1 for e in past if e.call == call and e.key in held
            )


def test_the_repeat_marker_is_a_boolean_on_destructive_steps_and_round_trips():
    data = {"steps": [{**step(1, "send_email", {"to": "a", "body": "b"}), "repeat": True}]}
    plan = validate_plan(data, CATALOG, max_steps=None)
    assert plan.step(1).repeat and plan.to_json() == data
    assert (
        "repeat"
        not in validate_plan(
            {"steps": [step(1, "send_email", {"to": "a", "body": "b"})]}, CATALOG, max_steps=None
        ).to_json()["steps"][0]
    )

    with pytest.raises(PlanInvalid) as caught:
        validate_plan(
            {"steps": [{**step(1), "repeat": "yes"}, {**step(2), "repeat": True}]},
            CATALOG,
            max_steps=None,
        )
    assert [str(p) for p in caught.value.problems] == [
        "step 1: repeat must be true or false, got string",
        "step 2: repeat applies to destructive tools only; noop is not one",
    ]
