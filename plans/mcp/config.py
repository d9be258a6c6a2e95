"""Reading the configured MCP servers from settings.AGENTSITE_MCP_SERVERS.

Each entry maps a short name to a stdio command or a streamable-HTTP URL::

    {"time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {}},
     "wiki": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ..."},
              "tools": {"search": {"destructive": false, "timeout_s": 10}}}}

"tools" overrides, per tool, the gating the server's annotations give and the time limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_SERVER_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "tools", "timeout_s", "startup_timeout_s"}
)
_OVERRIDE_KEYS = frozenset({"destructive", "timeout_s"})


@dataclass(frozen=True)
class ToolOverride:
    """What the configuration says about one tool, over what its server says."""

    destructive: bool | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class ServerConfig:
    """One configured MCP server: how to reach it and what overrides its tools get."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    overrides: tuple[tuple[str, ToolOverride], ...] = field(default=())
    timeout_s: float | None = None  # for its tools' calls; else AGENTSITE_TOOL_TIMEOUT_S
    startup_timeout_s: float = 20.0

    @property
    def transport(self) -> str:
        """ "stdio" or "http", for messages and the operator's listing."""
        return "stdio" if self.command else "http"

    @property
    def target(self) -> str:
        """The command line or the URL, as an operator would recognise it (no headers)."""
        return " ".join((self.command, *self.args)) if self.command else self.url

    def override(self, tool: str) -> ToolOverride:
        """The configured override for one of this server's tools (empty when none)."""
        return dict(self.overrides).get(tool, ToolOverride())


def configured_servers() -> dict[str, ServerConfig]:
    """The servers settings.AGENTSITE_MCP_SERVERS names, by name; ImproperlyConfigured if bad."""
    raw = getattr(settings, "AGENTSITE_MCP_SERVERS", None) or {}
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(
            f"AGENTSITE_MCP_SERVERS must map server names to settings, got {type(raw).__name__}"
        )
    return {name: server_config(name, entry) for name, entry in raw.items()}


def server_config(name: Any, entry: Any) -> ServerConfig:
    """One server's settings checked and read; the message names the server and the key."""
    where = f"AGENTSITE_MCP_SERVERS[{name!r}]"
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise ImproperlyConfigured(
            f"{where}: a server name must be 1-32 letters, digits, '_' or '-'"
        )
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"{where} must be an object, got {type(entry).__name__}")
    unknown = sorted(set(entry) - _SERVER_KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(_SERVER_KEYS))})"
        )
    command, url = entry.get("command"), entry.get("url")
    if bool(command) == bool(url):
        raise ImproperlyConfigured(
            f"{where} needs exactly one of 'command' (stdio) or 'url' (HTTP)"
        )
    if command is not None and not isinstance(command, str):
        raise ImproperlyConfigured(f"{where}['command'] must be a string")
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("http://", "https://"))
    ):
        raise ImproperlyConfigured(f"{where}['url'] must be an http:// or https:// URL")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ImproperlyConfigured(f"{where}['args'] must be a list of strings")
    return ServerConfig(
        name=name,
        command=command or "",
        args=tuple(args),
        env=_string_pairs(entry.get("env", {}), f"{where}['env']"),
        cwd=_string(entry.get("cwd", ""), f"{where}['cwd']"),
        url=url or "",
        headers=_string_pairs(entry.get("headers", {}), f"{where}['headers']"),
        overrides=_overrides(entry.get("tools", {}), where),
        timeout_s=_seconds(entry.get("timeout_s"), f"{where}['timeout_s']"),
        startup_timeout_s=_seconds(entry.get("startup_timeout_s"), f"{where}['startup_timeout_s']")
        or 20.0,
    )


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ImproperlyConfigured(f"{where} must be a string")
    return value


def _string_pairs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ImproperlyConfigured(f"{where} must map strings to strings")
    return tuple(sorted(value.items()))


def _seconds(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ImproperlyConfigured(f"{where} must be a positive number of seconds, got {value!r}")
    return float(value)


def _overrides(value: Any, where: str) -> tuple[tuple[str, ToolOverride], ...]:
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{where}['tools'] must map tool names to overrides")
    overrides = []
    for tool, entry in value.items():
        at = f"{where}['tools'][{tool!r}]"
        if not isinstance(entry, dict) or set(entry) - _OVERRIDE_KEYS:
            raise ImproperlyConfigured(
                f"{at} must be an object with only {', '.join(sorted(_OVERRIDE_KEYS))}"
            )
        destructive = entry.get("destructive")
        if destructive is not None and not isinstance(destructive, bool):
            raise ImproperlyConfigured(f"{at}['destructive'] must be true or false")
        overrides.append(
            (
                str(tool),
                ToolOverride(destructive, _seconds(entry.get("timeout_s"), f"{at}['timeout_s']")),
            )
        )
    return tuple(sorted(overrides))
