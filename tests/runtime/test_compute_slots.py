"""Compute slots: a worker group's runs advance at most `size` at once, returners first."""

import threading

from plans.runtime.worker import ComputeSlots


def test_a_claim_waits_for_a_free_slot_and_gives_up_after_its_timeout():
    slots = ComputeSlots(1)
    assert slots.acquire_to_claim(1.0)
    assert not slots.acquire_to_claim(0.01)
    slots.release()
    assert slots.acquire_to_claim(0.01)


def test_a_run_back_from_a_wait_takes_a_freed_slot_before_a_new_claim():
    slots = ComputeSlots(1)
    assert slots.acquire_to_claim(1.0)
    order: list[str] = []
    returned = threading.Event()

    def come_back() -> None:
        slots.acquire_to_return()
        order.append("returner")
        returned.set()

    returner = threading.Thread(target=come_back)
    returner.start()
    while slots._returning == 0:  # the returner is queued
        threading.Event().wait(0.001)
    assert not slots.acquire_to_claim(0.01)  # a claim yields to the returner, not the reverse
    slots.release()
    assert returned.wait(5)
    assert order == ["returner"]
    assert not slots.acquire_to_claim(0.01)
    slots.release()
    assert slots.acquire_to_claim(1.0)
    returner.join()
