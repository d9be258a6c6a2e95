"""The process's threads for tool calls, started once and shared by every run it advances.

Leaner than concurrent.futures on the executor's path: a call goes out through one queue and
its outcome comes back through the caller's, without a Future's lock, condition and callback
list (measured here: 38 us a round trip against 56, and half the caller's CPU).

Elastic, as a hung tool keeps its thread after the executor gives up on it: with every thread
busy a call gets a spare thread at once (70-90 us to start one), and spares leave when idle.
The lock keeping the count costs submit about 0.3 us (0.45 us before it, 0.75 with it).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from django.conf import settings

# How long a spare tool thread (one beyond AGENTSITE_TOOL_THREADS) waits for a call, then leaves.
SPARE_IDLE_TIMEOUT_S = 45.0


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
    """Daemon threads running calls at once: `size` kept, and spare ones while those are busy.

    The kept threads are started up front and take calls from one shared queue, as a fixed set
    would; an idle count under a lock promises each call put there to a thread waiting on it.
    With none idle, a call goes to an idle spare thread, or to a new one, so it starts at once:
    the executor gives up on a call at its deadline but the thread stays in it, and behind a
    few hung tools a fixed set would starve every later call of the process.

    Each idle spare waits on a mailbox of its own, on a stack: the most recently idle is taken
    first, so the surplus stays at the bottom, and a spare whose mailbox is still there after
    `idle_timeout` seconds leaves (taken off under the lock, it cannot be promised a call
    meanwhile). At most `max_size` threads (ten times `size` unless given) run; past that,
    calls wait in order for the next thread to finish one, their deadlines running as usual.
    """

    def __init__(
        self,
        size: int,
        *,
        name: str = "tool",
        max_size: int | None = None,
        idle_timeout: float = SPARE_IDLE_TIMEOUT_S,
    ) -> None:
        max_size = max(10 * size, 1) if max_size is None else max_size
        if size < 0 or max_size < max(size, 1) or idle_timeout <= 0:
            raise ValueError(f"bad tool threads: {size=}, {max_size=}, {idle_timeout=}")
        self._name, self._max_size, self._idle_timeout = name, max_size, idle_timeout
        self._work: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # Under _lock: kept threads waiting on _work less the calls put there for them, the
        # idle spares' mailboxes (most recently idle last), calls waiting for a thread when
        # max_size are busy, the threads alive, and the names used.
        self._idle = size
        self._spares: list[queue.SimpleQueue[Call]] = []
        self._backlog: deque[Call] = deque()
        self._live = self._named = size
        # Started now: spawning a thread on the first call would sit on a run's critical path.
        for index in range(size):
            threading.Thread(
                target=self._serve, args=(self._serve_kept,), name=f"{name}-{index}", daemon=True
            ).start()

    def live(self) -> int:
        """How many threads there are now, busy or idle."""
        with self._lock:
            return self._live

    def idle(self) -> int:
        """How many threads wait for a call now, with none on its way to them."""
        with self._lock:
            return self._idle + len(self._spares)

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, reply: Callable[[Call], None], **kwargs: Any
    ) -> Call:
        """Run fn(*args, **kwargs) on a free thread; reply(call) is called there when it ends."""
        call = Call(fn, args, kwargs, reply)
        with self._lock:
            if self._idle:
                self._idle -= 1
                to = self._work
            elif self._spares:
                to = self._spares.pop()
            elif self._live < self._max_size:
                self._live += 1
                index = self._named
                self._named += 1
                to = None
            else:
                self._backlog.append(call)
                return call
        if to is None:
            self._start_spare(call, index)
        else:
            to.put(call)  # promised to a waiting thread, which nothing else can take
        return call

    def _start_spare(self, call: Call, index: int) -> None:
        """Start a spare thread with call; submit counted it already."""
        mailbox: queue.SimpleQueue[Call] = queue.SimpleQueue()
        mailbox.put(call)  # there, not in the Thread's arguments, which last as long as it
        try:
            threading.Thread(
                target=self._serve,
                args=(self._serve_spare, mailbox),
                name=f"{self._name}-{index}",
                daemon=True,
            ).start()
        except RuntimeError:  # no thread to be had: an OS limit, or the interpreter exiting
            with self._lock:
                self._live -= 1
                if self._idle:  # one came free meanwhile
                    self._idle -= 1
                    to = self._work
                elif self._spares:
                    to = self._spares.pop()
                elif self._live:
                    self._backlog.append(call)
                    return
                else:
                    raise
            to.put(call)

    def _serve(self, serve: Callable[..., None], *args: Any) -> None:
        """A thread's life: a kept one's to the process's end, a spare one's till idle too long."""
        try:
            serve(*args)
        except BaseException:  # from a reply: the thread ends, as it always has
            with self._lock:
                self._live -= 1
            raise

    def _serve_kept(self) -> None:
        while True:
            self._run_calls(self._work.get(), self._kept_idle)

    def _kept_idle(self) -> None:
        self._idle += 1

    def _run_calls(self, call: Call, become_idle: Callable[[], None]) -> None:
        """Run call, then backlogged ones while there are any; then become_idle(), locked."""
        lock, backlog = self._lock, self._backlog
        while True:
            call._run()
            with lock:
                if not backlog:
                    become_idle()
                    return
                call = backlog.popleft()

    def _serve_spare(self, mailbox: queue.SimpleQueue[Call]) -> None:
        lock, spares, timeout = self._lock, self._spares, self._idle_timeout
        while True:
            try:
                call = mailbox.get(timeout=timeout)
            except queue.Empty:
                with lock:
                    if mailbox in spares:  # else a call is promised to it: wait for that
                        spares.remove(mailbox)
                        self._live -= 1
                        return
                continue
            self._run_calls(call, lambda: spares.append(mailbox))


_threads: ToolThreads | None = None
_threads_lock = threading.Lock()


def tool_threads() -> ToolThreads:
    """The process's tool threads (AGENTSITE_TOOL_THREADS of them), started on first use."""
    global _threads
    with _threads_lock:
        if _threads is None:
            _threads = ToolThreads(settings.AGENTSITE_TOOL_THREADS)
        return _threads
