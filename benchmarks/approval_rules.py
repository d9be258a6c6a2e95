"""What approval rules cost per gated call: matching the demo shop's rules (the engine's
call_match, no database), in microseconds, median of repeats.

    ./dev bench rules
    ./dev bench rules --calls 20000 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plans.demo import approval_rules as demo
from plans.engine.approval_rules import Call, call_match, rules_in

CASES = {
    "approved by a rule (2nd rule)": {"order_id": "A-1001", "amount_inr": 800},
    "two reviewers (3rd rule)": {"order_id": "A-1002", "amount_inr": 60_000},
    "no rule matches (all 4 tried)": {"order_id": "A-1001", "amount_inr": 2_000},
}


def per_call_us(rules, args, calls: int) -> float:
    call = Call(
        tool="issue_refund",
        args={**args, "reason": "damaged"},
        author="alice",
        author_groups=frozenset({"authors"}),
        tool_meta={"destructive": True, "pure": False, "server": "", "description": "refund"},
    )
    started = time.perf_counter()
    for _ in range(calls):
        call_match(rules, call)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    rules = rules_in(vars(demo), demo.__name__)
    print(f"call_match over the demo shop's {len(rules)} rules, {options.calls:,} calls each:")
    for name, args in CASES.items():
        runs = [per_call_us(rules, args, options.calls) for _ in range(options.repeats)]
        print(f"  {name}: {statistics.median(runs):.1f} µs per call (median of {len(runs)})")


if __name__ == "__main__":
    main()
