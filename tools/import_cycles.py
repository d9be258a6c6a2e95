"""Import cycles among plans/ modules, counting imports inside functions and TYPE_CHECKING.

    .venv/bin/python tools/import_cycles.py            # cycles, then function-local imports
    .venv/bin/python tools/import_cycles.py --local    # also list every function-local import

Exits 1 when a cycle is found that README.md does not list (under "Import cycles kept"), or
when a function-local import does not say why it is there: a comment with "why" on its line or
in the comments just above it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "plans"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST, name: str, is_package: bool) -> Iterator[tuple[str, int, bool]]:
    """(imported name, line, inside a function) for every import statement in the module."""

    def walk(node: ast.AST, local: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, inner
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - child.level + 1]
                    base = ".".join([*here, base] if base else here)
                for alias in child.names:
                    yield f"{base}.{alias.name}", child.lineno, inner
                    yield base, child.lineno, inner
            yield from walk(child, inner)

    yield from walk(tree, False)


def graph() -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    local: list[tuple[str, int, str]] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        seen_lines: set[tuple[int, str]] = set()
        for target, line, inside in _imports(tree, name, path.name == "__init__.py"):
            if target not in known or target == name:
                continue
            edges[name].add(target)
            if inside and (line, target) not in seen_lines:
                seen_lines.add((line, target))
                local.append((name, line, target))
    return _prune(edges, known), local


def _prune(edges: dict[str, set[str]], known: dict[str, Path]) -> dict[str, set[str]]:
    # A package's __init__ is imported by its submodules' importers only if named: we added both
    # plans.x and plans.x.y for `from plans.x import y`; drop plans.x when y is a module and
    # plans.x's __init__ is empty (it then adds nothing to the graph but a false loop).
    pruned = {}
    for name, targets in edges.items():
        keep = set()
        for target in targets:
            children = [t for t in targets if t.startswith(target + ".")]
            if children and not known[target].read_text().strip():
                continue
            keep.add(target)
        pruned[name] = keep
    return pruned


def says_why(path: Path, line: int) -> bool:
    """The import on `line` (or the run of imports and comments just above it) says why."""
    lines = path.read_text().splitlines()
    index = line - 1
    if "why" in lines[index].lower():
        return True
    while index > 0:
        index -= 1
        text = lines[index].strip()
        if not text.startswith(("#", "from ", "import ")):
            return False
        if "why" in text.lower():
            return True
    return False


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def allowed() -> list[set[str]]:
    """Cycles README.md lists, each a line `- a <-> b: why` under "Import cycles kept"."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"Import cycles kept.*?\n\n(.*?)(?:\n\n|\Z)", text, re.S)
    if not section:
        return []
    listed = []
    for line in section.group(1).splitlines():
        match = re.match(r"\s*- `?([\w. <>-]+?)`?:", line)
        if match:
            listed.append({part.strip(" `") for part in match.group(1).split("<->")})
    return listed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", action="store_true", help="list function-local imports")
    options = parser.parse_args()
    edges, local = graph()
    found = cycles(edges)
    listed = allowed()
    unlisted = [c for c in found if set(c) not in listed]
    known = modules()
    unexplained = [(n, line, t) for n, line, t in local if not says_why(known[n], line)]
    for component in found:
        mark = "listed in README" if set(component) in listed else "NOT LISTED"
        print(f"cycle ({len(component)} modules, {mark}): {' <-> '.join(component)}")
    for name, line, target in unexplained:
        print(f"function-local import without a why: {name}:{line} -> {target}")
    print(
        f"{len(found)} cycle(s), {len(unlisted)} not listed; {len(local)} function-local "
        f"imports, {len(unexplained)} without a why"
    )
    if options.local:
        for name, line, target in local:
            print(f"  {name}:{line} -> {target}")
    return 1 if unlisted or unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
