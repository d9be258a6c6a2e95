"""The statistics behind the eval report: Wilson intervals and Cohen's kappa."""

import pytest

from plans.evals.stats import cohens_kappa, wilson_interval

HUMAN = ["pass", "fail", "fail", "pass", "fail", "pass", "fail", "pass"]


def test_kappa_credits_a_judge_that_agrees_beyond_chance():
    judge = ["pass", "pass", "fail", "pass", "fail", "pass", "fail", "pass"]

    agreement = cohens_kappa(judge, HUMAN)

    assert agreement.observed == 7 / 8
    assert agreement.expected == 0.5
    assert agreement.kappa == pytest.approx(0.75)


def test_kappa_of_a_judge_that_always_says_pass_is_zero_though_it_agrees_half_the_time():
    agreement = cohens_kappa(["pass"] * 8, HUMAN)

    assert agreement.observed == 0.5
    assert agreement.kappa == pytest.approx(0.0)


def test_kappa_matches_the_textbook_two_by_two_example():
    # 50 items: both yes 20, first yes second no 5, first no second yes 10, both no 15.
    first = ["yes"] * 25 + ["no"] * 25
    second = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15

    agreement = cohens_kappa(first, second)

    assert agreement.observed == pytest.approx(0.7)
    assert agreement.expected == pytest.approx(0.5)
    assert agreement.kappa == pytest.approx(0.4)


def test_kappa_is_negative_when_raters_disagree_more_than_chance():
    assert cohens_kappa(["a", "b", "a", "b"], ["b", "a", "b", "a"]).kappa == pytest.approx(-1.0)


def test_kappa_refuses_lists_of_different_lengths_or_none():
    with pytest.raises(ValueError, match="3 and 2"):
        cohens_kappa(["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match="no items"):
        cohens_kappa([], [])


def test_the_wilson_interval_of_half_of_ten():
    rate = wilson_interval(5, 10)

    assert rate.rate == 0.5
    assert rate.low == pytest.approx(0.2366, abs=1e-4)
    assert rate.high == pytest.approx(0.7634, abs=1e-4)


def test_the_wilson_interval_stays_inside_zero_and_one_at_the_ends():
    none = wilson_interval(0, 10)
    every = wilson_interval(10, 10)

    assert none.low == 0.0 and none.high == pytest.approx(0.2775, abs=1e-4)
    assert every.high == 1.0 and every.low == pytest.approx(0.7225, abs=1e-4)


def test_the_wilson_interval_refuses_more_passes_than_trials():
    with pytest.raises(ValueError, match="11 of 10"):
        wilson_interval(11, 10)
