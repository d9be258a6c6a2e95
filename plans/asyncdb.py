"""Database work called from async code (sockets, event streams) on pooled threads that keep
their connections between calls.

channels' database_sync_to_async closes the thread's connections around every call, as a
request does: with CONN_MAX_AGE 0 each call opens a new one. A run page's push reads a few
rows, and opening a SQLite connection (its functions registered, its pragmas run) costs more
CPU than that (~1-2 ms), paid again by every push, session check and replay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import SyncToAsync
from django.db import connections

from plans.bulk import connection_lost


class _KeptConnectionToAsync(SyncToAsync):
    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            _drop_broken_connections()


def _drop_broken_connections() -> None:
    """Close what a call left unfit for the next one: a connection that failed and no longer
    answers (the next call opens a new one), or one left outside autocommit."""
    for wrapper in connections.all(initialized_only=True):
        if wrapper.connection is None:
            continue
        if wrapper.get_autocommit() != wrapper.settings_dict["AUTOCOMMIT"]:
            wrapper.close()
        elif wrapper.errors_occurred and not connection_lost(wrapper.alias):
            wrapper.errors_occurred = False


def db_async[**P, R](work: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`work` as a coroutine function run on the loop's thread pool (never the one shared
    thread sync views use), its thread keeping its database connection for the next call."""
    return _KeptConnectionToAsync(work, thread_sensitive=False)
