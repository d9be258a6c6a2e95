"""SQLite wake-ups: an enqueue's commit reaches other worker processes' sockets on this host."""

import socket
import threading

import pytest
from django.db import connection

from plans.journal.wakeups import SUFFIX, WakeupListener, wakeups_dir, wakeups_send

pytestmark = pytest.mark.django_db


@pytest.fixture
def directory():
    if connection.vendor != "sqlite":
        pytest.skip("wake-up sockets serve SQLite only")
    path = wakeups_dir()
    assert path is not None
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def test_a_send_wakes_a_listener_of_another_process(directory):
    woken = threading.Event()
    listener = WakeupListener(directory, woken.set).start()
    try:
        wakeups_send()
        assert woken.wait(10)
    finally:
        listener.stop()
    listener.thread.join(5)
    assert not listener.thread.is_alive()


def test_a_send_removes_the_socket_of_a_process_that_is_gone(directory):
    stale = directory / f"gone{SUFFIX}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as left_behind:
        left_behind.bind(str(stale))
    assert stale.exists()
    wakeups_send()
    assert not stale.exists()


def test_an_in_memory_database_has_no_wake_ups():
    connection.settings_dict["NAME"], kept = ":memory:", connection.settings_dict["NAME"]
    try:
        assert wakeups_dir() is None
    finally:
        connection.settings_dict["NAME"] = kept
