"""Reading the configured MCP servers from settings.AGENTSITE_MCP_SERVERS.

Each entry maps a short name to a stdio command or a streamable-HTTP URL::

    {"time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {}},
     "wiki": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ..."},
              "tools": {"search": {"destructive": false, "timeout_s": 10}}}}

"tools" sets, per tool or per glob pattern of tool names ("get_*"), the gating and the time
limit. "trust_annotations" (false unless set) says whether the server's readOnlyHint and
destructiveHint count: the MCP specification has clients treat annotations as untrusted unless
they come from a trusted server, and only the operator can say which servers those are.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_SERVER_KEYS = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "tools",
        "timeout_s",
        "startup_timeout_s",
        "trust_annotations",
        "preview",
    }
)
_PREVIEW_KEYS = frozenset({"tool", "args", "version"})
# A "tools" key holding one of these is a glob pattern (fnmatch) over the server's tool names.
_GLOB_CHARS = frozenset("*?[")
_OVERRIDE_KEYS = frozenset({"destructive", "timeout_s"})


@dataclass(frozen=True)
class ToolOverride:
    """What the configuration says about one tool, over what its server says."""

    destructive: bool | None = None
    timeout_s: float | None = None
    # The "tools" key that set destructive: the tool's own name or a pattern ("get_*").
    destructive_from: str = ""


@dataclass(frozen=True)
class PreviewRule:
    """A destructive tool's preview: another (read-only) tool of the same server, called with
    arguments mapped from the call's, whose result is the preview."""

    tool: str
    # (the preview tool's argument, the destructive call's argument it takes its value from)
    args: tuple[tuple[str, str], ...] = ()
    # A field of the preview tool's result that is the target's version (an ETag, a row
    # version); without one, the version is a hash of the whole result.
    version: str = ""


def is_pattern(key: str) -> bool:
    """Whether a "tools" key is a glob pattern rather than one tool's name."""
    return not _GLOB_CHARS.isdisjoint(key)


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
    trust_annotations: bool = False
    previews: tuple[tuple[str, PreviewRule], ...] = ()

    def preview_for(self, tool: str) -> PreviewRule | None:
        """The preview the "preview" setting names for this tool; None: no preview."""
        return next((rule for name, rule in self.previews if name == tool), None)

    @property
    def transport(self) -> str:
        """ "stdio" or "http", for messages and the operator's listing."""
        return "stdio" if self.command else "http"

    @property
    def target(self) -> str:
        """The command line or the URL, as an operator would recognise it (no headers)."""
        return " ".join((self.command, *self.args)) if self.command else self.url

    def override(self, tool: str) -> ToolOverride:
        """What the "tools" setting says about one tool (empty when nothing matches it).

        Each field comes from the tool's own entry if it sets it, else from the most specific
        matching pattern (the most characters that are not wildcards). Equally specific
        patterns that disagree make the tool destructive: a doubt goes to the gate.
        """

        def rank(key: str) -> tuple[bool, int]:
            return key != tool, -_specificity(key)

        matching = sorted(
            (
                (key, entry)
                for key, entry in self.overrides
                if key == tool or (is_pattern(key) and fnmatch.fnmatchcase(tool, key))
            ),
            key=lambda item: (rank(item[0]), item[0]),
        )
        timeout_s = next((e.timeout_s for _, e in matching if e.timeout_s is not None), None)
        deciding = [(key, e.destructive) for key, e in matching if e.destructive is not None]
        if not deciding:
            return ToolOverride(None, timeout_s)
        best = rank(deciding[0][0])
        tied = [(key, value) for key, value in deciding if rank(key) == best]
        destructive = any(value for _, value in tied)
        source = next(key for key, value in tied if value == destructive)
        return ToolOverride(destructive, timeout_s, source)

    def unmatched_overrides(self, tools: list[str]) -> list[str]:
        """The "tools" keys that name or match none of these tools (a typo, a renamed tool)."""
        return [
            key
            for key, _ in self.overrides
            if not any(key == name or fnmatch.fnmatchcase(name, key) for name in tools)
        ]


def _specificity(key: str) -> int:
    return sum(1 for char in key if char not in "*?")


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
        trust_annotations=_flag(
            entry.get("trust_annotations", False), f"{where}['trust_annotations']"
        ),
        previews=_previews(entry.get("preview", {}), where),
    )


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ImproperlyConfigured(f"{where} must be a string")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ImproperlyConfigured(f"{where} must be true or false, got {value!r}")
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
        raise ImproperlyConfigured(f"{where}['tools'] must map tool names or patterns to overrides")
    overrides = []
    for tool, entry in value.items():
        at = f"{where}['tools'][{tool!r}]"
        if not isinstance(tool, str) or not tool:
            raise ImproperlyConfigured(f"{at}: a tool name or pattern must be a non-empty string")
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


def _previews(value: Any, where: str) -> tuple[tuple[str, PreviewRule], ...]:
    at = f"{where}['preview']"
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{at} must map tool names to {{tool, args, version}}")
    rules = []
    for tool, entry in value.items():
        here = f"{at}[{tool!r}]"
        if not isinstance(tool, str) or not tool or is_pattern(tool):
            raise ImproperlyConfigured(f"{here}: name one tool (no patterns)")
        if not isinstance(entry, dict) or set(entry) - _PREVIEW_KEYS or "tool" not in entry:
            raise ImproperlyConfigured(
                f"{here} must be an object with 'tool' and optionally 'args' and 'version'"
            )
        preview_tool = _string(entry["tool"], f"{here}['tool']")
        if not preview_tool or preview_tool == tool:
            raise ImproperlyConfigured(f"{here}['tool'] must name another tool of the server")
        args = _string_pairs(entry.get("args", {}), f"{here}['args']")
        version = _string(entry.get("version", ""), f"{here}['version']")
        rules.append((tool, PreviewRule(preview_tool, args, version)))
    return tuple(sorted(rules))
