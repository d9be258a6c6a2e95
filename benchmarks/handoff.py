"""Hand-off benchmark: from a reviewer's approval to the parked step starting on a worker.

Each sample parks a run on a destructive step, lets the workers go idle, then approves it
through plans.services.approvals.approval_decide (what a reviewer's click calls) and measures
until the worker has started the step (Step.started_at, written just before the step_started
event). Modes:

    sqlite          the embedded default: SQLite, two worker threads in this process
    postgres        PostgreSQL, two separate `manage.py run_worker` processes (LISTEN/NOTIFY)
    postgres-poll   the same with --no-listen: polling alone, for comparison

It also reports the CPU the workers use while idle. PostgreSQL modes need
AGENTSITE_TEST_DATABASE_URL (./dev bench handoff starts a local server, as ./dev test does).

    ./dev bench handoff
    ./dev bench handoff --repeats 50 --modes sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS_MS = {"sqlite": 100, "postgres": 200}
LABELS = {
    "sqlite": "embedded (SQLite, in-process workers)",
    "postgres": "PostgreSQL, worker processes, LISTEN/NOTIFY",
    "postgres-poll": "PostgreSQL, worker processes, polling only",
}
TOOLS = "benchmarks.handoff_tools"
IDLE_SECONDS = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--modes", default="sqlite,postgres,postgres-poll")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child measuring one mode
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.repeats)))
        return 0

    modes = args.modes.split(",")
    if not os.environ.get("AGENTSITE_TEST_DATABASE_URL"):
        skipped = [m for m in modes if m.startswith("postgres")]
        modes = [m for m in modes if not m.startswith("postgres")]
        if skipped:
            print(f"skipping {', '.join(skipped)}: AGENTSITE_TEST_DATABASE_URL is not set\n")
    print(
        f"hand-off: reviewer's approval -> parked step started; {args.repeats} samples per mode, "
        "workers idle before each\n"
    )
    print(f"{'mode':<46}{'median':>9}{'p90':>9}{'max':>9}{'target':>10}{'idle CPU':>10}")
    missed = 0
    for mode in modes:
        child = subprocess.run(
            [sys.executable, __file__, "--one", mode, "--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        if child.returncode != 0:
            print(f"{LABELS[mode]:<46} failed:\n{child.stderr[-3000:]}")
            missed += 1
            continue
        result = json.loads(child.stdout.strip().splitlines()[-1])
        samples = sorted(result["samples_ms"])
        median = statistics.median(samples)
        p90 = samples[int(len(samples) * 0.9) - 1]
        target = TARGETS_MS.get(mode)
        ok = target is None or median <= target
        missed += not ok
        print(
            f"{LABELS[mode]:<46}{median:>6.1f} ms{p90:>6.1f} ms{samples[-1]:>6.1f} ms"
            f"{f'<={target} ms' if target else '-':>10}{result['idle_cpu_percent']:>9.2f}%"
            f"{'' if ok else '  MISSED'}"
        )
    print(
        f"\nidle CPU: the workers' CPU time (with their sweepers) over {IDLE_SECONDS:g} s "
        "with nothing to do, as a share of one core"
    )
    print("all targets met" if not missed else f"{missed} target(s) missed")
    return 0


def measure(mode: str, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="agentsite-handoff-") as var_dir:
        os.environ.update(
            AGENTSITE_VAR_DIR=var_dir,
            AGENTSITE_TOOL_MODULES=TOOLS,
            AGENTSITE_MODEL_BACKEND="offline",
            DJANGO_SETTINGS_MODULE="agentsite.settings",
        )
        database = None
        if mode.startswith("postgres"):
            database = create_database(os.environ["AGENTSITE_TEST_DATABASE_URL"])
            os.environ["AGENTSITE_DATABASE_URL"] = database["url"]
        try:
            return _measure(mode, repeats, var_dir)
        finally:
            if database:
                drop_database(database)


def _measure(mode: str, repeats: int, var_dir: str) -> dict:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    workers: list[subprocess.Popen] = []
    if mode == "sqlite":
        from plans.runtime.sweeper import start_sweeper_thread
        from plans.runtime.worker import start_worker_threads

        start_worker_threads(2, prefix="bench")
        start_sweeper_thread()
    else:
        extra = ["--no-listen"] if mode == "postgres-poll" else []
        for i in range(2):
            log = open(Path(var_dir, f"worker-{i}.log"), "w")  # noqa: SIM115
            workers.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "run_worker", "--threads", "2", *extra],
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        samples = [sample(i) for i in range(repeats + 2)][2:]  # the first two warm up
        idle = idle_cpu_percent(workers)
    finally:
        for process in workers:
            process.send_signal(signal.SIGTERM)
        for process in workers:
            process.wait(timeout=30)
    return {"samples_ms": samples, "idle_cpu_percent": idle}


def sample(i: int) -> float:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.utils import timezone
    from django_tasks_db.models import DBTaskResult

    from plans.models import Approval, Run, Step
    from plans.services.approvals import approval_decide
    from plans.services.runs import run_create, run_start

    users = get_user_model().objects
    author, _ = users.get_or_create(username="bench-author")
    reviewer, created = users.get_or_create(username="bench-reviewer")
    if created:
        reviewer.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    reviewer = users.get(pk=reviewer.pk)
    plan = {"steps": [{"id": 1, "tool": "handoff_mark", "args": {"label": f"sample {i}"}}]}
    run = run_create(author=author, goal_text="hand-off benchmark", plan_data=plan)
    run_start(run)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == Run.Status.AWAITING_APPROVAL)
    wait_for(lambda: not DBTaskResult.objects.exclude(status__in=["SUCCESSFUL", "FAILED"]).exists())
    # Idle workers, approved at a random moment of their poll cycle.
    time.sleep(random.uniform(0.2, 1.2))
    approval = Approval.objects.get(run=run)
    clicked = timezone.now()
    approval_decide(approval=approval, reviewer=reviewer, approve=True)
    step = Step.objects.filter(plan__run=run, step_id=1)
    started = wait_for(lambda: step.values_list("started_at", flat=True)[0])
    wait_for(lambda: Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED)
    return (started - clicked).total_seconds() * 1000


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError("gave up waiting")
        time.sleep(0.002)
    return value


def idle_cpu_percent(workers: list[subprocess.Popen]) -> float:
    """CPU used while idle, as a share of one core: this process (its worker threads and
    sweeper), or the worker processes together."""
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float:
        if not workers:
            return time.process_time()
        total = 0
        for process in workers:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks

    before = cpu_seconds()
    time.sleep(IDLE_SECONDS)
    return (cpu_seconds() - before) / IDLE_SECONDS * 100


def create_database(admin_url: str) -> dict:
    import psycopg

    name = f"agentsite_bench_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name}")
        connection.execute(f"CREATE DATABASE {name}")
    return {"admin_url": admin_url, "name": name, "url": admin_url.rsplit("/", 1)[0] + "/" + name}


def drop_database(database: dict) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(database["admin_url"], autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {database['name']} WITH (FORCE)")


if __name__ == "__main__":
    sys.exit(main())
