"""Instructions per run of the executor benchmark's plans at 0 ms, counted by valgrind.

On a loaded machine wall and CPU times drift by tens of percent; instruction counts do not.
The script runs itself under valgrind's callgrind (every thread of the process), counting only
the advance_run() calls of each shape, and prints millions of instructions per run. Run it in
two trees (a worktree of the base commit and this one) to compare them; it takes minutes.

    ./dev bench instructions
    ./dev bench instructions --shapes one,chain
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# shape -> runs counted (a 500-step run under valgrind takes a minute)
RUNS = {"one": 6, "diamond": 6, "wide": 3, "chain": 3, "layered": 1}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="one,diamond,chain,layered")
    parser.add_argument("--inside", help=argparse.SUPPRESS)  # the run under valgrind
    args = parser.parse_args()
    if args.inside:
        return _count(args.shapes.split(","))
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed: apt-get install valgrind")
    with tempfile.TemporaryDirectory(prefix="agentsite-instructions-") as scratch:
        out = Path(scratch) / "callgrind.out"
        env = {**os.environ, "AGENTSITE_LEASE_SECONDS": "600"}  # valgrind runs ~50x slower
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}.%p",
                sys.executable,
                __file__,
                "--shapes",
                args.shapes,
                "--inside",
                scratch,
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        print(f"{'shape (0 ms tools)':<24}{'runs':>6}{'M instructions/run':>20}")
        for dump in sorted(Path(scratch).glob("callgrind.out.*.*"), key=_part):
            shape, runs, total = _dump_total(dump.read_text())
            print(f"{shape:<24}{runs:>6}{total / runs / 1e6:>20.1f}")
    return 0


def _dump_total(text: str) -> tuple[str, int, int]:
    """(shape, runs, instructions) of one dump: its own costs summed, not the inclusive cost
    that follows each calls= line."""
    trigger = re.search(r"^desc: Trigger: dump (\w+):(\d+)", text, re.MULTILINE)
    assert trigger is not None, "a dump without the shape's name"
    total, after_call = 0, False
    for line in text.splitlines():
        if line.startswith("calls="):
            after_call = True
        elif _COST.match(line):
            if not after_call:
                total += int(line.split()[1])
            after_call = False
    return trigger.group(1), int(trigger.group(2)), total


# A cost line of a callgrind dump: a (maybe relative) position and the instructions.
_COST = re.compile(r"(?:[+-]?\d+|\*) \d+$")


def _part(path: Path) -> int:
    return int(path.name.rsplit(".", 1)[1])


def _count(shapes: list[str]) -> int:
    from benchmarks import executor as ex

    with tempfile.TemporaryDirectory(prefix="agentsite-bench-") as db_dir:
        ex.setup_django(db_dir)
        for _ in range(3):
            ex.run_once(ex.diamond(ex.fixed(0)))
        from django.contrib.auth import get_user_model

        from plans.runtime.advance import advance_run
        from plans.runtime.worker import gc_tune_for_serving
        from plans.services.runs import run_create

        gc_tune_for_serving()
        user = get_user_model().objects.get(username="bench")
        pid = str(os.getpid())
        for shape in shapes:
            steps = [ex._step(1, [], 0)] if shape == "one" else ex.SHAPES[shape][0](ex.fixed(0))
            for _ in range(2):
                ex.run_once(steps)
            runs = [
                run_create(
                    author=user,
                    goal_text="benchmark",
                    plan_data={"steps": steps},
                    max_parallel_steps=len(steps),
                    lift_plan_step_cap=True,
                ).pk
                for _ in range(RUNS[shape])
            ]
            _control("-z", pid)
            _control("-i", "on", pid)
            for run_id in runs:
                assert advance_run(run_id) == "completed"
            _control("-i", "off", pid)
            _control("-d", f"{shape}:{len(runs)}", pid)
    return 0


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], capture_output=True, check=False)


if __name__ == "__main__":
    sys.exit(main())
