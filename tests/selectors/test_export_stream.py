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
