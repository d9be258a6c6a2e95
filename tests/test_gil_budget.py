"""The model executor behind `./dev bench budget` keeps to dependencies and cleans up."""

import threading

from benchmarks.executor import critical_path_s, diamond, fixed
from benchmarks.gil_budget import run_model


def test_the_model_executor_takes_at_least_the_critical_path_and_leaves_no_threads():
    steps = diamond(fixed(2))

    wall = run_model(steps, cost_us=20)

    assert wall >= critical_path_s(steps)  # three layers of 2 ms sleeps, one after another
    assert not [t for t in threading.enumerate() if t.name.startswith("budget-")]
