"""`./dev bench peers`: each peer runs the whole plan in dependency order, and the command
prints every engine's figures and agentsite's ratios (plumbing only: no timing is asserted)."""

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.executor import diamond, fixed, layered

pytest.importorskip("langgraph", reason="the bench extra is not installed: pip install '.[bench]'")
pytest.importorskip(
    "langgraph.checkpoint.sqlite.aio",
    reason="the bench extra is not installed: pip install '.[bench]'",
)

from benchmarks import peers

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("durable", [False, True])
def test_the_langgraph_peer_runs_each_step_once_after_all_its_dependencies(tmp_path, durable):
    steps = diamond(fixed(1))
    order: list[int] = []

    def noting(step_id, ms):
        async def node(state):
            assert all(dep in state["results"] for dep in deps[step_id]), step_id
            order.append(step_id)
            return {"results": {step_id: ms}}

        return node

    deps = {step["id"]: step["depends_on"] for step in steps}

    async def go():
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "lg.sqlite")) as saver:
            graph = peers.langgraph_graph(steps, checkpointer=saver if durable else None)
            return await peers.langgraph_run(graph, steps, durable=durable)

    original = peers._node
    peers._node = noting
    try:
        ran = asyncio.run(go())
    finally:
        peers._node = original

    assert ran == len(steps)
    assert sorted(order) == [1, 2, 3, 4, 5]
    assert order.index(3) > max(order.index(1), order.index(2))


def test_the_asyncio_peer_runs_every_step_of_a_layered_plan():
    assert asyncio.run(peers.asyncio_run(layered(fixed(0), layers=3, width=4))) == 12


def test_the_command_prints_each_engine_and_agentsites_ratios():
    done = subprocess.run(
        [sys.executable, "benchmarks/peers.py", "--shapes", "diamond", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("shape"))
    for column in ("agentsite", "LG async", "LG+SQLite", "asyncio", "/LG+SQLite", "/asyncio"):
        assert column in header
    for shape in ("5-step diamond at 50 ms", "5-step diamond at 0 ms"):
        row = next(line for line in lines if line.startswith(shape))  # the wall table's
        cells = row[34:].replace("!", "").split()
        assert len(cells) == 1 + 1 + 4 + 3  # steps, critical path, four engines, three ratios
        assert all(float(cell) > 0 for cell in cells[2:])
    assert "langgraph-checkpoint-sqlite" in done.stdout
