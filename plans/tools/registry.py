"""The ``@tool`` decorator, tool specs and the registry built from the configured modules."""

from __future__ import annotations

import copy
import importlib
import inspect
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol, overload

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from plans.engine import preview_data
from plans.tools.schema import IDEMPOTENCY_PARAM, Converter, derive

BUILTIN_MODULE = "plans.tools.builtin"
# Core tools the executor itself relies on (ask_human, result_slice): registered whatever the
# settings say.
CORE_MODULES = ("plans.tools.human", "plans.tools.results")

# Tool names must be usable as model API tool names.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: its function, what the planner is told about it, and how to run it."""

    name: str
    fn: Callable[..., Any]
    description: str
    schema: dict[str, Any]
    destructive: bool = False
    timeout_s: float | None = None
    takes_idempotency_key: bool = False
    retryable: tuple[type[BaseException], ...] = field(default=())
    # Same arguments, same result, whenever called: only then may a result be reused.
    pure: bool = False
    # For a destructive tool: reconcile(idempotency_key) -> the call's result if its effect is
    # known to have happened, None if not known (yet). Asked after a call timed out.
    reconcile: Callable[[str], Any] | None = None
    # Parameters whose JSON value is turned into the hinted type (date, Decimal, dataclass...).
    converters: Mapping[str, Converter] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    # The MCP server whose text the description and schema are ("" for our own tools): the
    # planner's prompt shows that text as the server's data, not as our instructions.
    server: str = ""
    # For a destructive tool: preview(**args) -> a Preview of the effect, computed without
    # acting; asked before a reviewer decides and again just before the call (same limit).
    preview: Callable[..., Any] | None = None
    preview_timeout_s: float | None = None
    # The hook has an idempotency_key parameter (read at declaration, not at each preview).
    preview_takes_key: bool = False
    # What one call costs beyond the model's tokens (a paid API), as declared; None: not declared.
    cost_usd: Decimal | None = None

    def call(self, args: Mapping[str, Any], *, idempotency_key: str) -> Any:
        """Call the function with ``args``; the executor's key is passed if the tool takes one."""
        kwargs = self._kwargs(args, idempotency_key if self.takes_idempotency_key else None)
        result = self.fn(**kwargs)
        if inspect.iscoroutine(result) or inspect.isasyncgen(result):
            # A plain function that returns a coroutine (say, a sync wrapper around an async
            # one) escapes the check at declaration; its work would never be done.
            kind = "an async generator" if inspect.isasyncgen(result) else "a coroutine"
            if inspect.iscoroutine(result):
                result.close()  # never started: closing it avoids a "never awaited" warning
            raise TypeError(
                f"tool {self.name!r} ({self.origin}) returned {kind} instead of a result; "
                "tools must be synchronous functions"
            )
        return result

    def take_preview(self, args: Mapping[str, Any], *, idempotency_key: str = "") -> dict[str, Any]:
        """The preview hook's answer for these arguments, in its stored form (see
        plans.engine.previews); raises what the hook raises, or PreviewInvalid.

        A hook with an ``idempotency_key`` parameter gets the call's key ("" before it has
        one): an effect already made under it is this very call's, not a change of target.
        """
        assert self.preview is not None
        kwargs = self._kwargs(args, idempotency_key if self.preview_takes_key else None)
        return preview_data(self.preview(**kwargs))

    def _kwargs(self, args: Mapping[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        """The arguments as the function (or its preview hook) takes them: each converted to its
        hinted type, with the idempotency key when one is given."""
        kwargs = dict(args)
        for name, convert in self.converters.items():
            if name in kwargs:
                kwargs[name] = convert(kwargs[name])
        if idempotency_key is not None:
            kwargs[IDEMPOTENCY_PARAM] = idempotency_key
        return kwargs

    @property
    def origin(self) -> str:
        """Dotted path of the function, for messages."""
        return f"{self.fn.__module__}.{self.fn.__qualname__}"


def _takes_key(fn: Callable[..., Any]) -> bool:
    try:
        return IDEMPOTENCY_PARAM in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# Every decorated function, by defining module then tool name; filled at import time.
_declared: dict[str, dict[str, ToolSpec]] = {}
_declared_lock = threading.Lock()

_registry: dict[str, ToolSpec] | None = None
# Re-entrant so that a tool module calling get_registry() while it is imported gets a clear
# error instead of a deadlock.
_registry_lock = threading.RLock()
_loading = False


@overload
def tool[F: Callable[..., Any]](fn: F, /) -> F: ...


@overload
def tool[F: Callable[..., Any]](
    *,
    destructive: bool = False,
    timeout_s: float | None = None,
    name: str | None = None,
    retryable: Iterable[type[BaseException]] = (),
    pure: bool = False,
    reconcile: Callable[[str], Any] | None = None,
    preview: Callable[..., Any] | None = None,
    preview_timeout_s: float | None = None,
    cost_usd: float | str | Decimal | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    destructive: bool = False,
    timeout_s: float | None = None,
    name: str | None = None,
    retryable: Iterable[type[BaseException]] = (),
    pure: bool = False,
    reconcile: Callable[[str], Any] | None = None,
    preview: Callable[..., Any] | None = None,
    preview_timeout_s: float | None = None,
    cost_usd: float | str | Decimal | None = None,
) -> Any:
    """Declare a function as a tool; usable bare (``@tool``) or with options (``@tool(...)``).

    ``pure=True`` promises the same result for the same arguments at any time, so a run may
    reuse an earlier identical call's result; ``reconcile`` (destructive tools) answers, for an
    idempotency key, the result of a call whose reply never came, or None if unknown;
    ``preview`` (destructive tools) takes the arguments and returns a Preview of the effect
    without acting, within ``preview_timeout_s`` (AGENTSITE_PREVIEW_TIMEOUT_S by default);
    ``cost_usd`` is what one call costs in USD beyond tokens, for the plan's cost forecast.
    """
    retry_on = _check_options(destructive, timeout_s, name, retryable, pure, reconcile)
    _check_preview(destructive, preview, preview_timeout_s)
    call_cost = _check_cost(cost_usd)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = _check_function(func, name)
        derived = derive(func)
        spec = ToolSpec(
            name=tool_name,
            fn=func,
            description=derived.description,
            schema=derived.schema,
            destructive=destructive,
            timeout_s=None if timeout_s is None else float(timeout_s),
            takes_idempotency_key=derived.takes_idempotency_key,
            retryable=retry_on,
            pure=pure,
            reconcile=reconcile,
            converters=derived.converters,
            output_schema=derived.output_schema,
            preview=preview,
            preview_timeout_s=None if preview_timeout_s is None else float(preview_timeout_s),
            preview_takes_key=preview is not None and _takes_key(preview),
            cost_usd=call_cost,
        )
        _declare(spec)
        func.tool_spec = spec  # type: ignore[attr-defined]
        return func

    return decorate if fn is None else decorate(fn)


def _check_function(func: Any, name: str | None) -> str:
    """The tool's name, once the function is one the executor can call."""
    if not callable(func):
        raise TypeError(f"@tool expects a function, got {func!r}")
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        # The executor calls tools synchronously: the body would never run and the
        # coroutine object would be recorded as the step's result.
        kind = "an async generator" if inspect.isasyncgenfunction(func) else "async"
        raise TypeError(
            f"@tool {func.__module__}.{func.__qualname__}: the function is {kind}; tools "
            "are called synchronously, so declare it with plain 'def'"
        )
    tool_name = func.__name__ if name is None else name
    if not _NAME.match(tool_name):
        raise TypeError(
            f"@tool {func.__module__}.{func.__qualname__}: name {tool_name!r} must be 1-64 "
            "letters, digits, '_' or '-'"
        )
    return tool_name


def _check_options(
    destructive: Any, timeout_s: Any, name: Any, retryable: Any, pure: Any, reconcile: Any
) -> tuple[type[BaseException], ...]:
    if not isinstance(destructive, bool):
        raise TypeError(f"@tool(destructive=...) must be a bool, got {destructive!r}")
    if timeout_s is not None and (
        isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0
    ):
        raise TypeError(
            f"@tool(timeout_s=...) must be a positive number or None, got {timeout_s!r}"
        )
    if name is not None and not isinstance(name, str):
        raise TypeError(f"@tool(name=...) must be a str, got {name!r}")
    if isinstance(retryable, type):
        retryable = (retryable,)
    retry_on = tuple(retryable)
    for exc_type in retry_on:
        if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
            raise TypeError(f"@tool(retryable=...) must hold exception types, got {exc_type!r}")
    if not isinstance(pure, bool):
        raise TypeError(f"@tool(pure=...) must be a bool, got {pure!r}")
    if pure and destructive:
        raise TypeError("@tool(pure=True) cannot be destructive: an effect is not a pure function")
    if reconcile is not None and not (callable(reconcile) and destructive):
        raise TypeError("@tool(reconcile=...) must be a function, for a destructive tool")
    return retry_on


def _check_preview(destructive: bool, preview: Any, timeout_s: Any) -> None:
    if preview is not None and not (callable(preview) and destructive):
        raise TypeError("@tool(preview=...) must be a function, for a destructive tool")
    if preview is not None and (
        inspect.iscoroutinefunction(preview) or inspect.isasyncgenfunction(preview)
    ):
        raise TypeError("@tool(preview=...) must be a plain function: previews run synchronously")
    if timeout_s is not None and (
        preview is None
        or isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or timeout_s <= 0
    ):
        raise TypeError(
            f"@tool(preview_timeout_s=...) must be a positive number, with a preview; got "
            f"{timeout_s!r}"
        )


def _check_cost(cost_usd: Any) -> Decimal | None:
    if cost_usd is None:
        return None
    problem = f"@tool(cost_usd=...) must be a number of USD, 0 or more, got {cost_usd!r}"
    if isinstance(cost_usd, bool) or not isinstance(cost_usd, int | float | str | Decimal):
        raise TypeError(problem)
    try:
        # str() first so 0.002 stays 0.002 rather than its binary approximation.
        cost = Decimal(str(cost_usd))
    except InvalidOperation:
        raise TypeError(problem) from None
    if not cost.is_finite() or cost < 0:
        raise TypeError(problem)
    return cost


def _declare(spec: ToolSpec) -> None:
    module = spec.fn.__module__
    with _declared_lock:
        tools = _declared.setdefault(module, {})
        prior = tools.get(spec.name)
        # Re-decorating the same function (a module reload) replaces its spec.
        if prior is not None and prior.origin != spec.origin:
            raise ImproperlyConfigured(_duplicate_message(spec.name, prior, spec))
        tools[spec.name] = spec


def _duplicate_message(name: str, first: ToolSpec, second: ToolSpec) -> str:
    return f"tool name {name!r} is registered twice: by {first.origin} and by {second.origin}"


def tool_modules() -> list[str]:
    """The modules whose tools form the registry: the core and built-ins, then the configured."""
    configured = getattr(settings, "AGENTSITE_TOOL_MODULES", [])
    if isinstance(configured, str) or not all(isinstance(m, str) for m in configured):
        raise ImproperlyConfigured(
            f"AGENTSITE_TOOL_MODULES must be a list of module names, got {configured!r}"
        )
    return list(dict.fromkeys([*CORE_MODULES, BUILTIN_MODULE, *configured]))


class ToolSource(Protocol):
    """Tools that live elsewhere (an MCP server's), whose list can change while we run."""

    def specs(self) -> Mapping[str, ToolSpec]:
        """The source's tools now, by registry name."""
        ...

    def refresh(self, names: Collection[str], *, since: float) -> None:
        """Read the list again, once for all of ``names`` (a plan names them, and the source
        did not list them), unless it was read after ``since`` (a time.monotonic())."""
        ...


_sources: list[ToolSource] = []


def add_tool_source(source: ToolSource) -> None:
    """Merge a source's tools into every registry read (done once, when the app is ready)."""
    if source not in _sources:
        _sources.append(source)


def get_registry(*, looking_for: Iterable[str] = ()) -> dict[str, ToolSpec]:
    """Tools by name from the built-ins, settings.AGENTSITE_TOOL_MODULES and the tool sources.

    A module contributes the tools decorated in it; list every module that defines tools. The
    modules are loaded once; the sources (MCP servers) are read each time, and asked to
    re-list, once per read however many names are missing, when a name in ``looking_for`` is
    not among their tools.
    """
    registry = _modules_registry()
    if not _sources:
        return registry
    started = time.monotonic()
    merged = dict(registry)
    for source in _sources:
        merged.update(source.specs())
    missing = {name for name in looking_for if name not in merged}
    if missing:
        for source in _sources:
            source.refresh(missing, since=started)
            merged.update(source.specs())
    return merged


def _modules_registry() -> dict[str, ToolSpec]:
    global _registry, _loading
    registry = _registry
    if registry is None:
        with _registry_lock:
            if _loading:
                raise ImproperlyConfigured(
                    "get_registry() was called while the tool modules were being imported; "
                    "call it when a tool runs, not at import time"
                )
            if _registry is None:
                _loading = True
                try:
                    _registry = _load(tool_modules())
                finally:
                    _loading = False
            registry = _registry
    return dict(registry)


def reset_registry() -> None:
    """Forget the loaded registry so the next get_registry() reads the settings again."""
    global _registry
    with _registry_lock:
        _registry = None


def _load(modules: list[str]) -> dict[str, ToolSpec]:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"AGENTSITE_TOOL_MODULES: cannot import tool module {module!r}: {exc}"
            ) from exc
    registry: dict[str, ToolSpec] = {}
    with _declared_lock:
        for module in modules:
            for spec in _declared.get(module, {}).values():
                prior = registry.get(spec.name)
                if prior is not None:
                    raise ImproperlyConfigured(_duplicate_message(spec.name, prior, spec))
                registry[spec.name] = spec
    return registry


def tool_catalog_for_prompt(registry: Mapping[str, ToolSpec]) -> list[dict[str, Any]]:
    """The tools as the planner sees them, sorted by name, with output_schema where declared
    and, for an MCP server's tools, the server (whose text the prompt delimits as data)."""
    catalog = []
    for spec in (registry[name] for name in sorted(registry)):
        entry: dict[str, Any] = {
            "name": spec.name,
            "description": spec.description,
            "input_schema": copy.deepcopy(spec.schema),
            "destructive": spec.destructive,
        }
        if spec.output_schema is not None:
            entry["output_schema"] = copy.deepcopy(spec.output_schema)
        if spec.server:
            entry["server"] = spec.server
        catalog.append(entry)
    return catalog
