"""Eval cases: loaded from a versioned JSON file and checked before anything runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CASES_DIR = Path(__file__).resolve().parent / "cases"
DEFAULT_CASES = CASES_DIR / "planner.json"

CATEGORIES = (
    "demo",
    "arithmetic",
    "research",
    "destructive",
    "not_destructive",
    "refuse",
    "injection",
    "router",
)
DECISIONS = ("approve", "reject")

# The predicate keys each section accepts, with the JSON type each expects.
PLAN_KEYS: dict[str, type | tuple[type, ...]] = {
    "valid": bool,
    "refused": bool,
    "tools_used": list,
    "tools_forbidden": list,
    "max_steps": int,
    "destructive": bool,
}
TRAJECTORY_KEYS: dict[str, type | tuple[type, ...]] = {
    "status": str,
    "no_failed_step": bool,
    "max_tool_calls": int,
    "never_called": list,
    "approved_destructive_only": bool,
    "route": str,
    "max_model_calls": int,
}
ANSWER_KEYS: dict[str, type | tuple[type, ...]] = {
    "contains": list,
    "not_contains": list,
    "cites": bool,
    "figures_supported": bool,
}
SECTIONS = {"plan": PLAN_KEYS, "trajectory": TRAJECTORY_KEYS, "answer": ANSWER_KEYS}


class CasesInvalid(ValueError):
    """The cases file cannot be used; the message names every problem."""


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    goal: str
    decisions: str = "approve"  # what the reviewer does with every destructive step
    plan: dict[str, Any] = field(default_factory=dict)
    trajectory: dict[str, Any] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    path: str
    cases: tuple[Case, ...]

    @property
    def categories(self) -> list[str]:
        present = {case.category for case in self.cases}
        return [name for name in CATEGORIES if name in present]


def suite_load(path: Path | str = DEFAULT_CASES) -> Suite:
    """The suite in the file, or CasesInvalid naming what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CasesInvalid(f"cases file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CasesInvalid(f"cases file {path} cannot be read: {error}") from None
    except json.JSONDecodeError as error:
        raise CasesInvalid(
            f"cases file {path} is not JSON: {error.msg} at line {error.lineno}"
        ) from None
    return suite_from_data(data, path=str(path))


def suite_from_data(data: Any, *, path: str = "<data>") -> Suite:
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CasesInvalid(f'{path}: expected an object with a "cases" list')
    problems: list[str] = []
    cases: list[Case] = []
    seen: set[str] = set()
    for index, raw in enumerate(data["cases"]):
        case, case_problems = _case(raw, f"case {index + 1}")
        problems += case_problems
        if case is None:
            continue
        if case.id in seen:
            problems.append(f"case {case.id!r} appears twice")
        seen.add(case.id)
        cases.append(case)
    if not cases and not problems:
        problems.append("there are no cases")
    if problems:
        raise CasesInvalid(f"{path}: " + "; ".join(problems))
    return Suite(
        name=str(data.get("suite", "cases")),
        version=str(data.get("version", "")),
        path=path,
        cases=tuple(cases),
    )


def _case(raw: Any, where: str) -> tuple[Case | None, list[str]]:
    if not isinstance(raw, dict):
        return None, [f"{where} is not an object"]
    problems = []
    case_id = raw.get("id")
    if not isinstance(case_id, str) or not case_id.strip():
        return None, [f"{where} has no id"]
    where = f"case {case_id!r}"
    goal = raw.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        problems.append(f"{where} has no goal")
    category = raw.get("category")
    if category not in CATEGORIES:
        problems.append(f"{where}: category {category!r} is not one of {', '.join(CATEGORIES)}")
    decisions = raw.get("decisions", "approve")
    if decisions not in DECISIONS:
        problems.append(f"{where}: decisions must be one of {', '.join(DECISIONS)}")
    unknown = set(raw) - {"id", "category", "goal", "decisions", *SECTIONS}
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    sections: dict[str, dict[str, Any]] = {}
    for name, keys in SECTIONS.items():
        section = raw.get(name, {})
        if not isinstance(section, dict):
            problems.append(f"{where}: {name} must be an object")
            continue
        for key, value in section.items():
            expected = keys.get(key)
            if expected is None:
                problems.append(f"{where}: {name}.{key} is not a predicate")
            elif not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                problems.append(f"{where}: {name}.{key} has the wrong type")
            elif isinstance(value, list) and not all(isinstance(v, str) for v in value):
                problems.append(f"{where}: {name}.{key} must list strings")
        sections[name] = dict(section)
    if not any(sections.values()):
        problems.append(f"{where} has no predicates")
    if problems:
        return None, problems
    return (
        Case(
            id=case_id,
            category=str(category),
            goal=str(goal),
            decisions=str(decisions),
            plan=sections["plan"],
            trajectory=sections["trajectory"],
            answer=sections["answer"],
        ),
        [],
    )
