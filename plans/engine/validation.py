"""Checking planner output against the rules and the tool catalog, reporting every problem at once.

Defaults: a step without "args" has {} and one without "depends_on" has []; "repeat" (a boolean,
false unless given) marks a destructive call meant to happen again after a replan; other keys a
planner adds (such as "description") are ignored. Ids are integers from 1 to MAX_STEP_ID:
booleans and floats, even integral ones like 1.0, are refused rather than converted.
A cycle reads "cycle: 1 -> 3 -> 2 -> 1": from its smallest id, each step depends on the next.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from plans.engine.argschema import check_args, json_type_name, path_problem
from plans.engine.graph import describe_cycle, find_cycles
from plans.engine.plan import MAX_STEP_ID, Plan, PlanInvalid, PlanStep, Problem
from plans.engine.substitution import Placeholder, placeholders
from plans.engine.text import unstorable_in

_BRIEF_CHARS = 40


class ToolSignature(Protocol):
    """What validation needs to know about a tool."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> Mapping[str, Any]: ...

    @property
    def destructive(self) -> bool: ...


def _output_schema(tool: ToolSignature) -> Mapping[str, Any] | None:
    """The tool's declared result schema; catalogs whose tools declare none are not checked."""
    schema = getattr(tool, "output_schema", None)
    return schema if isinstance(schema, Mapping) else None


def validate_plan(
    data: Any, catalog: Mapping[str, ToolSignature], *, max_steps: int | None
) -> Plan:
    """The plan data describes, or PlanInvalid listing every problem, each naming its step."""
    raw_steps = _raw_steps(data)
    problems: list[Problem] = []
    if max_steps is not None and len(raw_steps) > max_steps:
        problems.append(
            Problem(None, f"the plan has {len(raw_steps)} steps; at most {max_steps} are allowed")
        )
    drafts = [_read_step(raw, position, catalog) for position, raw in enumerate(raw_steps, 1)]
    for draft in drafts:
        problems += draft.problems
    edges = _dependency_edges(drafts)
    problems += _duplicate_id_problems(drafts)
    problems += _dependency_problems(drafts, edges)
    problems += [Problem(None, describe_cycle(cycle)) for cycle in find_cycles(edges)]
    problems += _placeholder_problems(drafts, edges, catalog)
    if problems:
        raise PlanInvalid(problems)
    return Plan(steps=tuple(draft.to_step() for draft in drafts))


@dataclass
class _Draft:
    """One step as read, before cross-step checks; fields are None where unusable."""

    position: int  # 1-based, for steps whose id cannot name them
    step_id: int | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    depends_on: list[int] = field(default_factory=list)
    repeat: bool = False
    problems: list[Problem] = field(default_factory=list)

    def problem(self, message: str) -> Problem:
        """A problem about this step, named by id or else by position."""
        if self.step_id is None:
            return Problem(None, f"step at position {self.position}: {message}")
        return Problem(self.step_id, message)

    def to_step(self) -> PlanStep:
        """The validated step; only called once no problems were found."""
        assert self.step_id is not None and self.tool is not None and self.args is not None
        return PlanStep(
            self.step_id, self.tool, self.args, tuple(self.depends_on), repeat=self.repeat
        )


def _raw_steps(data: Any) -> list[Any]:
    if not isinstance(data, dict):
        _refuse(f"the plan must be a JSON object, got {json_type_name(data)}")
    steps = data.get("steps")
    reason = _reason(data)
    if steps is None and not reason:
        _refuse('the plan must have a "steps" list')
    if steps is not None and not isinstance(steps, list):
        _refuse(f'"steps" must be a list, got {json_type_name(steps)}')
    if not steps:
        _refuse(f"the plan has no steps: {reason}" if reason else "the plan has no steps")
    return steps


def _reason(data: dict[str, Any]) -> str:
    """The planner's explanation, given when it returns no steps."""
    reason = data.get("reason")
    return reason.strip() if isinstance(reason, str) else ""


def _refuse(message: str) -> NoReturn:
    raise PlanInvalid([Problem(None, message)])


