"""Regression check: the executor benchmark, a burst's CPU per run and a run's bookkeeping
(creation, a priced model call), BASE_REF against this tree.

Runs each commit's own executor and load benchmarks, and this tree's bookkeeping script on each
tree's code, alternating a detached worktree of BASE_REF with the working tree (ABBA order, so a
drift of the machine's speed falls on both), and prints the median of each figure over the
rounds with the ratio new / base. Exits 1 when any shape's wall time (or the CPU per run) is
more than --threshold slower. A developer's command, never a test:

    ./dev bench compare 003be73
    ./dev bench compare main --rounds 4 --repeats 3 --shapes diamond,layered --no-load
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXED = re.compile(r"per-run fixed cost.*?: ([\d.]+) ms")
# A load benchmark concurrency row ends "<CPU/run> ms <N x CPU/run> s".
LOAD_ROW = re.compile(r"^\s*(\d+)\s+(\S+ ms)\s.*?([\d.]+) ms\s+[\d.]+ s\s*$")

Figures = dict[str, float]


def executor_figures(tree: Path, repeats: int, shapes: str) -> Figures:
    """One run of tree's benchmarks/executor.py: fixed cost, wall and CPU/step per shape."""
    out = _run(tree, "benchmarks/executor.py", "--repeats", str(repeats), "--shapes", shapes)
    figures: Figures = {}
    in_table = False
    for line in out.splitlines():
        if match := FIXED.search(line):
            figures["per-run fixed cost, ms"] = float(match.group(1))
        elif line.startswith("shape"):
            in_table = True
        elif in_table and not line.strip():
            break
        elif in_table:
            label, cells = line[:34].strip(), line[34:].replace("MISSED", "").split()
            figures[f"{label}, wall ms"] = float(cells[2])
            figures[f"{label}, CPU/step us"] = float(cells[9])
    if not figures:
        raise SystemExit(f"no figures in the executor benchmark's output of {tree}:\n{out}")
    return figures


def load_figures(tree: Path, runs: int) -> Figures:
    """One run of tree's load benchmark, concurrency section: CPU per 5-step run."""
    out = _run(tree, "benchmarks/load.py", "--sections", "concurrency", "--runs", str(runs))
    figures = {
        f"burst of {m.group(1)}, tools {m.group(2)}, CPU/run ms": float(m.group(3))
        for m in map(LOAD_ROW.match, out.splitlines())
        if m
    }
    if not figures:
        raise SystemExit(f"no CPU/run rows in the load benchmark's output of {tree}:\n{out}")
    return figures


def bookkeeping_figures(tree: Path) -> Figures:
    """This tree's bookkeeping script on tree's code: CPU per run creation and per priced run."""
    out = _run(tree, str(ROOT / "benchmarks" / "bookkeeping.py"), "--tree", str(tree))
    figures = {
        label.strip(): float(value)
        for label, _, value in (line.rpartition(" ") for line in out.splitlines())
        if label.endswith("CPU/run ms")
    }
    if len(figures) != 2:
        raise SystemExit(f"no bookkeeping figures for {tree}:\n{out}")
    return figures


def _run(tree: Path, script: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSITE_")}
    done = subprocess.run(
        [sys.executable, script, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):  # 1: a benchmark's own target missed, still figures
        raise SystemExit(f"{script} in {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def is_slower(name: str) -> bool:
    """The figures a regression is judged on: wall times and CPU per run, not per-step detail."""
    return name.endswith("wall ms") or name.endswith("CPU/run ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="a commit, branch or tag to compare against")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per shape in a run")
    parser.add_argument("--shapes", default="diamond,wide,chain,layered,layered-random")
    parser.add_argument("--load-runs", type=int, default=50, help="runs in the load burst")
    parser.add_argument(
        "--no-load", action="store_true", help="skip the CPU-per-run burst and bookkeeping"
    )
    parser.add_argument("--threshold", type=float, default=0.10, help="slower than this fails")
    args = parser.parse_args()

    base_sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{args.base}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="agentsite-compare-") as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(base_tree), base_sha],
            cwd=ROOT,
            check=True,
        )
        try:
            results = _alternate(args, {"base": base_tree, "new": ROOT})
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False
            )
    return _report(args, base_sha, results)


def _alternate(args: argparse.Namespace, trees: dict[str, Path]) -> dict[str, list[Figures]]:
    results: dict[str, list[Figures]] = {"base": [], "new": []}
    for round_no in range(args.rounds):
        order = ("base", "new") if round_no % 2 == 0 else ("new", "base")
        for which in order:
            print(f"round {round_no + 1}/{args.rounds}: {which}", file=sys.stderr, flush=True)
            figures = executor_figures(trees[which], args.repeats, args.shapes)
            if not args.no_load:
                figures |= load_figures(trees[which], args.load_runs)
                figures |= bookkeeping_figures(trees[which])
            results[which].append(figures)
    return results


def _report(args: argparse.Namespace, base_sha: str, results: dict[str, list[Figures]]) -> int:
    load = os.getloadavg()[0]
    print(
        f"base {base_sha[:9]} vs this tree, median of {args.rounds} alternating rounds "
        f"({args.repeats} repeats a shape each), load average now {load:.1f}\n"
    )
    print(f"{'figure':<58}{'base':>10}{'new':>10}{'new/base':>10}")
    slower = []
    for name in results["base"][0]:
        if not all(name in r for r in results["new"]):
            continue  # a figure only the base prints
        base = statistics.median(r[name] for r in results["base"])
        new = statistics.median(r[name] for r in results["new"])
        ratio = new / base if base else float("inf")
        flag = ""
        if is_slower(name) and ratio > 1 + args.threshold:
            slower.append(name)
            flag = "  SLOWER"
        print(f"{name:<58}{base:>10.1f}{new:>10.1f}{ratio:>10.2f}{flag}")
    if slower:
        print(f"\n{len(slower)} figure(s) more than {args.threshold:.0%} slower than the base")
        return 1
    print(f"\nno wall time or CPU per run more than {args.threshold:.0%} slower than the base")
    return 0


if __name__ == "__main__":
    sys.exit(main())
