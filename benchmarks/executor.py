"""Executor benchmark: wall time against the critical path, and overhead per step.

Runs plans through the real executor (advance_run) with its real persistence (SQLite in WAL
mode, a fresh file) and event publishing (the in-memory channel layer). Not a test: it prints
medians and ratios for the README and the issue notes.

    ./dev bench                 # every shape, default repeats
    ./dev bench --repeats 3 --shapes diamond,wide
    ./dev bench --pure          # the same with a tool declared pure
    ./dev bench --previews      # a destructive call's launch re-check: with a preview vs none
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Steps = list[dict]


def diamond(ms: Callable[[int], float]) -> Steps:
    deps = {1: [], 2: [], 3: [1, 2], 4: [3], 5: [3]}
    return [_step(i, d, ms(i)) for i, d in deps.items()]


def wide(ms: Callable[[int], float]) -> Steps:
    steps = [_step(i, [], ms(i)) for i in range(1, 51)]
    return [*steps, _step(51, list(range(1, 51)), ms(51))]


def chain(ms: Callable[[int], float]) -> Steps:
    return [_step(i, [i - 1] if i > 1 else [], ms(i)) for i in range(1, 51)]


def layered(ms: Callable[[int], float], *, layers: int = 20, width: int = 25) -> Steps:
    rng = random.Random(20261130)
    steps: Steps = []
    for layer in range(layers):
        for k in range(width):
            step_id = layer * width + k + 1
            above = range((layer - 1) * width + 1, layer * width + 1) if layer else range(0)
            deps = sorted(rng.sample(list(above), rng.randint(1, 3))) if layer else []
            steps.append(_step(step_id, deps, ms(step_id)))
    return steps


# bench_sleep is impure, as a tool is unless it says otherwise: each call starts once its
# step_started is committed. --pure runs bench_sleep_pure, whose calls do not wait.
TOOL = "bench_sleep"


def _step(step_id: int, deps: list[int], ms: float) -> dict:
    args = {"ms": ms, "tag": step_id}
    return {"id": step_id, "tool": TOOL, "args": args, "depends_on": deps}


def fixed(ms: float) -> Callable[[int], float]:
    return lambda _step_id: ms


def random_between(low: int, high: int) -> Callable[[int], float]:
    rng = random.Random(7)
    table: dict[int, float] = {}
    return lambda step_id: table.setdefault(step_id, float(rng.randint(low, high)))


SHAPES: dict[str, tuple[Callable[..., Steps], str, Callable[[], Callable[[int], float]]]] = {
    "diamond": (diamond, "5-step diamond at 50 ms", lambda: fixed(50)),
    "wide": (wide, "50 independent + join at 50 ms", lambda: fixed(50)),
    "chain": (chain, "chain of 50 at 50 ms", lambda: fixed(50)),
    "layered": (layered, "layered 500 (20x25) at 5 ms", lambda: fixed(5)),
    "layered-random": (layered, "layered 500 at random 1-9 ms", lambda: random_between(1, 9)),
}
TARGETS = {"layered": 1.30}
DEFAULT_TARGET = 1.10
OVERHEAD_TARGET_US = 500


def setup_django(db_dir: str) -> None:
    os.environ["AGENTSITE_SQLITE_PATH"] = str(Path(db_dir) / "bench.sqlite3")
    os.environ["AGENTSITE_VAR_DIR"] = db_dir
    os.environ["AGENTSITE_TOOL_MODULES"] = "benchmarks.bench_tools"
    os.environ["AGENTSITE_MODEL_BACKEND"] = "offline"
    # Hundreds of runs a minute would hit the shared model-call rate limit, which is not the
    # executor: lift it here, as the plan-size cap is lifted.
    os.environ["AGENTSITE_MODEL_CALLS_PER_MINUTE"] = "0"
    # As deployed: with DEBUG on, Django also logs and re-quotes every query it runs.
    os.environ["AGENTSITE_DEBUG"] = "0"
    os.environ.setdefault("AGENTSITE_SECRET_KEY", "benchmark-only-" + os.urandom(16).hex())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    _time_model_calls()


# Seconds each model call of the current run spent inside the model (the offline one here).
_model_seconds: list[float] = []


def _time_model_calls() -> None:
    """Measure the model's own time to the microsecond (ModelCall.latency_ms is whole ms)."""
    from plans.llm.offline import OfflineModel

    complete = OfflineModel.complete

    def timed(self: OfflineModel, *args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return complete(self, *args, **kwargs)
        finally:
            _model_seconds.append(time.perf_counter() - started)

    OfflineModel.complete = timed  # type: ignore[method-assign]


def run_once(steps: Steps) -> tuple[float, float, float]:
    """Seconds of the run: (wall, inside the answer model, CPU of every thread)."""
    from django.contrib.auth import get_user_model

    from plans.models import ModelCall, Run, RunEvent
    from plans.runtime.advance import advance_run

    user, _ = get_user_model().objects.get_or_create(username="bench")
    from plans.services.runs import run_create

    run = run_create(
        author=user,
        goal_text="benchmark",
        plan_data={"steps": steps},
        max_parallel_steps=len(steps),
        lift_plan_step_cap=True,
    )
    _model_seconds.clear()
    cpu_started, started = time.process_time(), time.perf_counter()
    status = advance_run(run.pk)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    answer_s = sum(_model_seconds)
    assert ModelCall.objects.filter(run=run, purpose="answer").count() == len(_model_seconds) == 1
    seqs = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)), "event seq is not contiguous"
    assert Run.objects.get(pk=run.pk).status == "completed", status
    return wall, answer_s, cpu


