"""A preview's stored form, and what changed between two of them."""

import pytest

from plans.engine import Preview, PreviewInvalid, preview_changes, preview_data, preview_version
from plans.engine.previews import SUMMARY_MAX_CHARS


def stored(**facts):
    return preview_data(Preview(summary="Refund", facts=facts, target_version="v1"))


def test_facts_keep_their_order_and_read_as_text():
    data = preview_data(
        Preview(summary=" Refund ", facts=[("Total", 2499), ("Whole", True)], warnings=["all"])
    )

    assert data == {
        "summary": "Refund",
        "facts": [["Total", "2499"], ["Whole", "yes"]],
        "warnings": ["all"],
        "target_version": "",
    }


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"summary": "x"}, "returned dict, not a Preview"),
        (Preview(summary="  "), "summary must be a non-empty string"),
        (Preview(summary="x", target_version=3), "target_version must be a string, got int"),
        (Preview(summary="x", facts=["lonely"]), r"a \(label, value\) pair"),
    ],
)
def test_a_hook_answer_that_is_not_a_preview_is_refused_saying_why(answer, says):
    with pytest.raises(PreviewInvalid, match=says):
        preview_data(answer)


def test_long_text_is_cut_saying_so():
    data = preview_data(Preview(summary="x" * 1000))
    assert len(data["summary"]) == SUMMARY_MAX_CHARS and data["summary"].endswith("…")


def test_a_failed_preview_has_no_version():
    assert preview_version({"error": "timed out"}) is None
    assert preview_version(None) is None
    assert preview_version(stored()) == "v1"


def test_what_changed_is_said_fact_by_fact():
    before = stored(Refunded="₹0", Left="₹2,499")
    after = {**stored(Refunded="₹500", Card="Visa"), "warnings": ["partly refunded"]}

    assert preview_changes(before, after) == [
        "Refunded: ₹0 → ₹500",
        "Card: now Visa",
        "Left: no longer shown (was ₹2,499)",
        "new warning: partly refunded",
    ]
    assert preview_changes(before, {"error": "boom"}) == [
        "the preview could not be taken again (boom)"
    ]
    assert preview_changes(before, before) == [
        "the target's version changed (its facts read the same)"
    ]
