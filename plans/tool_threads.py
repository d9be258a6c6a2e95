"""The process's threads for tool calls, started once and shared by every run it advances.

Leaner than concurrent.futures on the executor's path: a call goes out through one queue and
its outcome comes back through the caller's, without a Future's lock, condition and callback
list (measured here: 38 us a round trip against 56, and half the caller's CPU).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings


class Call:
    """One function call handed to the tool threads; identity-hashed, so usable as a key."""

    __slots__ = ("_args", "_error", "_fn", "_kwargs", "_reply", "_result")

    def __init__(
        self, fn: Callable[..., Any], args: tuple, kwargs: dict, reply: Callable[[Call], None]
    ) -> None:
        self._fn, self._args, self._kwargs, self._reply = fn, args, kwargs, reply
        self._result: Any = None
        self._error: BaseException | None = None

    def result(self) -> Any:
        """What the function returned; re-raises what it raised."""
        if self._error is not None:
            raise self._error
        return self._result

    def _run(self) -> None:
        try:
            self._result = self._fn(*self._args, **self._kwargs)
        except BaseException as error:  # handed to the caller, like a Future would
            self._error = error
        finally:
            self._fn = self._args = self._kwargs = None  # type: ignore[assignment]
        self._reply(self)


class ToolThreads:
    """A fixed set of daemon threads running calls in the order they were submitted."""

    def __init__(self, size: int, *, name: str = "tool") -> None:
        self._work: queue.SimpleQueue[Call] = queue.SimpleQueue()
        # Started now: spawning a thread on the first call would sit on a run's critical path.
        for index in range(size):
            threading.Thread(target=self._serve, name=f"{name}-{index}", daemon=True).start()

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, reply: Callable[[Call], None], **kwargs: Any
    ) -> Call:
        """Run fn(*args, **kwargs) on a free thread; reply(call) is called there when it ends."""
        call = Call(fn, args, kwargs, reply)
        self._work.put(call)
        return call

    def _serve(self) -> None:
        while True:
            self._work.get()._run()


_threads: ToolThreads | None = None
_threads_lock = threading.Lock()


def tool_threads() -> ToolThreads:
    """The process's tool threads (AGENTSITE_TOOL_THREADS of them), started on first use."""
    global _threads
    with _threads_lock:
        if _threads is None:
            _threads = ToolThreads(settings.AGENTSITE_TOOL_THREADS)
        return _threads