PREVIEW_STEPS = 5  # destructive steps in one round, each approved, then launched together
PREVIEW_TOOL_MS = 50.0


def resume_once(tool: str) -> tuple[float, list[float]]:
    """A run parked on PREVIEW_STEPS destructive steps, approved, then resumed: (the resumed
    advance's wall, minus its answer model; each call's duration as the executor timed it)."""
    from django.contrib.auth import get_user_model

    from plans.models import Approval, Run, ToolCall
    from plans.runtime.advance import advance_run
    from plans.services.approvals import approvals_decide
    from plans.services.runs import run_create

    user, _ = get_user_model().objects.get_or_create(username="bench")
    steps = [
        {"id": i, "tool": tool, "args": {"ms": PREVIEW_TOOL_MS, "tag": i}, "depends_on": []}
        for i in range(1, PREVIEW_STEPS + 1)
    ]
    run = run_create(author=user, goal_text="benchmark", plan_data={"steps": steps})
    assert advance_run(run.pk) == Run.Status.AWAITING_APPROVAL
    approvals_decide(
        approvals=list(Approval.objects.filter(run=run)),
        reviewer=None,
        approve=True,
        via="cli",
        resume=False,
    )
    _model_seconds.clear()
    started = time.perf_counter()
    status = advance_run(run.pk)
    wall = time.perf_counter() - started - sum(_model_seconds)
    assert status == Run.Status.COMPLETED, status
    calls = list(ToolCall.objects.filter(run=run).values_list("duration_ms", flat=True))
    assert len(calls) == PREVIEW_STEPS
    return wall, calls


def previews_main(repeats: int) -> None:
    """The added latency per destructive call from the re-check at launch, against none."""
    for tool in ("bench_effect", "bench_effect_previewed"):  # warm up both
        resume_once(tool)
    walls: dict[str, list[float]] = {"bench_effect": [], "bench_effect_previewed": []}
    calls: dict[str, list[float]] = {"bench_effect": [], "bench_effect_previewed": []}
    for _ in range(repeats):  # alternating, so a drift in the machine's speed hits both
        for tool in walls:
            wall, durations = resume_once(tool)
            walls[tool].append(wall)
            calls[tool] += durations
    none, previewed = (statistics.median(calls[t]) for t in walls)
    none_wall, previewed_wall = (statistics.median(walls[t]) for t in walls)
    print(
        f"{PREVIEW_STEPS} destructive calls of {PREVIEW_TOOL_MS:g} ms in one round, approved, "
        f"then resumed; median of {repeats} resumes ({repeats * PREVIEW_STEPS} calls each)\n"
    )
    print(f"{'':<34}{'no preview':>12}{'preview':>12}{'added':>10}{'ratio':>8}")
    print(
        f"{'per destructive call (ms)':<34}{none:>12.2f}{previewed:>12.2f}"
        f"{previewed - none:>10.2f}{previewed / none:>8.3f}"
    )
    print(
        f"{'resumed advance, wall (ms)':<34}{none_wall * 1000:>12.1f}{previewed_wall * 1000:>12.1f}"
        f"{(previewed_wall - none_wall) * 1000:>10.1f}{previewed_wall / none_wall:>8.3f}"
    )
    print(
        "\nper destructive call = the ToolCall's duration, timed on its tool thread from before "
        "the re-check to the\ntool's return; the preview hook here reads nothing, so added is "
        "the machinery's own cost (a hop to another tool\nthread and back, the breaker check); "
        "a real hook adds its own read. The ToolPreview row goes with the run's next batch."
    )


