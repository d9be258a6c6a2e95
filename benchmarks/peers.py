"""Peers benchmark: the executor benchmark's shapes on agentsite, LangGraph and plain asyncio.

The same plans (benchmarks/executor.py's shapes: every step sleeps its latency) run on:
- agentsite: advance_run, durable (SQLite in WAL mode), as `./dev bench` runs it;
- LangGraph async: a StateGraph with a node per step and an edge per dependency, in memory;
- LangGraph with its durable SQLite checkpointer (AsyncSqliteSaver, durability="sync": each
  superstep is written before the next starts), the fair peer for a durable executor;
- plain asyncio: a task per step awaiting its dependencies, the floor.
The engines alternate run by run in one process (the order rotates each repeat), so a drift of
the machine's speed falls on all of them. Medians and agentsite's ratio to each peer:

    ./dev bench peers                       # every shape, at its latency and at 0 ms
    ./dev bench peers --shapes diamond,layered --repeats 3 --latency set

Needs the benchmark extra (`pip install '.[bench]'`: langgraph, langgraph-checkpoint-sqlite).
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import executor  # noqa: E402

Steps = list[dict]
ENGINES = ("agentsite", "langgraph-async", "langgraph-sqlite", "asyncio")
# agentsite's wall over each peer's must stay at or under 1.0: against the durable peer on every
# shape, against in-memory LangGraph where tools take 5 ms or more (issue 26).
TARGETS = {"langgraph-sqlite": 0.0, "langgraph-async": 5.0}


class State(TypedDict):
    results: Annotated[dict[int, float], operator.or_]


def langgraph_graph(steps: Steps, checkpointer: Any = None) -> Any:
    """The plan as a LangGraph StateGraph: a node per step, waiting for all its dependencies."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    has_dependants = {dep for step in steps for dep in step["depends_on"]}
    for step in steps:
        name = f"s{step['id']}"
        graph.add_node(name, _node(step["id"], step["args"]["ms"]))
        deps = [f"s{dep}" for dep in step["depends_on"]]
        # A list of sources waits for all of them; a single one is a plain edge.
        graph.add_edge(deps if len(deps) > 1 else deps[0] if deps else START, name)
        if step["id"] not in has_dependants:
            graph.add_edge(name, END)
    return graph.compile(checkpointer=checkpointer)


def _node(step_id: int, ms: float) -> Callable[[State], Any]:
    async def node(state: State) -> dict[str, Any]:
        if ms > 0:
            await asyncio.sleep(ms / 1000)
        return {"results": {step_id: ms}}

    return node


async def langgraph_run(graph: Any, steps: Steps, *, durable: bool) -> int:
    config: dict[str, Any] = {"recursion_limit": len(steps) + 10}
    kwargs: dict[str, Any] = {}
    if durable:
        config["configurable"] = {"thread_id": uuid.uuid4().hex}
        kwargs["durability"] = "sync"
    out = await graph.ainvoke({"results": {}}, config, **kwargs)
    return len(out["results"])


async def asyncio_run(steps: Steps) -> int:
    """A task per step that awaits its dependencies' tasks, then sleeps its latency."""
    tasks: dict[int, asyncio.Task[None]] = {}
    done: dict[int, float] = {}

    async def one(step: dict) -> None:
        for dep in step["depends_on"]:
            await tasks[dep]
        ms = step["args"]["ms"]
        if ms > 0:
            await asyncio.sleep(ms / 1000)
        done[step["id"]] = ms

    for step in steps:  # every shape lists a step after its dependencies
        tasks[step["id"]] = asyncio.ensure_future(one(step))
    await asyncio.gather(*tasks.values())
    return len(done)


