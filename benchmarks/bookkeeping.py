"""The CPU of a run's bookkeeping outside its steps: creating a run (its plan stored), and a run
whose answer call is priced (its row written before the call and finished after it).

`./dev bench compare` runs this script of the working tree against each tree in turn (--tree),
so both are measured the same way; alone it measures the tree it is in:

    .venv/bin/python benchmarks/bookkeeping.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

PLAN = {
    "steps": [
        {"id": i, "tool": "bench_sleep", "args": {"ms": 0, "tag": i}, "depends_on": deps}
        for i, deps in {1: [], 2: [], 3: [1, 2], 4: [3], 5: [3]}.items()
    ]
}
CREATIONS = 200  # a batch; the median of batches is printed
PRICED_RUNS = 40


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    with tempfile.TemporaryDirectory(prefix="agentsite-bookkeeping-") as scratch:
        _setup_django(scratch)
        creation, priced = _measure(args.batches)
    import plans

    print(f"plans from {Path(plans.__file__).parent}")
    print(f"run creation (5-step plan), CPU/run ms {creation:.2f}")
    print(f"1-step run, priced answer call, CPU/run ms {priced:.2f}")
    return 0


def _setup_django(scratch: str) -> None:
    os.environ.update(
        AGENTSITE_SQLITE_PATH=str(Path(scratch) / "bench.sqlite3"),
        AGENTSITE_VAR_DIR=scratch,
        AGENTSITE_TOOL_MODULES="benchmarks.bench_tools",
        AGENTSITE_MODEL_BACKEND="offline",
        AGENTSITE_MODEL_CALLS_PER_MINUTE="0",
        AGENTSITE_AUTHOR_DAILY_USD="0",
        AGENTSITE_DEBUG="0",
        DJANGO_SETTINGS_MODULE="agentsite.settings",
    )
    os.environ.setdefault("AGENTSITE_SECRET_KEY", "benchmark-only-" + os.urandom(16).hex())
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _measure(batches: int) -> tuple[float, float]:
    """Median CPU (this thread) per run_create, and per advance_run with a priced answer."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from plans.models import ModelCall
    from plans.runtime.advance import advance_run
    from plans.services.runs import run_create

    author = get_user_model().objects.create_user("bookkeeping-bench")
    # The offline model at a real model's prices: its answer call is on record before it is made.
    prices = settings.AGENTSITE_MODEL_PRICES
    settings.AGENTSITE_MODEL_PRICES = {**prices, "offline": prices["claude-sonnet-5-5"]}
    one_step = {"steps": PLAN["steps"][:1]}
    for _ in range(5):  # warm up imports, statements, connections
        run = run_create(author=author, goal_text="bench", plan_data=one_step)
        advance_run(run.pk)
    (answer,) = ModelCall.objects.filter(run=run)
    if not answer.estimated_usd:
        raise SystemExit("the answer call was not priced: no row was written before it")
    creations, advances = [], []
    for _ in range(batches):
        started = time.thread_time()
        for _ in range(CREATIONS):
            run_create(author=author, goal_text="bench", plan_data=PLAN)
        creations.append((time.thread_time() - started) / CREATIONS)
        runs = [
            run_create(author=author, goal_text="bench", plan_data=one_step)
            for _ in range(PRICED_RUNS)
        ]
        started = time.process_time()  # the recorder commits on threads of its own too
        for run in runs:
            assert advance_run(run.pk) == "completed"
        advances.append((time.process_time() - started) / PRICED_RUNS)
    return statistics.median(creations) * 1000, statistics.median(advances) * 1000


if __name__ == "__main__":
    sys.exit(main())
