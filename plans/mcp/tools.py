"""MCP servers' tools as registry tools named ``<server>.<tool>``, gated like our own.

A tool is destructive unless the operator's "tools" setting (its name or a pattern) says
otherwise, or, for a server whose annotations are trusted, it is marked ``readOnlyHint: true``
(and not ``destructiveHint: true``). An untrusted server's word about its tools counts for
nothing: a tool it adds later is destructive like the rest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import mcp_types as types
from django.conf import settings

from plans.engine import canonical_json
from plans.engine.jsonschema_args import DEFAULT_DIALECT, schema_problem
from plans.mcp.config import PreviewRule, ServerConfig, configured_servers, is_pattern
from plans.mcp.connection import ServerConnection, ServerState
from plans.tools import Preview, ToolError, ToolSpec
from plans.tools.schema import IDEMPOTENCY_PARAM

# Sent with every call so a server that deduplicates can: the executor's key for the step.
IDEMPOTENCY_META = "agentsite/idempotency_key"
# MCP tool names are 1-128 of these (the specification's advice); others are not registered.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")

_connections: dict[ServerConfig, ServerConnection] = {}
_connections_lock = threading.Lock()


@dataclass(frozen=True)
class ListedTool:
    """One tool a server lists, with the gating it gets here and why it is not usable, if so."""

    server: str
    name: str  # as the server names it
    spec: ToolSpec | None
    problem: str = ""
    gated_by: str = ""  # where its gating comes from (see gating)

    @property
    def registry_name(self) -> str:
        return f"{self.server}.{self.name}"


@dataclass(frozen=True)
class ServerListing:
    """A configured server as the operator sees it: reachable or why not, and its tools."""

    config: ServerConfig
    state: ServerState
    tools: list[ListedTool]


def connection_for(config: ServerConfig) -> ServerConnection:
    """The process's shared connection for a configured server (a changed config, a new one)."""
    with _connections_lock:
        connection = _connections.get(config)
        if connection is None:
            stale = [c for c in _connections if c.name == config.name]
            for old in stale:
                _connections.pop(old).close()
            connection = _connections[config] = ServerConnection(config)
        return connection


def close_all() -> None:
    """Stop every server this process started (tests; a worker that shuts down)."""
    with _connections_lock:
        connections = list(_connections.values())
        _connections.clear()
    for connection in connections:
        connection.close()


def servers_start(*, wait: bool = False) -> None:
    """Start every configured server in the background; ``wait`` waits for each start to end
    (a command that lists them, a test), else nothing waits (the web process at start-up)."""
    connections = [connection_for(config) for config in configured_servers().values()]
    for connection in connections:
        connection.start_in_background()
    if wait:
        for connection in connections:
            connection.wait_started()


def mcp_tool_specs() -> dict[str, ToolSpec]:
    """Every usable tool of every running server, by registry name; never waits for a start."""
    specs: dict[str, ToolSpec] = {}
    for listing in server_listings():
        for listed in listing.tools:
            if listed.spec is not None:
                specs[listed.registry_name] = listed.spec
    return specs


def server_listings(*, start: bool = True) -> list[ServerListing]:
    """Each configured server with its state and the tools it last listed (never waiting);
    ``start=False`` only reports, else a server that is not up is started in the background."""
    listings = []
    for config in configured_servers().values():
        connection = connection_for(config)
        listed_tools = connection.tools(start=start)
        by_name = {tool.name: tool for tool in listed_tools}
        tools = [_listed(config, connection, tool, by_name) for tool in listed_tools]
        listings.append(ServerListing(config, connection.state, tools))
    return listings


def refresh_servers_of(tool_names: Iterable[str], *, since: float) -> None:
    """Re-list, once each, the configured servers these ``<server>.<tool>`` names point at,
    unless a list was read after ``since`` (see ServerConnection.refresh)."""
    servers = {name.split(".", 1)[0] for name in tool_names if "." in name}
    configs = configured_servers()
    for server in sorted(servers & configs.keys()):
        connection_for(configs[server]).refresh(since=since)


def gating(tool: types.Tool, config: ServerConfig) -> tuple[bool, str]:
    """Whether the tool is destructive, and what decided it, as the operator is shown it:
    "override <name>", "pattern <glob>", "annotation trusted" or "untrusted default"."""
    override = config.override(tool.name)
    if override.destructive is not None:
        kind = "pattern" if is_pattern(override.destructive_from) else "override"
        return override.destructive, f"{kind} {override.destructive_from}"
    if not config.trust_annotations:
        return True, "untrusted default"
    hints = tool.annotations
    if hints is None or hints.read_only_hint is not True:
        return True, "annotation trusted"
    # A contradictory hint (read-only and destructive) errs on the side of the gate.
    return hints.destructive_hint is True, "annotation trusted"