class Peers:
    """The engines, each able to run a shape once and say its wall and CPU seconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, db_dir: str) -> None:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        self.loop = loop
        self._saver_cm = AsyncSqliteSaver.from_conn_string(str(Path(db_dir) / "langgraph.sqlite"))
        self.saver = loop.run_until_complete(self._saver_cm.__aenter__())
        self.graphs: dict[str, Any] = {}

    def close(self) -> None:
        self.loop.run_until_complete(self._saver_cm.__aexit__(None, None, None))

    def prepare(self, steps: Steps) -> None:
        """Build each peer's graph for these steps (not timed, as creating a run is not)."""
        self.graphs = {
            "langgraph-async": langgraph_graph(steps),
            "langgraph-sqlite": langgraph_graph(steps, checkpointer=self.saver),
        }

    def run(self, engine: str, steps: Steps) -> tuple[float, float]:
        if engine == "agentsite":
            wall, answer_s, cpu = executor.run_once(steps)
            # As ./dev bench: the time inside the (offline) answer model is not the executor's.
            return wall - answer_s, cpu - answer_s
        if engine == "asyncio":
            coro = asyncio_run(steps)
        else:
            coro = langgraph_run(self.graphs[engine], steps, durable=engine == "langgraph-sqlite")
        cpu_started, started = time.process_time(), time.perf_counter()
        ran = self.loop.run_until_complete(coro)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        if ran != len(steps):
            raise SystemExit(f"{engine} ran {ran} of {len(steps)} steps")
        return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each engine per shape")
    parser.add_argument("--shapes", default=",".join(executor.SHAPES))
    parser.add_argument(
        "--latency",
        choices=("both", "set", "zero"),
        default="both",
        help="each shape at its tools' latency, at 0 ms, or both",
    )
    args = parser.parse_args()
    try:
        import langgraph  # noqa: F401
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # noqa: F401
    except ImportError as error:
        print(
            f"the peers benchmark needs the bench extra ({error}): pip install '.[bench]'",
            file=sys.stderr,
        )
        return 2
    unknown = [name for name in args.shapes.split(",") if name not in executor.SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; known: {', '.join(executor.SHAPES)}")

    from importlib.metadata import version

    with tempfile.TemporaryDirectory(prefix="agentsite-peers-") as db_dir:
        executor.setup_django(db_dir)
        loop = asyncio.new_event_loop()
        peers = Peers(loop, db_dir)
        try:
            rows = _measure(peers, args)
        finally:
            peers.close()
            loop.close()
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}; langgraph "
        f"{version('langgraph')}, langgraph-checkpoint-sqlite "
        f"{version('langgraph-checkpoint-sqlite')}"
    )
    print(
        f"median wall ms of {args.repeats} runs each, the engines alternating; agentsite's "
        "excludes the time inside its (offline) answer model\n"
    )
    _report(rows)
    return 0


Row = tuple[str, int, float, dict[str, list[float]], dict[str, list[float]], float]


def _measure(peers: Peers, args: argparse.Namespace) -> list[Row]:
    from plans.runtime.worker import gc_tune_for_serving

    for _ in range(3):  # warm up imports, connections, the registry, the pool, caches
        executor.run_once(executor.diamond(executor.fixed(0)))
    gc_tune_for_serving()  # as `manage.py serve` and `run_worker` do once started
    rows: list[Row] = []
    zeros = {"both": (False, True), "set": (False,), "zero": (True,)}[args.latency]
    for name in args.shapes.split(","):
        build, label, latency = executor.SHAPES[name]
        for zero in zeros:
            steps = build(executor.fixed(0) if zero else latency())
            shown = label.rsplit(" at ", 1)[0] + " at 0 ms" if zero else label
            print(f"{shown}...", file=sys.stderr, flush=True)
            peers.prepare(steps)
            for engine in ENGINES:  # warm each engine on this very shape once
                peers.run(engine, steps)
            walls: dict[str, list[float]] = {engine: [] for engine in ENGINES}
            cpus: dict[str, list[float]] = {engine: [] for engine in ENGINES}
            for repeat in range(args.repeats):
                turn = repeat % len(ENGINES)
                for engine in ENGINES[turn:] + ENGINES[:turn]:
                    wall, cpu = peers.run(engine, steps)
                    walls[engine].append(wall)
                    cpus[engine].append(cpu)
            min_ms = min(step["args"]["ms"] for step in steps)
            rows.append((shown, len(steps), executor.critical_path_s(steps), walls, cpus, min_ms))
    return rows


def _report(rows: list[Row]) -> None:
    short = dict(zip(ENGINES, ("agentsite", "LG async", "LG+SQLite", "asyncio"), strict=True))
    header = f"{'shape':<34}{'steps':>6}{'crit':>8}" + "".join(f"{short[e]:>11}" for e in ENGINES)
    print(header + "".join(f"{'/' + short[e]:>12}" for e in ENGINES[1:]))
    missed = []
    for shown, n_steps, crit, walls, _, min_ms in rows:
        medians = {engine: statistics.median(walls[engine]) for engine in ENGINES}
        cells = "".join(f"{medians[e] * 1000:>11.1f}" for e in ENGINES)
        ratios = ""
        for engine in ENGINES[1:]:
            ratio = medians["agentsite"] / medians[engine] if medians[engine] else float("inf")
            flag = " "
            if engine in TARGETS and min_ms >= TARGETS[engine] and ratio > 1.0:
                flag = "!"
                missed.append(f"{shown} vs {short[engine]} ({ratio:.2f}x)")
            ratios += f"{ratio:>11.2f}{flag}"
        print(f"{shown:<34}{n_steps:>6}{crit * 1000:>8.1f}{cells}{ratios}")
    names = "".join(f"{short[e]:>11}" for e in ENGINES)
    print(f"\n{'CPU per step, us (every thread)':<48}{names}")
    for shown, n_steps, _, _, cpus, _ in rows:
        cells = "".join(f"{statistics.median(cpus[e]) / n_steps * 1e6:>11.0f}" for e in ENGINES)
        print(f"{shown:<48}{cells}")
    print(
        "\n/X = agentsite's median wall over X's. Targets: <= 1.00 against LG+SQLite on every "
        "shape, and\nagainst LG async on shapes whose tools take 5 ms or more (! = missed)."
    )
    print("all targets met" if not missed else "missed: " + "; ".join(missed))


if __name__ == "__main__":
    sys.exit(main())
