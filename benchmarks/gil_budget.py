"""How much Python per step the executor targets leave room for, on this machine.

A model executor with the real one's thread structure (a coordinator running Kahn's algorithm,
a pool of tool threads, a writer thread taking batches) but no database, events or checks:
instead each step costs a set amount of GIL-holding Python, shared among the three as the
real executor shares it. It runs the benchmark's own plans and prints their ratio to the
critical path at each amount, so a ratio of the real executor can be read as a CPU budget.

    ./dev bench budget
    ./dev bench budget --costs 0,50,100 --repeats 3
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.executor import DEFAULT_TARGET, SHAPES, TARGETS, Steps, critical_path_s

# Where the real executor's Python goes per step at 5 ms (thread CPU time, a profiling run):
# coordinator ~40%, tool thread ~15%, recorder thread ~45%.
COORDINATOR_SHARE, TOOL_SHARE, WRITER_SHARE = 0.40, 0.15, 0.45
POOL_THREADS = 64  # AGENTSITE_TOOL_THREADS, as the real executor has them
DEFAULT_COSTS = "0,40,80,120,160,240,320"


def hold_gil(us: float) -> None:
    """Run Python bytecode, so holding the GIL, for us microseconds."""
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def run_model(steps: Steps, cost_us: float) -> float:
    """Seconds the model executor takes for steps at cost_us of Python per step."""
    launch_us = completion_us = cost_us * COORDINATOR_SHARE / 2
    tool_us, writer_us = cost_us * TOOL_SHARE, cost_us * WRITER_SHARE
    work: queue.SimpleQueue = queue.SimpleQueue()
    done: queue.SimpleQueue = queue.SimpleQueue()
    writes: queue.SimpleQueue = queue.SimpleQueue()

    def tool_thread() -> None:
        while (item := work.get()) is not None:
            step_id, ms = item
            hold_gil(tool_us)
            time.sleep(ms / 1000)
            done.put(step_id)

    def writer_thread() -> None:
        while True:
            batch = [writes.get()]
            while not writes.empty():
                batch.append(writes.get())
            hold_gil(writer_us * sum(1 for item in batch if item is not None))
            if None in batch:
                return

    threads = [
        threading.Thread(target=tool_thread, name="budget-tool") for _ in range(POOL_THREADS)
    ]
    threads.append(threading.Thread(target=writer_thread, name="budget-writer"))
    for thread in threads:
        thread.start()
    ms = {s["id"]: s["args"]["ms"] for s in steps}
    waiting_on = {s["id"]: len(s["depends_on"]) for s in steps}
    dependants: dict[int, list[int]] = {s["id"]: [] for s in steps}
    for s in steps:
        for dependency in s["depends_on"]:
            dependants[dependency].append(s["id"])

    def launch(step_id: int) -> None:
        hold_gil(launch_us)
        work.put((step_id, ms[step_id]))

    started = time.perf_counter()
    for step_id, count in waiting_on.items():
        if count == 0:
            launch(step_id)
    for _ in steps:
        finished = done.get()
        hold_gil(completion_us)
        writes.put(finished)
        for dependant in dependants[finished]:
            waiting_on[dependant] -= 1
            if waiting_on[dependant] == 0:
                launch(dependant)
    wall = time.perf_counter() - started
    for _ in range(POOL_THREADS):
        work.put(None)
    writes.put(None)
    for thread in threads:
        thread.join()
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--costs", default=DEFAULT_COSTS, help="us of Python per step")
    parser.add_argument("--shapes", default="wide,layered,layered-random")
    args = parser.parse_args()
    costs = [float(cost) for cost in args.costs.split(",")]
    shapes = args.shapes.split(",")

    print(
        f"model executor: no database, no events; each step holds the GIL for the given time, "
        f"{COORDINATOR_SHARE:.0%} in the coordinator, {TOOL_SHARE:.0%} in its tool thread, "
        f"{WRITER_SHARE:.0%} in the writer; median of {args.repeats}\n"
    )
    print(f"{'us of Python per step':<22}" + "".join(f"{name:>16}" for name in shapes))
    targets = {name: TARGETS.get(name, DEFAULT_TARGET) for name in shapes}
    print(f"{'target':<22}" + "".join(f"{'<=' + format(targets[n], '.2f'):>16}" for n in shapes))
    plans = {}
    for name in shapes:
        build, _label, latency = SHAPES[name]
        steps = build(latency())
        plans[name] = (steps, critical_path_s(steps))
    for cost in costs:
        cells = []
        for name in shapes:
            steps, critical = plans[name]
            walls = [run_model(steps, cost) for _ in range(args.repeats)]
            ratio = statistics.median(walls) / critical
            cells.append(f"{ratio:.2f}{'' if ratio <= targets[name] else ' over'}")
        print(f"{cost:<22.0f}" + "".join(f"{cell:>16}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