def _read_step(raw: Any, position: int, catalog: Mapping[str, ToolSignature]) -> _Draft:
    draft = _Draft(position)
    if not isinstance(raw, dict):
        draft.problems.append(draft.problem(f"a step must be an object, got {json_type_name(raw)}"))
        return draft
    _read_id(draft, raw)
    unstorable = unstorable_in(raw)
    if unstorable is not None:
        draft.problems.append(draft.problem(f"holds text that cannot be stored: {unstorable}"))
    _read_tool(draft, raw, catalog)
    _read_args(draft, raw, catalog)
    _read_depends_on(draft, raw)
    _read_repeat(draft, raw, catalog)
    return draft


def _read_repeat(draft: _Draft, raw: dict[str, Any], catalog: Mapping[str, ToolSignature]) -> None:
    repeat = raw.get("repeat", False)
    if not isinstance(repeat, bool):
        draft.problems.append(
            draft.problem(f"repeat must be true or false, got {json_type_name(repeat)}")
        )
        return
    tool = catalog.get(draft.tool) if draft.tool is not None else None
    if repeat and tool is not None and not tool.destructive:
        # Only effects are matched across plan versions; elsewhere the marker would mean nothing.
        draft.problems.append(
            draft.problem(f"repeat applies to destructive tools only; {draft.tool} is not one")
        )
        return
    draft.repeat = repeat


def _read_id(draft: _Draft, raw: dict[str, Any]) -> None:
    if "id" not in raw:
        draft.problems.append(draft.problem("id is missing"))
    elif _is_step_id(raw["id"]):
        draft.step_id = raw["id"]
    else:
        draft.problems.append(
            draft.problem(f"id must be an integer from 1 to {MAX_STEP_ID}, got {_brief(raw['id'])}")
        )


def _read_tool(draft: _Draft, raw: dict[str, Any], catalog: Mapping[str, ToolSignature]) -> None:
    tool = raw.get("tool")
    if "tool" not in raw:
        draft.problems.append(draft.problem("tool is missing"))
    elif not isinstance(tool, str):
        draft.problems.append(draft.problem(f"tool must be a string, got {json_type_name(tool)}"))
    elif tool not in catalog:
        allowed = f"allowed: {', '.join(sorted(catalog))}" if catalog else "no tools are registered"
        draft.problems.append(draft.problem(f"unknown tool {_quoted(tool)} ({allowed})"))
    else:
        draft.tool = tool


def _read_args(draft: _Draft, raw: dict[str, Any], catalog: Mapping[str, ToolSignature]) -> None:
    args = raw.get("args", {})
    if not isinstance(args, dict):
        draft.problems.append(draft.problem(f"args must be an object, got {json_type_name(args)}"))
        return
    draft.args = args
    if draft.tool is not None:
        schema = catalog[draft.tool].schema
        draft.problems += [
            draft.problem(message) for message in check_args(schema, args, allow_placeholders=True)
        ]


def _read_depends_on(draft: _Draft, raw: dict[str, Any]) -> None:
    depends_on = raw.get("depends_on", [])
    if not isinstance(depends_on, list):
        draft.problems.append(
            draft.problem(
                f"depends_on must be a list of step ids, got {json_type_name(depends_on)}"
            )
        )
        return
    for item in depends_on:
        if not _is_step_id(item):
            draft.problems.append(
                draft.problem(f"depends_on must hold step ids, got {_brief(item)}")
            )
    # Repeating a dependency changes nothing, so repeats are dropped rather than refused.
    draft.depends_on = list(dict.fromkeys(item for item in depends_on if _is_step_id(item)))


def _is_step_id(value: Any) -> bool:
    return type(value) is int and 1 <= value <= MAX_STEP_ID


def _dependency_edges(drafts: list[_Draft]) -> dict[int, set[int]]:
    """Each valid id mapped to the known steps it depends on, self-dependencies left out."""
    edges: dict[int, set[int]] = {d.step_id: set() for d in drafts if d.step_id is not None}
    for draft in drafts:
        if draft.step_id is not None:
            # Steps sharing an id are one node: the id is how everything else names them.
            edges[draft.step_id].update(
                dependency
                for dependency in draft.depends_on
                if dependency in edges and dependency != draft.step_id
            )
    return edges


