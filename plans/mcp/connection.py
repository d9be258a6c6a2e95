"""Connections to MCP servers through the official SDK, shared by every thread of the process.

The SDK is asynchronous; the worker's tool threads are not. One event-loop thread per process
holds every server's session, and a thread calls a tool by handing a coroutine to that loop and
waiting for it with the tool's time limit. Servers are started in the background (at process
start, or at the first registry read): a registry read never waits for one, a call does. One
that crashes, hangs or disconnects fails the calls in flight and is started afresh for the next
one. Each
server has its own lock and session, so one server's trouble never holds up another's tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import anyio
import httpx2
import mcp_types as types
from django.utils import timezone
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from plans.mcp.config import ServerConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A server whose start failed is not tried again for this long (each try can take its
# startup time limit, and registry reads happen on every plan).
RETRY_START_AFTER_S = 10.0
# How long the tool list is trusted before it is read again (a list_changed notice, when a
# server sends one, has it read again at once).
CATALOG_TTL_S = 30.0
# How long closing a server may take before it is left to the loop.
CLOSE_TIMEOUT_S = 5.0


# Set while a web request is served (plans.mcp.middleware): its registry reads never wait for a
# server to start. A worker's or a command's do, as a plan needs the tools it is about to use.
_reads_never_wait = contextvars.ContextVar("mcp_reads_never_wait", default=False)


@contextlib.contextmanager
def reads_never_wait() -> Iterator[None]:
    """Within it, registry reads return the tools of the servers that are up, without waiting."""
    token = _reads_never_wait.set(True)
    try:
        yield
    finally:
        _reads_never_wait.reset(token)


class ServerUnavailable(Exception):
    """The MCP server could not be reached, crashed or hung: the call's outcome is unknown."""


class _Loop:
    """The process's event-loop thread for MCP sessions; recreated in a forked child."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-loop", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


_loop: _Loop | None = None
_loop_lock = threading.Lock()


def event_loop() -> _Loop:
    """The MCP loop of this process, started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.pid != os.getpid():
            _loop = _Loop()
        return _loop


def run_on_loop[T](coro: Coroutine[Any, Any, T], *, timeout: float | None) -> T:
    """Run a coroutine on the MCP loop and wait for it; TimeoutError after ``timeout`` seconds."""
    future = event_loop().submit(coro)
    try:
        return future.result(timeout)
    except FutureTimeout:
        future.cancel()  # cancels the task on the loop: the request is abandoned there too
        raise TimeoutError from None


@dataclass(frozen=True)
class ServerState:
    """What an operator is told about a server: its state, its last error and last (re)start."""

    label: str  # "not started", "starting", "running", "failed"
    detail: str = ""
    restarts: int = 0
    started_at: datetime | None = None  # when the last start (or restart) began
    last_error: str = ""  # the last failure, kept after the server recovered
    last_error_at: datetime | None = None


