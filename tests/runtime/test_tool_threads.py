"""The tool threads: calls run concurrently and their outcomes come back to the caller."""

import queue
import random
import sys
import threading
import time

import pytest

from plans.runtime.tool_threads import ToolThreads


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


def wait_until(condition, seconds=10.0):
    """Whether condition() came true within seconds (polled; the bound is only a safety net)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def named(prefix):
    return [thread for thread in threading.enumerate() if thread.name.startswith(f"{prefix}-")]


@pytest.fixture
def release():
    """An event blocked calls wait on, set at the end so no test leaves a thread stuck."""
    event = threading.Event()
    yield event
    event.set()


def test_a_call_runs_at_once_while_every_kept_thread_is_stuck(release):
    threads = ToolThreads(2)
    stuck = queue.SimpleQueue()
    for _ in range(2):
        threads.submit(release.wait, reply=stuck.put)  # hung tools, given up on by the executor

    replies = queue.SimpleQueue()
    call = threads.submit(pow, 2, 10, reply=replies.put)

    assert replies.get(timeout=10) is call
    assert call.result() == 1024
    assert stuck.empty()


def test_spare_threads_leave_after_idling_and_the_kept_ones_stay(release):
    threads = ToolThreads(2, name="idling", idle_timeout=0.05)
    all_in = threading.Barrier(6, timeout=10)  # five calls at once, and this test

    def hold():
        all_in.wait()
        release.wait()

    replies = queue.SimpleQueue()
    calls = [threads.submit(hold, reply=replies.put) for _ in range(5)]
    all_in.wait()
    assert threads.live() == 5
    release.set()
    assert {replies.get(timeout=10) for _ in calls} == set(calls)

    assert wait_until(lambda: threads.live() == 2 and len(named("idling")) == 2)
    time.sleep(0.5)  # ten idle timeouts: the kept threads do not leave
    assert threads.live() == 2
    assert len(named("idling")) == 2
    call = threads.submit(pow, 3, 2, reply=replies.put)
    assert replies.get(timeout=10) is call


def test_past_the_upper_bound_calls_wait_for_a_thread_and_run_in_order(release):
    threads = ToolThreads(1, max_size=1)
    started = threading.Event()

    def hold():
        started.set()
        release.wait()

    replies = queue.SimpleQueue()
    held = threads.submit(hold, reply=replies.put)
    assert started.wait(timeout=10)
    waiting = [threads.submit(pow, 2, n, reply=replies.put) for n in range(3)]

    assert threads.live() == 1
    assert replies.empty()  # no thread is free to have run them
    release.set()
    assert [replies.get(timeout=10) for _ in range(4)] == [held, *waiting]
    assert [call.result() for call in waiting] == [1, 2, 4]


def test_no_call_is_lost_to_a_spare_thread_leaving_as_it_is_handed_one(release):
    threads = ToolThreads(1, idle_timeout=0.001)  # spares leave about as often as calls come
    threads.submit(release.wait, reply=lambda call: None)  # every later call goes to spares
    replies = queue.SimpleQueue()

    for n in range(300):
        call = threads.submit(pow, 2, n, reply=replies.put)
        assert replies.get(timeout=10) is call
        time.sleep(random.choice((0, 0.0005, 0.001, 0.002)))


def test_a_call_handed_to_a_spare_thread_just_as_it_times_out_is_run(release):
    threads = ToolThreads(1, idle_timeout=0.1)
    threads.submit(release.wait, reply=lambda call: None)  # every later call goes to a spare
    replies = queue.SimpleQueue()
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(30)  # so the spinning below keeps the interpreter lock throughout
    try:
        for n in range(2):
            first = threads.submit(pow, 2, n, reply=replies.put)
            assert replies.get(timeout=10) is first
            assert wait_until(lambda: threads.idle() == 1)  # the spare waits for a call
            spin_until = time.perf_counter() + 0.3
            while time.perf_counter() < spin_until:
                pass  # past the spare's timeout, which it cannot act on without the lock
            second = threads.submit(pow, 3, n, reply=replies.put)  # so it is handed this first
            assert replies.get(timeout=10) is second
    finally:
        sys.setswitchinterval(switch_interval)


def test_calls_submitted_from_many_threads_at_once_all_run(release):
    threads = ToolThreads(2, max_size=6, idle_timeout=0.001)
    threads.submit(release.wait, reply=lambda call: None)
    replies = queue.SimpleQueue()
    go = threading.Barrier(8, timeout=10)

    def submitter():
        go.wait()
        for _ in range(200):
            threads.submit(time.sleep, random.choice((0, 0.0001)), reply=replies.put)

    submitters = [threading.Thread(target=submitter) for _ in range(8)]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join(timeout=10)

    assert len({replies.get(timeout=10) for _ in range(8 * 200)}) == 8 * 200
    assert wait_until(lambda: threads.live() == 2)
