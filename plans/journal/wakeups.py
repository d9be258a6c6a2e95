"""Waking workers when a task is enqueued: this process's (Waker), and other processes'.

PostgreSQL wakes them with NOTIFY on TASKS_CHANNEL (the worker listens: plans.runtime.worker).
SQLite has nothing of the kind, but every process that shares a SQLite file runs on one host.
So each worker process binds a Unix datagram socket in a directory that belongs to the database
file, and an enqueue's commit sends a byte to every socket there: no daemon, nothing to
configure, and a process that died leaves a socket file that the next sender removes (a
datagram to it is refused).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import logging
import os
import socket
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from django.db import connections

logger = logging.getLogger(__name__)

SUFFIX = ".wake"

# The PostgreSQL channel an enqueue notifies (see plans.journal.tasks.announce_enqueued).
TASKS_CHANNEL = "agentsite_tasks"


class Waker:
    """Wakes idle workers; a wake-up that arrives while a worker is busy is not lost."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.generation = 0

    def wake(self, count: int = 1) -> None:
        with self._condition:
            self.generation += 1
            self._condition.notify(count)

    def wake_all(self) -> None:
        with self._condition:
            self.generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep until a wake-up after generation `seen`, or the timeout."""
        with self._condition:
            self._condition.wait_for(lambda: self.generation != seen, timeout)


waker = Waker()


def wakeups_dir(alias: str = "default") -> Path | None:
    """The directory of the alias's wake-up sockets; None unless it is a SQLite file.

    In the temporary directory under a hash of the file's real path, not beside the file:
    a socket's path may not exceed about 100 bytes, and the database's may be long already.
    """
    connection = connections[alias]
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    if name == ":memory:" or "mode=memory" in name:
        return None  # no other process can see it
    digest = hashlib.sha256(os.path.realpath(name).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"agentsite-wakeups-{os.getuid()}-{digest}"


def _own_dir(path: Path) -> bool:
    """Create the directory (only we may use it) or check an existing one is ours alone."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError as error:
        logger.warning("wake-ups: cannot use %s (%s); workers poll", path, error)
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        logger.warning("wake-ups: %s is not a private directory of ours; workers poll", path)
        return False
    return True


class WakeupListener:
    """This process's socket: each datagram that arrives calls on_wake, from a thread of its own."""

    def __init__(self, directory: Path, on_wake: Callable[[], None]) -> None:
        self.path = directory / f"{os.getpid()}-{os.urandom(4).hex()}{SUFFIX}"
        self._on_wake = on_wake
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(self.path))
        self.thread = threading.Thread(target=self._run, name="wakeups", daemon=True)

    def start(self) -> WakeupListener:
        self.thread.start()
        atexit.register(self.stop)  # a process that ends abruptly leaves it to the senders
        return self

    def stop(self) -> None:
        """Remove the socket and end the thread (the directory stays: removing it could race
        another process's start)."""
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        while True:
            try:
                if not self._socket.recv(16):
                    return  # shut down (senders send a byte)
            except OSError:
                return
            self._on_wake()


_listener: WakeupListener | None = None
_listener_lock = threading.Lock()


def wakeups_listen(on_wake: Callable[[], None], *, alias: str = "default") -> WakeupListener | None:
    """Let other processes' enqueues call on_wake here, once per process; None if not SQLite."""
    global _listener
    directory = wakeups_dir(alias)
    if directory is None or not _own_dir(directory):
        return None
    with _listener_lock:
        if _listener is None:
            _listener = WakeupListener(directory, on_wake).start()
        return _listener


def wakeups_send(alias: str = "default") -> None:
    """Wake one worker thread in each other worker process on this SQLite file (after commit).

    Never blocks and never fails the enqueue: a full socket's process has wake-ups pending
    already, and a process missed for any reason still looks every IDLE_POLL_S.
    """
    directory = wakeups_dir(alias)
    if directory is None:
        return
    own = _listener.path if _listener is not None else None
    try:
        paths = [entry for entry in os.scandir(directory) if entry.name.endswith(SUFFIX)]
    except FileNotFoundError:
        return  # no worker process has listened yet
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for entry in paths:
            if own is not None and entry.path == str(own):
                continue  # this process's workers are woken directly
            try:
                sender.sendto(b"!", entry.path)
            except (ConnectionRefusedError, FileNotFoundError):
                # Its process is gone: nobody is bound to it any more.
                Path(entry.path).unlink(missing_ok=True)
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    logger.warning("wake-ups: cannot wake %s (%s)", entry.path, error)