def _duplicate_id_problems(drafts: list[_Draft]) -> list[Problem]:
    positions: dict[int, list[int]] = {}
    for draft in drafts:
        if draft.step_id is not None:
            positions.setdefault(draft.step_id, []).append(draft.position)
    return [
        Problem(step_id, f"the id is used by {len(where)} steps (positions {_and_list(where)})")
        for step_id, where in positions.items()
        if len(where) > 1
    ]


def _dependency_problems(drafts: list[_Draft], edges: Mapping[int, set[int]]) -> list[Problem]:
    problems = []
    for draft in drafts:
        for dependency in draft.depends_on:
            if dependency == draft.step_id:
                problems.append(draft.problem("depends on itself"))
            elif dependency not in edges:
                problems.append(
                    draft.problem(f"depends on step {dependency}, which does not exist")
                )
    return problems


def _placeholder_problems(
    drafts: list[_Draft], edges: Mapping[int, set[int]], catalog: Mapping[str, ToolSignature]
) -> list[Problem]:
    tools = {draft.step_id: draft.tool for draft in drafts if draft.step_id is not None}
    problems = []
    for draft in drafts:
        if draft.args is None:
            continue
        try:
            found = list(placeholders(draft.args))
        except ValueError:
            problems.append(
                draft.problem("args hold a placeholder number too long to be a step id")
            )
            continue
        refs = {placeholder.step_id for placeholder in found}
        if refs:
            problems += _unreachable_refs(draft, sorted(refs), edges)
        for placeholder in sorted(set(found), key=str):
            problem = _path_problem(placeholder, tools, catalog)
            if problem is not None:
                problems.append(draft.problem(problem))
    return problems


def _path_problem(
    placeholder: Placeholder,
    tools: Mapping[int, str | None],
    catalog: Mapping[str, ToolSignature],
) -> str | None:
    """Why a placeholder's path cannot exist in the result its step's tool declares."""
    tool = tools.get(placeholder.step_id)
    if not placeholder.path or tool is None:
        return None
    schema = _output_schema(catalog[tool])
    if schema is None:
        return None
    subject = f"step {placeholder.step_id}'s result ({tool})"
    problem = path_problem(schema, placeholder.path, subject=subject)
    return None if problem is None else f"placeholder {placeholder}: {problem}"


def _unreachable_refs(
    draft: _Draft, refs: list[int], edges: Mapping[int, set[int]]
) -> list[Problem]:
    upstream = _upstream(draft, edges)
    this_step = "this step" if draft.step_id is None else f"step {draft.step_id}"
    problems = []
    for ref in refs:
        placeholder = f"placeholder {{{{{ref}}}}} refers to step {ref}"
        if ref == draft.step_id:
            problems.append(draft.problem(f"{placeholder}, which is this step itself"))
        elif ref not in edges:
            problems.append(draft.problem(f"{placeholder}, which does not exist"))
        elif ref not in upstream:
            problems.append(draft.problem(f"{placeholder}, which {this_step} does not depend on"))
    return problems


def _upstream(draft: _Draft, edges: Mapping[int, set[int]]) -> set[int]:
    """The known steps draft depends on, directly or transitively."""
    reached: set[int] = set()
    pending = [dependency for dependency in draft.depends_on if dependency in edges]
    while pending:
        step_id = pending.pop()
        if step_id not in reached:
            reached.add(step_id)
            pending.extend(edges[step_id])
    return reached


def _brief(value: Any) -> str:
    """value as short text for a message: strings quoted, other scalars as JSON."""
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    try:
        return _shorten(json.dumps(value))
    except (TypeError, ValueError):  # not JSON, or an int too long to print
        return json_type_name(value)


def _quoted(text: str) -> str:
    return _shorten(repr(text))


def _shorten(text: str) -> str:
    return text if len(text) <= _BRIEF_CHARS else text[: _BRIEF_CHARS - 3] + "..."


def _and_list(numbers: list[int]) -> str:
    words = [str(number) for number in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