def critical_path_s(steps: Steps) -> float:
    from plans.engine import Plan, PlanStep, critical_path

    plan = Plan(
        steps=tuple(
            PlanStep(id=s["id"], tool=s["tool"], args=s["args"], depends_on=tuple(s["depends_on"]))
            for s in steps
        )
    )
    return critical_path(plan, {s["id"]: s["args"]["ms"] / 1000 for s in steps})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--pure", action="store_true", help="steps of a tool declared pure")
    parser.add_argument(
        "--previews",
        action="store_true",
        help="only the added latency per destructive call from the preview's re-check at launch",
    )
    args = parser.parse_args()
    global TOOL
    TOOL = "bench_sleep_pure" if args.pure else "bench_sleep"

    with tempfile.TemporaryDirectory(prefix="agentsite-bench-") as db_dir:
        setup_django(db_dir)
        print(
            f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, SQLite WAL in {db_dir}, DEBUG off"
        )
        print(
            f"median of {args.repeats} runs; wall = advance_run() minus the time spent inside "
            "the (offline) answer model\n"
        )
        for _ in range(3):  # warm up imports, connections, the registry, the pool, caches
            run_once(diamond(fixed(0)))
        if args.previews:
            previews_main(args.repeats)
            return 0
        from plans.runtime.worker import gc_tune_for_serving

        gc_tune_for_serving()  # as `manage.py serve` and `run_worker` do once started
        fixed_s = statistics.median(
            wall - answer_s for wall, answer_s, _ in (run_once([_step(1, [], 0)]) for _ in range(9))
        )
        print(
            f"per-run fixed cost (a 1-step plan at 0 ms: lease, loading, answer bookkeeping, "
            f"final commit): {fixed_s * 1000:.1f} ms\n"
        )
        header = f"{'shape':<34}{'steps':>6}{'crit ms':>9}{'wall ms':>9}{'ratio':>7}{'target':>8}"
        print(header + f"{'overhead/step':>15}{'beyond fixed':>14}{'CPU/step':>11}")
        failures = 0
        for name in args.shapes.split(","):
            build, label, latency = SHAPES[name]
            for zero in (False, True):
                steps = build(fixed(0) if zero else latency())
                crit = critical_path_s(steps)
                walls, cpus = [], []
                for _ in range(args.repeats):
                    wall, answer_s, cpu = run_once(steps)
                    walls.append(wall - answer_s)
                    cpus.append(cpu - answer_s)
                median = statistics.median(walls)
                cpu_us = statistics.median(cpus) / len(steps) * 1e6
                overhead_us = max(0.0, median - crit) / len(steps) * 1e6
                marginal_us = max(0.0, median - crit - fixed_s) / len(steps) * 1e6
                shown = label.rsplit(" at ", 1)[0] + " at 0 ms" if zero else label
                if zero:
                    ok = overhead_us <= OVERHEAD_TARGET_US
                    ratio, target = "-", f"<={OVERHEAD_TARGET_US}us"
                else:
                    limit = TARGETS.get(name, DEFAULT_TARGET)
                    ok = median / crit <= limit
                    ratio, target = f"{median / crit:.2f}", f"<={limit:.2f}"
                failures += not ok
                print(
                    f"{shown:<34}{len(steps):>6}{crit * 1000:>9.1f}{median * 1000:>9.1f}"
                    f"{ratio:>7}{target:>8}{overhead_us:>12.0f} us{marginal_us:>11.0f} us"
                    f"{cpu_us:>8.0f} us{'' if ok else '  MISSED'}"
                )
        print(
            "\noverhead/step = (wall - critical path) / steps; beyond fixed also subtracts the "
            "per-run fixed cost.\nTargets use the all-in figures. CPU/step is the CPU time of "
            "every thread during the run, per step;\n`./dev bench budget` tells how much Python "
            "per step the targets leave room for."
        )
        print("all targets met" if not failures else f"{failures} target(s) missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
