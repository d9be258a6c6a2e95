"""The extract a prompt shows of a large result, its references and the slices read of it."""

import json

import pytest

from plans.engine import (
    held_ref,
    held_ref_parts,
    result_extract,
    result_part,
    result_shape,
)

REPORT = {"title": "Q3", "rows": [{"sku": f"S{i}", "qty": i} for i in range(300)]}


def test_a_reference_names_a_plan_version_and_step_and_nothing_else():
    assert held_ref(2, 7) == "v2.step7"
    assert held_ref_parts(" v2.step7 ") == (2, 7)
    for bad in ("step7", "v2.7", "run3.v2.step7", "v2.step7; drop"):
        with pytest.raises(ValueError, match="is not a held result's reference"):
            held_ref_parts(bad)


def test_the_shape_gives_kinds_lengths_and_keys():
    assert result_shape(REPORT) == (
        "object with 2 keys: title (text of 2 chars), rows (list of 300 objects with keys sku, qty)"
    )
    assert result_shape("a\nb") == "text of 3 chars, 2 lines"
    assert result_shape([1, "x"]) == "list of 2 items (int, text)"


def test_the_extract_holds_the_first_part_the_shape_and_the_reference():
    text = json.dumps(REPORT)
    extract = result_extract(REPORT, text=text, step_id=3, ref="v1.step3", head_chars=100)

    assert extract.startswith(f"result of step 3: {len(text):,} chars, held whole as ref v1.step3")
    assert extract.endswith(f"first 100 chars:\n{text[:100]}")
    assert "shape: object with 2 keys" in extract


def test_a_part_is_read_by_offset_or_path_and_is_bounded():
    whole = json.dumps(REPORT, ensure_ascii=False)
    part = result_part(REPORT, offset=10, length=50)
    assert part["text"] == whole[10:60] and part["next_offset"] == 60
    assert part["total_chars"] == len(whole)

    row = result_part(REPORT, path="rows[299]", length=4000)
    assert json.loads(row["text"]) == {"sku": "S299", "qty": 299}
    assert row["next_offset"] is None
    assert result_part(REPORT, path="rows.-1.sku", length=10)["text"] == "S299"

    with pytest.raises(ValueError, match="has 300 items: no \\[300\\]"):
        result_part(REPORT, path="rows[300]", length=10)
    with pytest.raises(ValueError, match="has no key 'price'"):
        result_part(REPORT, path="rows[0].price", length=10)
    with pytest.raises(ValueError, match="length must be from 1 to 4,000"):
        result_part(REPORT, length=4001)