class ServerConnection:
    """One configured server: its session (when up), its tool list, and its state."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()  # serialises starts and restarts of this server only
        # The tool-list read in flight, which every caller asking meanwhile waits for and shares.
        self._listing: Future[None] | None = None
        self._listing_lock = threading.Lock()
        self._client: Client | None = None
        self._holding: Client | None = None  # the session held open, from before it is ready
        self._stop: asyncio.Event | None = None
        self._owner: Future[None] | None = None
        self._tools: list[types.Tool] = []
        self._listed_at = 0.0
        self._failed_at = 0.0
        self._failure = ""
        self._starts = 0
        self._generation = 0  # bumped by each start, so a stale failure cannot stop a new session
        self._starting = False  # a start in flight (on a thread of its own, or a caller's)
        self._background_lock = threading.Lock()
        self._start_done = threading.Event()
        self._start_done.set()
        self._started_at: datetime | None = None
        self._last_error = ""
        self._last_error_at: datetime | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # catalog re-reads scheduled on the loop
        # Called (on the loop) after a server's change notice was followed by a re-read.
        self.on_relisted: Callable[[], None] | None = None

    # --- state -----------------------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        if self._client is not None:
            label, detail = "running", ""
        elif self._starting:
            label, detail = "starting", ""
        elif self._failure:
            label, detail = "failed", self._failure
        else:
            label, detail = "not started", ""
        return ServerState(
            label,
            detail,
            restarts=max(self._starts - 1, 0),
            started_at=self._started_at,
            last_error=self._last_error,
            last_error_at=self._last_error_at,
        )

    def tools(self, *, start: bool = True) -> list[types.Tool]:
        """The server's tools, started if it is not up and re-listed when the list is stale.

        Within reads_never_wait (a web request) both happen in the background and the tools
        it last listed are returned at once; elsewhere the caller waits for them.
        """
        if start:
            stale = time.monotonic() - self._listed_at > CATALOG_TTL_S
            if _reads_never_wait.get():
                if _live(self._client) is None:
                    self.start_in_background()
                elif stale:
                    self._relist_soon()
            else:
                self._ensure_started()
                if self._client is not None and stale:
                    self._relist_shared()
        return list(self._tools)

    def start_in_background(self) -> None:
        """Start the server on a thread of its own, unless it is up, starting or just failed."""
        with self._background_lock:
            if self._starting or _live(self._client) is not None or self._resting():
                return
            self._starting = True
            self._start_done.clear()
        name = f"mcp-start-{self.config.name}"
        threading.Thread(target=self._start_quietly, name=name, daemon=True).start()

    def wait_started(self) -> None:
        """Wait for a background start in flight to end (bounded by the startup time limit)."""
        self._start_done.wait(self.config.startup_timeout_s + CLOSE_TIMEOUT_S)

    def _start_quietly(self) -> None:
        try:
            self._ensure_started(background=True)
        finally:
            self._starting = False
            self._start_done.set()

    def _relist_soon(self) -> None:
        # Re-read on the loop, not on the caller's thread: a registry read does not wait for it.
        client = self._client
        if client is not None:
            event_loop().loop.call_soon_threadsafe(self._schedule_relist, client)

    def refresh(self, *, since: float | None = None) -> list[types.Tool]:
        """Read the tool list again (a plan named a tool this server did not list), unless it
        was read after ``since`` (a time.monotonic()); callers meanwhile share that one read."""
        if since is None or self._listed_at < since:
            if _reads_never_wait.get() and self._client is None:
                self.start_in_background()  # a web request does not wait for the start
            else:
                self._relist_shared()
        return list(self._tools)

    def _relist_shared(self) -> None:
        # A 10k-step plan, or many plans validated at once, must not make the server list its
        # tools once per name or per caller: one read is in flight at a time, and shared.
        with self._listing_lock:
            listing, leader = self._listing, self._listing is None
            if listing is None:
                listing = self._listing = Future()
        if not leader:
            logger.debug("MCP server %r: sharing the tool list being read", self.config.name)
            listing.result()  # the leader's read is bounded by the server's startup time limit
            return
        try:
            self._ensure_started()
            self._relist()
        finally:
            with self._listing_lock:
                self._listing = None
            listing.set_result(None)

    # --- calls -----------------------------------------------------------------------------

    def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float,
        meta: types.RequestParamsMeta | None,
    ) -> types.CallToolResult:
        """Call one tool; ServerUnavailable if the server cannot answer, and it is restarted."""
        client, generation = self._ensure_started(), self._generation
        if client is None:
            raise ServerUnavailable(f"MCP server {self.config.name!r} is down: {self._failure}")
        try:
            return run_on_loop(
                client.call_tool(tool, arguments, read_timeout_seconds=timeout_s, meta=meta),
                timeout=timeout_s + 1.0,
            )
        except MCPError as exc:
            if exc.code != types.REQUEST_TIMEOUT:
                if exc.code == types.CONNECTION_CLOSED:
                    self._drop(generation, str(exc))
                    raise ServerUnavailable(
                        f"MCP server {self.config.name!r} went away during {tool} ({exc}); the "
                        "call may have had its effect. The server is restarted for the next call"
                    ) from exc
                raise
            self._hung(generation, tool, timeout_s, exc)
        except TimeoutError as exc:
            self._hung(generation, tool, timeout_s, exc)
        except (OSError, httpx2.HTTPError, *_CLOSED) as exc:
            self._drop(generation, f"{type(exc).__name__}: {exc}")
            raise ServerUnavailable(
                f"MCP server {self.config.name!r} failed during {tool} "
                f"({type(exc).__name__}: {exc}); it is restarted for the next call"
            ) from exc

    def _hung(self, generation: int, tool: str, timeout_s: float, exc: BaseException) -> NoReturn:
        # A hung server is replaced: its next caller should not wait out the limit too.
        self._drop(generation, f"no answer within {timeout_s:g} s")
        raise ServerUnavailable(
            f"MCP server {self.config.name!r} did not answer {tool} within {timeout_s:g} s; "
            "the call may have had its effect. The server is restarted for the next call"
        ) from exc

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server's session (and its process, for stdio)."""
        with self._lock:
            self._close_locked()

    def _ensure_started(self, *, background: bool = False) -> Client | None:
        client = _live(self._client)
        if client is not None:
            return client
        with self._lock:
            client = _live(self._client)
            if client is not None:
                return client
            if self._resting():
                return None
            self._close_locked()
            self._starting = True
            try:
                self._start_locked()
            except Exception as exc:
                self._failure = self._last_error = _describe(exc)
                self._failed_at, self._last_error_at = time.monotonic(), timezone.now()
                logger.warning("MCP server %r did not start: %s", self.config.name, self._failure)
                self._close_locked()
                return None
            finally:
                if not background:  # a background start clears it once its thread is done
                    self._starting = False
            self._failure = ""
            return self._client

    def _resting(self) -> bool:
        """Its last start failed too recently to try again (each try can take its time limit)."""
        return bool(self._failure) and time.monotonic() - self._failed_at < RETRY_START_AFTER_S

    def _start_locked(self) -> None:
        self._starts += 1
        self._generation += 1
        self._started_at = timezone.now()
        ready: Future[Client] = Future()
        self._owner = event_loop().submit(self._hold_session(ready))
        try:
            client = ready.result(self.config.startup_timeout_s)
        except FutureTimeout:
            raise TimeoutError(
                f"no answer within {self.config.startup_timeout_s:g} s of starting"
            ) from None
        tools = run_on_loop(_list_all_tools(client), timeout=self.config.startup_timeout_s)
        self._tools, self._listed_at = tools, time.monotonic()
        self._client = client

    async def _hold_session(self, ready: Future[Client]) -> None:
        # The SDK's contexts must be entered and left in one task: this one holds them open.
        self._stop = asyncio.Event()
        try:
            async with self._new_client() as client:
                self._holding = client  # a change notice may come before the start is done
                follow = None
                if client.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    # From protocol 2026-07-28 a server announces changes on a listen stream
                    # it is asked for, not as bare notifications.
                    follow = asyncio.create_task(self._follow_changes(client))
                ready.set_result(client)
                try:
                    await self._stop.wait()
                finally:
                    if follow is not None:
                        follow.cancel()
                        with contextlib.suppress(BaseException):
                            await follow
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise

    def _new_client(self) -> Client:
        config = self.config
        if config.command:
            server: Any = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd or None,
            )
        else:
            http = create_mcp_http_client(headers=dict(config.headers) or None)
            server = streamable_http_client(config.url, http_client=http)
        return Client(
            server,
            message_handler=self._on_message,
            client_info=types.Implementation(name="agentsite", version="0.1.0"),
            cache=None,
        )

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            client = self._holding
            if client is not None:
                self._schedule_relist(client)  # a task: the handler must not await the server
        elif isinstance(message, Exception):
            logger.warning("MCP server %r: %s", self.config.name, message)

    async def _follow_changes(self, client: Client) -> None:
        """Re-read the tool list each time the server says it changed (a listen stream)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    await self._relist_on_loop(client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a server that refuses to listen still serves its tools
            logger.info("MCP server %r: no change stream (%s)", self.config.name, _describe(exc))

    def _schedule_relist(self, client: Client) -> None:
        task = asyncio.get_running_loop().create_task(self._relist_on_loop(client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relist_on_loop(self, client: Client) -> None:
        try:
            tools = await asyncio.wait_for(
                _list_all_tools(client), timeout=self.config.startup_timeout_s
            )
        except Exception as exc:
            logger.warning(
                "MCP server %r: re-reading its tools failed: %s", self.config.name, _describe(exc)
            )
            return
        if client is self._holding:  # not a session replaced meanwhile
            self._tools, self._listed_at = tools, time.monotonic()
            if self.on_relisted is not None:
                self.on_relisted()

    def _relist(self) -> None:
        client, generation = self._client, self._generation
        if client is None:
            return
        try:
            tools = run_on_loop(_list_all_tools(client), timeout=self.config.startup_timeout_s)
        except Exception as exc:
            self._drop(generation, f"listing its tools failed: {_describe(exc)}")
            return
        self._tools, self._listed_at = tools, time.monotonic()

    def _drop(self, generation: int, reason: str) -> None:
        """Forget a broken session (its process is stopped); the next caller starts a new one."""
        with self._lock:
            if generation != self._generation or self._client is None:
                return  # already replaced by another caller
            logger.warning("MCP server %r is restarted: %s", self.config.name, reason)
            self._last_error, self._last_error_at = reason, timezone.now()
            self._close_locked()

    def _close_locked(self) -> None:
        self._client = self._holding = None
        stop, owner = self._stop, self._owner
        self._stop = self._owner = None
        if stop is not None:
            event_loop().loop.call_soon_threadsafe(stop.set)
        if owner is not None:
            with contextlib.suppress(Exception):
                owner.result(CLOSE_TIMEOUT_S)  # the process is gone before a new one starts


async def _list_all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server paging forever is not followed forever
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


# The stream errors the SDK lets through when the other side is gone.
_CLOSED = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


def _live(client: Client | None) -> Client | None:
    """The client, if there is one and its transport has not ended; else None."""
    return client if client is not None and not _transport_closed(client) else None


def _transport_closed(client: Client) -> bool:
    """Has the session seen its transport end (a stdio server that exited, say)?

    Checked before each call so a server that died between calls is replaced first, rather
    than failing the next call; the SDK has no public flag for it, hence the guarded lookup.
    """
    try:
        return bool(getattr(client.session._dispatcher, "_closed", False))
    except RuntimeError:  # the client has left its context
        return True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