def _listed(
    config: ServerConfig,
    connection: ServerConnection,
    tool: types.Tool,
    by_name: dict[str, types.Tool],
) -> ListedTool:
    if not _TOOL_NAME.match(tool.name):
        return ListedTool(config.name, tool.name, None, "its name is not a valid MCP tool name")
    schema = dict(tool.input_schema or {"type": "object"})
    schema.setdefault("$schema", DEFAULT_DIALECT)  # marks it for the full JSON Schema check
    problem = schema_problem(schema)
    if problem is not None:
        return ListedTool(config.name, tool.name, None, problem)
    override = config.override(tool.name)
    timeout_s = override.timeout_s or config.timeout_s or settings.AGENTSITE_TOOL_TIMEOUT_S
    call = _McpCall(connection, tool.name, timeout_s)
    destructive, gated_by = gating(tool, config)
    rule = config.preview_for(tool.name) if destructive else None
    preview = None if rule is None else _McpPreview(connection, rule, by_name.get(rule.tool))
    properties = schema.get("properties")
    spec = ToolSpec(
        name=f"{config.name}.{tool.name}",
        fn=call,
        description=(tool.description or tool.title or "").strip(),
        schema=schema,
        destructive=destructive,
        timeout_s=timeout_s,
        # A tool with an argument of that name gets it; the key then goes only in _meta.
        takes_idempotency_key=not (
            isinstance(properties, dict) and IDEMPOTENCY_PARAM in properties
        ),
        server=config.name,
        preview=preview,
    )
    return ListedTool(config.name, tool.name, spec, gated_by=gated_by)


class _McpPreview:
    """A destructive MCP tool's preview: a read-only tool of its server, its result the preview.

    A preview must not act, so a preview tool the server does not list, or that is not
    read-only under this server's gating, is never called: the card says why.
    """

    def __init__(
        self, connection: ServerConnection, rule: PreviewRule, listed: types.Tool | None
    ) -> None:
        self.connection, self.rule, self.listed = connection, rule, listed

    def __call__(self, **arguments: Any) -> Preview:
        server = self.connection.config.name
        if self.listed is None:
            raise ToolError(f"the preview tool {server}.{self.rule.tool} is not listed by {server}")
        destructive, gated_by = gating(self.listed, self.connection.config)
        if destructive:
            raise ToolError(
                f"the preview tool {server}.{self.rule.tool} is not read-only here ({gated_by}), "
                "and a preview must not act"
            )
        mapped = {}
        for name, source in self.rule.args:
            if source not in arguments:
                raise ToolError(f"the preview maps {name!r} from {source!r}, which the call lacks")
            mapped[name] = arguments[source]
        result = step_result(
            self.connection.call_tool(
                self.rule.tool, mapped, timeout_s=settings.AGENTSITE_PREVIEW_TIMEOUT_S, meta=None
            )
        )
        return preview_of_result(f"{server}.{self.rule.tool}", result, version=self.rule.version)


def preview_of_result(source: str, result: Any, *, version: str = "") -> Preview:
    """A preview tool's result as a Preview: its fields as facts; its version field (or a hash
    of the whole result) as the target version. The server's text stays data."""
    if isinstance(result, dict):
        facts = [(str(key), _fact(value)) for key, value in result.items()]
        text = "; ".join(f"{label}: {value}" for label, value in facts)
    else:
        text = _fact(result)
        facts = [("Result", text)]
    if version and isinstance(result, dict) and version in result:
        target = f"{version}={_fact(result[version])}"
    else:
        target = "sha256:" + hashlib.sha256(canonical_json(result).encode()).hexdigest()[:32]
    return Preview(summary=f"{source} says: {text}", facts=facts, target_version=target)


def _fact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _McpCall:
    """The callable behind an MCP tool's spec: one tools/call, its result made a step's."""

    def __init__(self, connection: ServerConnection, tool: str, timeout_s: float) -> None:
        self.connection, self.tool, self.timeout_s = connection, tool, timeout_s
        self.__module__ = "mcp"
        self.__qualname__ = f"{connection.config.name}.{tool}"

    def __call__(self, **arguments: Any) -> Any:
        key = arguments.pop(IDEMPOTENCY_PARAM, None)
        # RequestParamsMeta allows extra keys (PEP 728), which type checkers do not all know.
        meta = cast("types.RequestParamsMeta", {IDEMPOTENCY_META: key}) if key else None
        result = self.connection.call_tool(
            self.tool, arguments, timeout_s=self.timeout_s, meta=meta
        )
        return step_result(result)


def step_result(result: types.CallToolResult) -> Any:
    """What a step records of a tool result; ToolError with the server's text when isError.

    Structured content is the result as is; a lone text block holding a JSON object or array
    is parsed; images, audio and resources become short references, never their bytes.
    """
    parts = [_content(block) for block in result.content]
    if result.is_error:
        text = " ".join(part if isinstance(part, str) else json.dumps(part) for part in parts)
        raise ToolError(text.strip() or "the tool reported an error without a message")
    if result.structured_content is not None:
        return result.structured_content
    if len(parts) == 1:
        only = parts[0]
        if isinstance(only, str):
            return _json_or_text(only)
        return only
    return parts


def _json_or_text(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return text


def _content(block: Any) -> Any:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return {"type": kind, "mimeType": block.mime_type, "bytes": _decoded_size(block.data)}
    if isinstance(block, types.ResourceLink):
        return {"type": "resource_link", "uri": str(block.uri), "name": block.name}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        reference: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if resource.mime_type:
            reference["mimeType"] = resource.mime_type
        text = getattr(resource, "text", None)
        blob = getattr(resource, "blob", None)
        reference["chars" if text is not None else "bytes"] = (
            len(text) if text is not None else _decoded_size(blob or "")
        )
        return reference
    return {"type": getattr(block, "type", type(block).__name__)}


def _decoded_size(data: str | bytes) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return len(data)
