"""Functions (and methods) in plans/ longer than a limit, longest first.

    .venv/bin/python tools/long_functions.py            # over 60 lines
    .venv/bin/python tools/long_functions.py --max 50   # another limit
    .venv/bin/python tools/long_functions.py --allow 8  # exit 1 if more than 8 are over

A function's length is its lines from `def` (decorators excluded) to its last statement,
docstring and comments included; a nested function counts within its parent and on its own.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def long_functions(limit: int) -> list[tuple[int, str]]:
    found = []
    for path in sorted((ROOT / "plans").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    found.append((length, where))
    return sorted(found, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=60, help="longest allowed (lines)")
    parser.add_argument("--allow", type=int, default=None, help="how many may be longer")
    options = parser.parse_args()
    found = long_functions(options.max)
    for length, where in found:
        print(f"{length:4d}  {where}")
    print(f"{len(found)} function(s) over {options.max} lines")
    return 1 if options.allow is not None and len(found) > options.allow else 0


if __name__ == "__main__":
    sys.exit(main())
