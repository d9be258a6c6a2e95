"""The export's Streamed lists encode exactly as lists would, read only as they are encoded."""

import json

from plans.selectors.audit import Streamed


def test_streamed_rows_encode_like_a_list_whether_empty_or_not():
    data = {"none": Streamed(lambda: iter([])), "some": Streamed(lambda: iter([{"a": 1}, 2]))}

    text = "".join(json.JSONEncoder(indent=2).iterencode(data))

    assert json.loads(text) == {"none": [], "some": [{"a": 1}, 2]}


def test_streamed_rows_are_not_read_until_encoded():
    reads = []

    def rows():
        reads.append(1)
        return iter([1])

    streamed = Streamed(rows)
    assert reads == []
    assert list(json.loads("".join(json.JSONEncoder(indent=2).iterencode([streamed])))) == [[1]]
    assert reads == [1]  # once: the first row read to tell empty apart is not read again


def test_the_export_text_is_the_data_with_a_record_a_line():
    from datetime import UTC, datetime
    from decimal import Decimal

    from plans.selectors.audit import _export_lines

    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    data = {
        "format": "x",
        "run": {"cost_usd": Decimal("0E-8"), "at": at, "text": "<b>é</b>"},
        "plans": [{"steps": [{"id": 1}, {"id": 2}]}],
        "none": [],
        "events": Streamed(lambda: iter([{"seq": 1, "payload": {"a": [1, 2]}}, {"seq": 2}])),
    }

    text = "".join(_export_lines(data))

    assert json.loads(text) == {
        "format": "x",
        "run": {"cost_usd": "0.00000000", "at": "2026-01-02T03:04:05Z", "text": "<b>é</b>"},
        "plans": [{"steps": [{"id": 1}, {"id": 2}]}],
        "none": [],
        "events": [{"seq": 1, "payload": {"a": [1, 2]}}, {"seq": 2}],
    }
    lines = text.splitlines()
    assert '    {"seq": 1, "payload": {"a": [1, 2]}},' in lines and '    {"seq": 2}' in lines
