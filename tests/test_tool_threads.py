"""The tool threads: calls run concurrently and their outcomes come back to the caller."""

import queue
import threading

import pytest

from plans.tool_threads import ToolThreads


def test_a_call_replies_with_its_result():
    replies = queue.SimpleQueue()
    call = ToolThreads(2).submit(pow, 2, 10, reply=replies.put)

    assert replies.get(timeout=5) is call
    assert call.result() == 1024


def test_what_a_call_raised_is_raised_again_to_the_caller():
    replies = queue.SimpleQueue()
    ToolThreads(1).submit(int, "not a number", reply=replies.put)

    with pytest.raises(ValueError, match="not a number"):
        replies.get(timeout=5).result()


def test_calls_run_at_the_same_time_up_to_the_number_of_threads():
    everyone_in = threading.Barrier(4, timeout=5)  # passes only if all four run at once
    replies = queue.SimpleQueue()
    threads = ToolThreads(4)

    calls = [threads.submit(everyone_in.wait, reply=replies.put) for _ in range(4)]

    assert {replies.get(timeout=5) for _ in calls} == set(calls)
    assert sorted(call.result() for call in calls) == [0, 1, 2, 3]
