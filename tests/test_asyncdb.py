"""db_async: database work from async code, on threads that keep their connections."""

import threading

import pytest
from django.db import connection

from plans.asyncdb import db_async
from plans.models import Run

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def read_on_this_thread() -> tuple[int, bool]:
    """This thread, and whether its connection was open before this read."""
    was_open = connection.connection is not None
    Run.objects.count()
    return threading.get_ident(), was_open


async def test_a_thread_keeps_its_connection_for_its_next_call():
    seen, reopened = set(), []
    for _ in range(30):
        thread, was_open = await db_async(read_on_this_thread)()
        if thread in seen and not was_open:
            reopened.append(thread)
        seen.add(thread)

    assert len(seen) < 30  # some thread served twice (the pool has a few)
    assert reopened == []


def leave_outside_autocommit() -> None:
    connection.set_autocommit(False)


async def test_a_connection_left_outside_autocommit_is_closed():
    await db_async(leave_outside_autocommit)()

    # Whichever thread ran it, none hands a later call a connection mid-transaction.
    for _ in range(30):
        assert await db_async(autocommits)()


def autocommits() -> bool:
    return connection.get_autocommit()  # this thread's connection, read on it
