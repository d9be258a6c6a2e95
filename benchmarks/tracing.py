"""Tracing's cost per step: runs with tracing off, and on with its collector down.

The same plans go through the real executor (as in benchmarks/executor.py), alternating
between no run observer and the OTLP tracer of plans.tracing exporting to a loopback port
nothing listens on (a dead collector), so both see the same machine load. Prints medians
of the per-step overhead (wall minus critical path, per step) and their ratio.

    ./dev bench tracing                # layered 500 steps at 0 ms and 5 ms, 9 pairs each
    ./dev bench tracing --repeats 15
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.executor import (  # noqa: E402 - after the path is set
    critical_path_s,
    diamond,
    fixed,
    layered,
    run_once,
    setup_django,
)

TARGET_RATIO = 1.10


def dead_endpoint() -> str:
    """An OTLP/HTTP endpoint on loopback where nothing listens (the port was just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = dead_endpoint()
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-") as db_dir:
        setup_django(db_dir)
        from plans.runtime.telemetry import set_run_observer
        from plans.runtime.worker import gc_tune_for_serving
        from plans.tracing import tracing_configured
        from plans.tracing.spans import otlp_tracer

        assert tracing_configured()
        tracer = otlp_tracer()
        for observer in (None, tracer, None, tracer):  # warm both paths
            set_run_observer(observer)
            run_once(diamond(fixed(0)))
        gc_tune_for_serving()
        endpoint = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
        print(
            f"tracing off vs on with the collector down ({endpoint} refuses connections); "
            f"median of {args.repeats} alternating pairs\n"
        )
        print(f"{'shape':<30}{'steps':>6}{'off us/step':>13}{'on us/step':>12}{'ratio':>7}")
        failures = 0
        for label, ms in (("layered 500 at 0 ms", 0), ("layered 500 at 5 ms", 5)):
            steps = layered(fixed(ms))
            crit = critical_path_s(steps)
            per_step: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for traced in (False, True):
                    set_run_observer(tracer if traced else None)
                    wall, answer_s, _cpu = run_once(steps)
                    per_step[traced].append(max(0.0, wall - answer_s - crit) / len(steps) * 1e6)
            set_run_observer(None)
            off, on = statistics.median(per_step[False]), statistics.median(per_step[True])
            ratio = on / off if off else float("inf")
            ok = ratio <= TARGET_RATIO
            failures += not ok
            print(
                f"{label:<30}{len(steps):>6}{off:>13.0f}{on:>12.0f}{ratio:>7.2f}"
                + ("" if ok else f"  MISSED (target <= {TARGET_RATIO:.2f})")
            )
        print(f"\nspans dropped unbuilt while the collector was down: {tracer.dropped:,}")
        tracer.shutdown()
        print(f"\ntarget: on/off <= {TARGET_RATIO:.2f} per step")
        print("all targets met" if not failures else f"{failures} target(s) missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
