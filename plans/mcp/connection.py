"""Connections to MCP servers through the official SDK, shared by every thread of the process.

The SDK is asynchronous; the worker's tool threads are not. One event-loop thread per process
holds every server's session, and a thread calls a tool by handing a coroutine to that loop and
waiting for it with the tool's time limit. Servers are started on first use; one that crashes,
hangs or disconnects fails the calls in flight and is started afresh for the next one. Each
server has its own lock and session, so one server's trouble never holds up another's tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from plans.mcp.config import ServerConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A server whose start failed is not tried again for this long (each try can take its
# startup time limit, and registry reads happen on every plan).
RETRY_START_AFTER_S = 10.0
# How long the tool list is trusted before it is read again (a list_changed notice, when a
# server sends one, refreshes it sooner).
CATALOG_TTL_S = 30.0
# How long closing a server may take before it is left to the loop.
CLOSE_TIMEOUT_S = 5.0


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
    """What an operator is told about a server: up, not started yet, or why it is down."""

    label: str  # "not started", "running", "failed"
    detail: str = ""
    restarts: int = 0


class ServerConnection:
    """One configured server: its session (when up), its tool list, and its state."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()  # serialises starts and restarts of this server only
        # The tool-list read in flight, which every caller asking meanwhile waits for and shares.
        self._listing: Future[None] | None = None
        self._listing_lock = threading.Lock()
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._owner: Future[None] | None = None
        self._tools: list[types.Tool] = []
        self._listed_at = 0.0
        self._failed_at = 0.0
        self._failure = ""
        self._starts = 0
        self._generation = 0  # bumped by each start, so a stale failure cannot stop a new session

    # --- state -----------------------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        restarts = max(self._starts - 1, 0)
        if self._client is not None:
            return ServerState("running", restarts=restarts)
        if self._failure:
            return ServerState("failed", self._failure, restarts)
        return ServerState("not started", restarts=restarts)

    def tools(self, *, start: bool = True) -> list[types.Tool]:
        """The server's tools, started (once, lazily) and re-listed when the list is stale."""
        if start:
            self._ensure_started()
            if self._client is not None and time.monotonic() - self._listed_at > CATALOG_TTL_S:
                self._relist_shared()
        return list(self._tools)

    def refresh(self, *, since: float | None = None) -> list[types.Tool]:
        """Read the tool list again (a plan named a tool this server did not list), unless it
        was read after ``since`` (a time.monotonic()); callers meanwhile share that one read."""
        if since is None or self._listed_at < since:
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

    def _ensure_started(self) -> Client | None:
        client = self._client
        if client is not None and not _transport_closed(client):
            return client
        with self._lock:
            if self._client is not None and not _transport_closed(self._client):
                return self._client
            if self._failure and time.monotonic() - self._failed_at < RETRY_START_AFTER_S:
                return None
            self._close_locked()
            try:
                self._start_locked()
            except Exception as exc:
                self._failure = _describe(exc)
                self._failed_at = time.monotonic()
                logger.warning("MCP server %r did not start: %s", self.config.name, self._failure)
                self._close_locked()
                return None
            self._failure = ""
            return self._client

    def _start_locked(self) -> None:
        self._starts += 1
        self._generation += 1
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
                ready.set_result(client)
                await self._stop.wait()
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
            self._listed_at = 0.0  # re-listed on the next registry read
        elif isinstance(message, Exception):
            logger.warning("MCP server %r: %s", self.config.name, message)

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
            self._close_locked()

    def _close_locked(self) -> None:
        self._client = None
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
