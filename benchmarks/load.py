"""Load benchmark: concurrent runs on one worker process, pages at a seeded size, events.

Not a test: it prints medians and percentiles against the targets of issue 18.

    ./dev bench load                          # every section; then on PostgreSQL and Redis
    ./dev bench load --runs 50,200 --seed 1000000 --sections concurrency,pages
    ./dev bench load --sections pages --seed 1000000 --db /tmp/1m.sqlite3   # seeded once, kept
    ./dev bench load --sections pages-postgres --seed 1000000 --pg-db agentsite_1m  # likewise
    ./dev bench load --sections events-redis,enqueue   # with .ci/services.sh's services

Pages: every list, filter, sort, deep keyset page, the inbox, a 500-step run's page, audit and
export and the costs page, through Django's test client in this process, on SQLite (pages) or
on PostgreSQL (pages-postgres: the server at AGENTSITE_TEST_DATABASE_URL, as .ci/services.sh
starts it; a fresh database dropped afterwards unless --pg-db names one to keep).

Events: an event's commit to a websocket client's receipt (embedded, or through Redis with a
worker process), with 1, 4 and 16 runs watched at once and with 10 sockets on one run; and to an
API event stream's client, for one run.
Enqueue: a run's enqueue to its start on idle workers, in process and in a separate worker
process (SQLite; PostgreSQL with events-redis).

Concurrency: N runs of a 5-step diamond (tools sleeping 50 ms, or 50-500 ms at random) whose
answer model call takes 1 s (the offline model with AGENTSITE_OFFLINE_LATENCY_MS), all started
at once on this process's workers at their default (2, as `./dev serve`). Per run: wall from
its start to its finish over its critical path (the tools' longest chain plus the model call),
the delay from its enqueue to its start, and the process's CPU per run.

Capacity: the same runs arriving steadily (N a second) with model calls of 1 s and of 10 s: the
most runs in flight at once, start delays, and the share of one core the arrivals ask for.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL_LATENCY_MS = 1000
DEFAULT_WORKERS = 2  # `manage.py serve --workers` default
# Events are measured with (runs watched at once, clients on each run, the client): one quiet
# run, 4 and 16 runs at once (a socket each), 10 sockets on one run (one render serves them
# all), and one run followed by the API's server-sent event stream instead.
EVENTS_SHAPES = (
    (1, 1, "socket"),
    (4, 1, "socket"),
    (16, 1, "socket"),
    (1, 10, "socket"),
    (1, 1, "stream"),
)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def setup_django(var_dir: str, db: str = "") -> None:
    os.environ["AGENTSITE_SQLITE_PATH"] = db or str(Path(var_dir) / "load.sqlite3")
    os.environ["AGENTSITE_VAR_DIR"] = var_dir
    os.environ["AGENTSITE_TOOL_MODULES"] = "benchmarks.bench_tools"
    os.environ["AGENTSITE_MODEL_BACKEND"] = "offline"
    os.environ["AGENTSITE_OFFLINE_LATENCY_MS"] = str(MODEL_LATENCY_MS)
    os.environ["AGENTSITE_MODEL_CALLS_PER_MINUTE"] = "0"
    os.environ["AGENTSITE_AUTHOR_DAILY_USD"] = "0"
    os.environ["AGENTSITE_DEBUG"] = "0"
    os.environ.setdefault("AGENTSITE_SECRET_KEY", "benchmark-only-" + os.urandom(16).hex())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    logging.getLogger("plans.runtime.worker").setLevel(logging.WARNING)
    logging.getLogger("django.tasks").setLevel(logging.WARNING)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def diamond(tool_ms: Callable[[], float]) -> list[dict]:
    deps = {1: [], 2: [], 3: [1, 2], 4: [3], 5: [3]}
    return [
        {"id": i, "tool": "bench_sleep", "args": {"ms": tool_ms(), "tag": i}, "depends_on": d}
        for i, d in deps.items()
    ]


def critical_path_s(steps: list[dict], model_ms: float = MODEL_LATENCY_MS) -> float:
    from plans.engine import Plan, PlanStep, critical_path

    plan = Plan(
        steps=tuple(
            PlanStep(id=s["id"], tool=s["tool"], args=s["args"], depends_on=tuple(s["depends_on"]))
            for s in steps
        )
    )
    tools = critical_path(plan, {s["id"]: s["args"]["ms"] / 1000 for s in steps})
    return tools + model_ms / 1000  # the answer's model call follows the last step


def concurrent_runs(count: int, tool_ms: Callable[[], float]) -> dict[str, float]:
    """Start `count` runs at once; wait for all; per-run ratios, start delays, CPU per run."""
    from django.contrib.auth import get_user_model

    from plans.models import Run
    from plans.services.runs import run_create, run_start

    author, _ = get_user_model().objects.get_or_create(username="load-bench")
    plans = [diamond(tool_ms) for _ in range(count)]
    runs = [
        run_create(author=author, goal_text="load benchmark", plan_data={"steps": steps})
        for steps in plans
    ]
    enqueued: dict[int, float] = {}
    cpu_started = time.process_time()
    for run in runs:
        enqueued[run.pk] = time.time()
        run_start(run)
    ids = [run.pk for run in runs]
    deadline = time.monotonic() + 120 + count
    while Run.objects.filter(pk__in=ids, finished_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} runs did not finish in time")
        time.sleep(0.05)
    cpu = time.process_time() - cpu_started
    done = {r.pk: r for r in Run.objects.filter(pk__in=ids)}
    statuses = {r.status for r in done.values()}
    assert statuses == {"completed"}, statuses
    ratios, delays, totals = [], [], []
    for run, steps in zip(runs, plans, strict=True):
        row = done[run.pk]
        assert row.started_at and row.finished_at
        crit = critical_path_s(steps)
        ratios.append((row.finished_at - row.started_at).total_seconds() / crit)
        delays.append(row.started_at.timestamp() - enqueued[run.pk])
        totals.append((row.finished_at.timestamp() - enqueued[run.pk]) / crit)
    return {
        "ratio_p50": statistics.median(ratios),
        "ratio_p95": percentile(ratios, 0.95),
        "total_p95": percentile(totals, 0.95),
        "delay_p50_ms": statistics.median(delays) * 1000,
        "delay_p95_ms": percentile(delays, 0.95) * 1000,
        "cpu_ms_per_run": cpu / count * 1000,
    }


def arrivals(count: int, per_s: float, model_ms: float, tool_ms: float) -> dict[str, float]:
    """`count` runs arriving `per_s` a second with model calls of `model_ms`: the run's ratio
    over its critical path, its start delay, the most runs in flight at once, CPU per run."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from plans.models import Run
    from plans.services.runs import run_create, run_start

    settings.AGENTSITE_OFFLINE_LATENCY_MS = model_ms
    author, _ = get_user_model().objects.get_or_create(username="load-bench")
    plans = [diamond(lambda: tool_ms) for _ in range(count)]
    runs = [
        run_create(author=author, goal_text="load benchmark", plan_data={"steps": steps})
        for steps in plans
    ]
    enqueued: dict[int, float] = {}
    cpu_started = time.process_time()
    first = time.monotonic()
    for index, run in enumerate(runs):
        due = first + index / per_s
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        enqueued[run.pk] = time.time()
        run_start(run)
    ids = [run.pk for run in runs]
    deadline = time.monotonic() + 120 + count + model_ms / 1000 * 3
    while Run.objects.filter(pk__in=ids, finished_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} runs did not finish in time")
        time.sleep(0.05)
    cpu = time.process_time() - cpu_started
    settings.AGENTSITE_OFFLINE_LATENCY_MS = MODEL_LATENCY_MS
    done = {r.pk: r for r in Run.objects.filter(pk__in=ids)}
    assert {r.status for r in done.values()} == {"completed"}
    ratios, delays, spans = [], [], []
    for run, steps in zip(runs, plans, strict=True):
        row = done[run.pk]
        assert row.started_at and row.finished_at
        ratios.append(
            (row.finished_at - row.started_at).total_seconds() / critical_path_s(steps, model_ms)
        )
        delays.append(row.started_at.timestamp() - enqueued[run.pk])
        spans.append((row.started_at.timestamp(), row.finished_at.timestamp()))
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    in_flight = peak = 0
    for _, step in edges:
        in_flight += step
        peak = max(peak, in_flight)
    return {
        "ratio_p95": percentile(ratios, 0.95),
        "delay_p50_ms": statistics.median(delays) * 1000,
        "delay_p95_ms": percentile(delays, 0.95) * 1000,
        "peak": peak,
        "cpu_ms_per_run": cpu / count * 1000,
    }


def section_capacity(count: int) -> None:
    """Runs arriving steadily rather than at once: how many one process keeps in flight."""
    workers_started()
    print(
        f"{count} 5-step runs (tools 50 ms) arriving steadily on one process, "
        f"{DEFAULT_WORKERS} worker slots"
    )
    print(
        f"{'model call':>11} {'arrivals/s':>11} {'peak in flight':>15} {'run/crit p95':>13}"
        f" {'start delay p50':>16} {'p95':>8} {'CPU/run':>9} {'CPU share':>10}"
    )
    arrivals(5, 100, 0, 50.0)  # warm up
    for model_ms, per_s in ((1000, 50), (1000, 100), (10_000, 20), (10_000, 40)):
        f = arrivals(count, per_s, model_ms, 50.0)
        # The share of one core the arrivals ask for: above ~1 the interpreter is the bound.
        share = per_s * f["cpu_ms_per_run"] / 1000
        print(
            f"{model_ms / 1000:>10.0f}s {per_s:>11} {f['peak']:>15.0f} {f['ratio_p95']:>13.2f}"
            f" {f['delay_p50_ms']:>13.0f} ms {f['delay_p95_ms']:>5.0f} ms"
            f" {f['cpu_ms_per_run']:>6.1f} ms {share:>10.2f}"
        )
    print(
        "CPU share: arrivals/s x CPU per run, in cores. Under the GIL one process computes on\n"
        "about one core, so a start delay stays small while the share is under ~1, whatever the\n"
        "number in flight: runs waiting on their model call hold no worker slot.\n"
    )


_workers: list = []


def workers_started() -> None:
    """This process's worker slots at their default, started once for every section."""
    from plans.runtime.worker import gc_tune_for_serving, start_worker_threads

    if not _workers:
        gc_tune_for_serving()  # as `manage.py serve` and `run_worker` do once started
        _workers.extend(start_worker_threads(DEFAULT_WORKERS, prefix="load", listen=False))


def section_concurrency(counts: list[int]) -> None:
    workers_started()
    print(
        f"concurrent 5-step diamond runs, answer model {MODEL_LATENCY_MS} ms, "
        f"{DEFAULT_WORKERS} worker slots (the default), one process"
    )
    print(
        f"{'runs':>6} {'tools':>11} {'run/crit p50':>13} {'p95':>6} {'(enq->end)/crit p95':>20}"
        f" {'start delay p50':>16} {'p95':>8} {'CPU/run':>9} {'N x CPU/run':>12}"
    )
    concurrent_runs(5, lambda: 50.0)  # warm up
    rng = random.Random(18)
    for count in counts:
        for label, tool_ms in (
            ("50 ms", lambda: 50.0),
            ("50-500 ms", lambda: float(rng.randint(50, 500))),
        ):
            f = concurrent_runs(count, tool_ms)
            print(
                f"{count:>6} {label:>11} {f['ratio_p50']:>13.2f} {f['ratio_p95']:>6.2f}"
                f" {f['total_p95']:>20.2f} {f['delay_p50_ms']:>13.0f} ms"
                f" {f['delay_p95_ms']:>5.0f} ms {f['cpu_ms_per_run']:>6.1f} ms"
                f" {count * f['cpu_ms_per_run'] / 1000:>10.2f} s"
            )
    print(
        "targets (200 runs, tools 50 ms): run/crit <= 1.2, start delay p95 <= 100 ms\n"
        "run/crit: the run's start to its finish over its critical path (tools + model call);\n"
        "(enq->end)/crit also counts the wait to start. CPU/run: this process's CPU / runs.\n"
        "N x CPU/run: the interpreter time the burst needs; under the GIL one process has about\n"
        "one core of it, so the last of N runs arriving at once starts about that late.\n"
    )


BENCH_AUTHOR = "load-bench"
BIG_RUN_GOAL = "load benchmark: a 500-step run"
BIG_RUN_STEPS = 500
PAGE_TARGET_MS = {"sqlite": 300, "postgresql": 150}


def seeded(count: int) -> int:
    """Seed `count` runs (manage.py seed_runs), unless the database holds that many already."""
    from django.core.management import call_command

    from plans.models import Run

    have = Run.objects.count()
    if have >= count:
        print(f"seeded size: {have:,} runs (seeded before)")
        return have
    started = time.monotonic()
    call_command(
        "seed_runs",
        str(count - have),
        "--authors",
        "20",
        "--days",
        "365",
        "--seed",
        "18",
        stdout=open(os.devnull, "w"),  # noqa: SIM115
    )
    print(
        f"seeded {count - have:,} runs in {time.monotonic() - started:.0f} s (manage.py seed_runs)"
    )
    return Run.objects.count()


def big_run_id() -> int:
    """A finished run of 500 steps (made once per database), for the audit and export pages."""
    from django.contrib.auth import get_user_model

    from plans.models import Run
    from plans.runtime.advance import advance_run
    from plans.services.runs import run_create

    author, _ = get_user_model().objects.get_or_create(username=BENCH_AUTHOR)
    existing = Run.objects.filter(goal__author=author, goal__text=BIG_RUN_GOAL).first()
    if existing:
        return existing.pk
    steps = [
        # Ten chains of fifty: rounds of ten steps, as a wide plan runs.
        {"id": i, "tool": "bench_sleep", "args": {"ms": 0, "tag": i}, "depends_on": []}
        if i <= 10
        else {"id": i, "tool": "bench_sleep", "args": {"ms": 0, "tag": i}, "depends_on": [i - 10]}
        for i in range(1, BIG_RUN_STEPS + 1)
    ]
    run = run_create(
        author=author,
        goal_text=BIG_RUN_GOAL,
        plan_data={"steps": steps},
        lift_plan_step_cap=True,
    )
    advance_run(run.pk)
    return run.pk


def page_urls() -> list[tuple[str, str]]:
    """(label, URL) for every list, filter, sort, deep page, the inbox, an audit and export."""
    from plans.models import Run
    from plans.selectors.runs import RUN_SORT_KEYS, RUN_SORTS, _cursor_write

    urls = [("runs, default", "/runs/")]
    urls += [(f"runs, sort={sort}", f"/runs/?sort={sort}") for sort in RUN_SORTS]
    urls += [
        (f"runs, status=completed sort={sort}", f"/runs/?status=completed&sort={sort}")
        for sort in RUN_SORTS
    ]
    urls.append(("runs, status=failed", "/runs/?status=failed"))
    urls.append(("runs, last 7 days", "/runs/?date_from=" + _days_ago(7)))
    author = Run.objects.values_list("goal__author__username", flat=True).first()
    urls.append(("runs, author (one of 20)", f"/runs/?author={author}"))
    urls.append(("runs, tool=book_flight", "/runs/?tool=book_flight"))
    total = Run.objects.count()
    for sort in ("-date", "-cost"):
        key = RUN_SORT_KEYS[sort]
        row = Run.objects.filter(experiment__isnull=True).order_by(*RUN_SORTS[sort])[total // 2]
        urls.append(
            (
                f"runs, sort={sort} deep (row {total // 2:,})",
                f"/runs/?sort={sort}&after=" + _cursor_write(row, key),
            )
        )
    urls.append(("runs, last page", "/runs/?last=1"))
    urls.append(("approvals inbox", "/approvals/"))
    seeded_run = (
        Run.objects.filter(status="completed")
        .exclude(goal__author__username=BENCH_AUTHOR)
        .order_by("-pk")
        .first()
    )
    urls.append((f"run page (seeded run {seeded_run.pk})", f"/runs/{seeded_run.pk}/"))
    urls.append((f"audit (seeded run {seeded_run.pk})", f"/runs/{seeded_run.pk}/audit/"))
    big = big_run_id()
    urls.append((f"run page ({BIG_RUN_STEPS}-step run {big})", f"/runs/{big}/"))
    urls.append((f"audit ({BIG_RUN_STEPS}-step run {big})", f"/runs/{big}/audit/"))
    urls.append((f"export ({BIG_RUN_STEPS}-step run {big})", f"/runs/{big}/export.json"))
    urls.append(("costs", "/costs/"))
    urls.append(("review analytics, 30 days", "/reviews/?days=30"))
    return urls


def _days_ago(days: int) -> str:
    from datetime import timedelta

    from django.utils import timezone

    return (timezone.localdate() - timedelta(days=days)).isoformat()


def section_pages(count: int, repeats: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    size = seeded(count)
    operator = get_user_model().objects.filter(username="load-operator").first()
    if operator is None:
        operator = get_user_model().objects.create_superuser("load-operator")
    client = Client()
    client.force_login(operator)
    urls = page_urls()
    database = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}.get(connection.vendor, "?")
    target = PAGE_TARGET_MS.get(connection.vendor, 0)
    print(
        f"pages at {size:,} runs on {database} ({connection.settings_dict['NAME']}); "
        "Django's test client in-process, no network"
    )
    print(f"{'page':<52}{'first ms':>9}{'p50 ms':>9}{'p95 ms':>9}{'CPU p50':>9}{'KB':>8}")
    over = []
    for label, url in urls:
        times, cpu = [], []
        body_size = 0
        for _ in range(repeats + 1):
            started, cpu_started = time.perf_counter(), time.process_time()
            response = client.get(url, secure=True)
            body = b"".join(response) if response.streaming else response.content
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - cpu_started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
            body_size = len(body)
        first, rest = times[0], times[1:]
        p95 = percentile(rest, 0.95)
        if p95 > target:
            over.append(label)
        print(
            f"{label:<52}{first:>9.0f}{statistics.median(rest):>9.0f}"
            f"{p95:>9.0f}{statistics.median(cpu[1:]):>9.0f}{body_size / 1024:>8.0f}"
            f"{'  over' if p95 > target else ''}"
        )
    print(
        "CPU p50: this process's CPU per request (the SQLite queries included; PostgreSQL's own"
        " work not), which a loaded machine inflates less than wall times."
    )
    print(
        f"target: every page p95 <= {target} ms on {database} at 1M runs "
        "(<= 300 ms on SQLite, <= 150 ms on PostgreSQL); "
        + (f"over it here: {len(over)} page(s)\n" if over else "every page within it here\n")
    )


def watch_run(
    url: str, origin: str, cookie: str, run_id: int, ready: threading.Barrier
) -> tuple[dict[int, float], dict[int, float]]:
    """A run page's socket, until its run finishes: when each seq's line was first received
    (time.time()), and when what it changed (the stated-seq marker that follows header, totals
    and rows) was."""
    import re

    from websockets.sync.client import connect

    from plans.models import RunEvent

    seq_re = re.compile(r'data-seq="(\d+)"')
    stated_re = re.compile(r'id="stated-seq" data-seq="(\d+)"')
    received: dict[int, float] = {}
    stated: dict[int, float] = {}
    with connect(
        url, origin=origin, additional_headers={"Cookie": cookie}, proxy=None, open_timeout=10
    ) as ws:
        ready.wait(30)
        finished = time.monotonic() + 60
        while time.monotonic() < finished:
            try:
                html = ws.recv(timeout=0.5)
            except TimeoutError:
                if RunEvent.objects.filter(run_id=run_id, kind="run_finished").exists():
                    break
                continue
            now = time.time()
            for seq in seq_re.findall(str(html)):
                received.setdefault(int(seq), now)
            for last in stated_re.findall(str(html)):
                for seq in received:
                    if seq <= int(last):
                        stated.setdefault(seq, now)
    return received, stated


def follow_stream(
    url: str, cookie: str, run_id: int, ready: threading.Barrier
) -> tuple[dict[int, float], dict[int, float]]:
    """The API's event stream of a run: when each seq was received (time.time()), to its end
    (and no changes apart: an event is all it sends)."""
    import json

    import httpx

    received: dict[int, float] = {}
    # As the proxy in front of a deployment (DEBUG off) says, or the request is sent to https.
    headers = {"Accept": "text/event-stream", "Cookie": cookie, "X-Forwarded-Proto": "https"}
    with httpx.stream("GET", url, headers=headers, timeout=60, trust_env=False) as response:
        assert response.status_code == 200, response.status_code
        ready.wait(30)
        for line in response.iter_lines():
            if line.startswith("data: "):
                received.setdefault(json.loads(line[6:])["seq"], time.time())
    return received, {}


def process_cpu_s(pid: int) -> float:
    """A process's CPU seconds so far, with its waited-for children's (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def section_events(var_dir: str, rounds: int, *, redis: bool = False) -> None:
    """Event commit (RunEvent.at) to a websocket client's receipt, through `manage.py serve`
    (embedded: in-process workers, in-memory layer) or, with redis, `serve --workers 0` and a
    `run_worker` process on PostgreSQL with the Redis channel layer. Each round starts the
    runs of one of EVENTS_SHAPES at once, each watched by its sockets."""
    import socket
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from plans.models import RunEvent
    from plans.services.runs import run_create, run_start

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AGENTSITE_OFFLINE_LATENCY_MS": "200", "PYTHONUNBUFFERED": "1"}
    log = open(Path(var_dir, "serve.log"), "w")  # noqa: SIM115
    serve = ["manage.py", "serve", "--port", str(port), "--no-demo-users"]
    server = subprocess.Popen(
        [sys.executable, *serve, *(["--workers", "0"] if redis else [])],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    worker = None
    if redis:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "run_worker", "--threads", "2"],
            cwd=ROOT,
            env=env,
            stdout=open(Path(var_dir, "worker.log"), "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
    where = (
        "through Redis (PostgreSQL, `serve --workers 0` + a `run_worker` process)"
        if redis
        else "embedded default (`serve`: SQLite, in-memory layer, 2 worker slots)"
    )
    print(f"event commit -> websocket receipt, {where}, {rounds} rounds")
    try:
        deadline = time.monotonic() + 60
        while "serving on" not in Path(var_dir, "serve.log").read_text():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("serve did not start: " + Path(var_dir, "serve.log").read_text())
            time.sleep(0.1)
        user = get_user_model().objects.filter(username="load-operator").first()
        if user is None:
            user = get_user_model().objects.create_superuser("load-operator")
        client = Client()
        client.force_login(user)
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        cookie = f"{settings.SESSION_COOKIE_NAME}={session}"
        origin = f"http://127.0.0.1:{port}"
        for concurrent, sockets, client in EVENTS_SHAPES:
            latencies: list[float] = []
            changes: list[float] = []  # to the page showing what the event changed
            cpu_before = process_cpu_s(server.pid)
            with ThreadPoolExecutor(concurrent * sockets) as pool:
                for _ in range(rounds):
                    runs = [
                        run_create(
                            author=user,
                            goal_text="event latency",
                            plan_data={"steps": diamond(lambda: 20.0)},
                        )
                        for _ in range(concurrent)
                    ]
                    ready = threading.Barrier(concurrent * sockets + 1)
                    watches = [
                        (
                            run,
                            pool.submit(
                                watch_run,
                                f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/?after=0",
                                origin,
                                cookie,
                                run.pk,
                                ready,
                            )
                            if client == "socket"
                            else pool.submit(
                                follow_stream,
                                f"{origin}/api/v1/runs/{run.pk}/events/",
                                cookie,
                                run.pk,
                                ready,
                            ),
                        )
                        for run in runs
                        for _ in range(sockets)
                    ]
                    ready.wait(30)
                    connected = time.time()
                    for run in runs:
                        run_start(run)
                    for run, watch in watches:
                        received, stated = watch.result()
                        for event in RunEvent.objects.filter(run=run):
                            at = event.at.timestamp()
                            if event.seq in received and at > connected:
                                latencies.append((received[event.seq] - at) * 1000)
                            if event.seq in stated and at > connected:
                                changes.append((stated[event.seq] - at) * 1000)
            if not latencies:
                raise RuntimeError("no event reached the socket")
            # The server's CPU (its `dot` runs included) per run: what a loaded machine
            # distorts less than the latencies.
            server_cpu = (process_cpu_s(server.pid) - cpu_before) / (rounds * concurrent)
            shape = f"{concurrent} run(s) at once" + (
                f", {sockets} sockets on each" if sockets > 1 else ""
            )
            if client == "stream":
                shape += ", followed by the API's event stream (no socket)"
            stated_p95 = (
                f"its changes p50 {statistics.median(changes):.0f} ms, "
                f"p95 {percentile(changes, 0.95):.0f} ms, "
                if changes
                else ""
            )
            print(
                f"  {shape}, {len(latencies)} receipts: "
                f"p50 {statistics.median(latencies):.0f} ms, "
                f"p95 {percentile(latencies, 0.95):.0f} ms, max {max(latencies):.0f} ms, "
                f"{stated_p95}server CPU {server_cpu * 1000:.0f} ms per run "
                f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
            )
        print(
            f"target p95 <= {100 if redis else 50} ms"
            + ("" if redis else "; issue 26: <= 30 ms with 4 runs, <= 50 ms with 16")
            + "\n"
        )
    finally:
        for process in (server, worker):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)


def enqueue_to_start(count: int) -> tuple[list[float], list[float]]:
    """One run at a time on idle workers: (enqueue -> claim, enqueue -> run started) in ms.

    From just before run_start (its enqueue commits in it) to the task's claim
    (DBTaskResult.started_at) and to the run's start (Run.started_at, once advance begins).
    """
    from django.contrib.auth import get_user_model
    from django_tasks_db.models import DBTaskResult

    from plans.models import Run
    from plans.services.runs import run_create, run_start

    author, _ = get_user_model().objects.get_or_create(username="load-bench")
    claims, starts = [], []
    for _ in range(count):
        steps = [{"id": 1, "tool": "bench_sleep", "args": {"ms": 0, "tag": 1}, "depends_on": []}]
        run = run_create(author=author, goal_text="enqueue to start", plan_data={"steps": steps})
        enqueued = time.time()
        run_start(run)
        deadline = time.monotonic() + 30
        while (row := Run.objects.get(pk=run.pk)).finished_at is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the run did not finish: is a worker running?")
            time.sleep(0.01)
        task = DBTaskResult.objects.filter(args_kwargs__args__0=run.pk).get()
        assert row.started_at and task.started_at
        claims.append((task.started_at.timestamp() - enqueued) * 1000)
        starts.append((row.started_at.timestamp() - enqueued) * 1000)
    return claims, starts


def section_enqueue(var_dir: str, count: int) -> None:
    """Enqueue to start on idle workers: in this process (the embedded default), then in a
    separate `run_worker` process (woken by a SQLite wake-up socket or PostgreSQL NOTIFY)."""
    import subprocess

    from django.db import connection
    from django.test import override_settings

    from plans.runtime.worker import start_worker_threads

    def row(label: str, claims: list[float], starts: list[float]) -> None:
        print(
            f"{label:<44}{statistics.median(claims):>8.1f}{percentile(claims, 0.95):>8.1f}"
            f"{statistics.median(starts):>11.1f}{percentile(starts, 0.95):>8.1f}"
        )

    print(
        f"enqueue -> start, {connection.vendor}, {count} runs one at a time on idle workers "
        "(ms; claim: the task's, start: Run.started_at)"
    )
    print(f"{'workers':<44}{'claim p50':>9}{'p95':>7}{'start p50':>11}{'p95':>8}")
    env = {**os.environ, "AGENTSITE_OFFLINE_LATENCY_MS": "0", "PYTHONUNBUFFERED": "1"}
    log_path = Path(var_dir, "enqueue-worker.log")
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "run_worker", "--threads", str(DEFAULT_WORKERS)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while "threads, sweeper" not in log_path.read_text():
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("run_worker did not start: " + log_path.read_text())
            time.sleep(0.1)
        enqueue_to_start(3)  # warm up
        row("another process (`run_worker`)", *enqueue_to_start(count))
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    with override_settings(AGENTSITE_OFFLINE_LATENCY_MS=0):
        workers = start_worker_threads(DEFAULT_WORKERS, prefix="enqueue", listen=False)
        try:
            enqueue_to_start(3)
            row("this process (embedded, as `serve`)", *enqueue_to_start(count))
        finally:
            for each in workers:
                each.stop()
    print("target: enqueue to start p50 <= 20 ms\n")


PROCESS_COUNTS = (0, 1, 2, 4)  # 0: the embedded default, worker threads in `serve` itself


def section_processes(var_dir: str, count: int, rounds: int) -> None:
    """A burst of `count` 5-step runs through a real `manage.py serve`: its workers in the web
    process (the embedded default), then in 1, 2 and 4 worker processes beside it
    (`--worker-processes N`, each with the default worker slots), alternating in ABBA order."""
    from django.db import connection

    print(
        f"{count} 5-step diamond runs at once (tools 50 ms, answer model {MODEL_LATENCY_MS} ms) "
        f"through `serve`, {connection.vendor}, {DEFAULT_WORKERS} worker slots a process, "
        f"median of {rounds} rounds"
    )
    print(
        f"{'worker processes':<30}{'runs/s':>8}{'start delay p50':>17}{'p95':>8}"
        f"{'run/crit p95':>14}{'CPU/run':>10}"
    )
    figures: dict[int, list[dict[str, float]]] = {n: [] for n in PROCESS_COUNTS}
    for round_no in range(rounds):
        order = PROCESS_COUNTS if round_no % 2 == 0 else tuple(reversed(PROCESS_COUNTS))
        for processes in order:
            figures[processes].append(_burst_through_serve(var_dir, count, processes))
    for processes in PROCESS_COUNTS:
        label = "none (in the web process)" if processes == 0 else str(processes)

        def median(name: str, of: int = processes) -> float:
            return statistics.median(f[name] for f in figures[of])

        print(
            f"{label:<30}{median('runs_per_s'):>8.1f}{median('delay_p50_ms'):>14.0f} ms"
            f"{median('delay_p95_ms'):>5.0f} ms{median('ratio_p95'):>14.2f}"
            f"{median('cpu_ms_per_run'):>7.1f} ms"
        )
    print(
        "runs/s: runs over the first enqueue to the last finish; start delay: enqueue to\n"
        "Run.started_at; CPU/run: the CPU of serve and its worker processes over the runs.\n"
    )


def _burst_through_serve(var_dir: str, count: int, processes: int) -> dict[str, float]:
    import subprocess

    from django.contrib.auth import get_user_model

    from plans.models import Run
    from plans.services.runs import run_create, run_start

    with socket_port() as port:
        pass
    args = ["manage.py", "serve", "--port", str(port), "--no-demo-users"]
    args += ["--workers", str(DEFAULT_WORKERS)]
    if processes:
        args += ["--worker-processes", str(processes)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_path = Path(var_dir, f"serve-{processes}.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while not (
            "agentsite is serving" in (text := log_path.read_text())
            and text.count("threads, sweeper on") >= processes
        ):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"serve did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        author, _ = get_user_model().objects.get_or_create(username="load-bench")
        plans = [diamond(lambda: 50.0) for _ in range(count)]
        runs = [
            run_create(author=author, goal_text="processes benchmark", plan_data={"steps": steps})
            for steps in plans
        ]
        pids = [server.pid, *_children(server.pid)]
        cpu_before = _cpu_s(pids)
        enqueued: dict[int, float] = {}
        for run in runs:
            enqueued[run.pk] = time.time()
            run_start(run)
        ids = [run.pk for run in runs]
        deadline = time.monotonic() + 120 + count
        while Run.objects.filter(pk__in=ids, finished_at__isnull=True).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} runs did not finish in time:\n{log_path.read_text()}")
            time.sleep(0.05)
        cpu = _cpu_s(pids) - cpu_before
    finally:
        server.terminate()
        server.wait(timeout=60)
    done = {r.pk: r for r in Run.objects.filter(pk__in=ids)}
    assert {r.status for r in done.values()} == {"completed"}
    delays, ratios = [], []
    for run, steps in zip(runs, plans, strict=True):
        row = done[run.pk]
        assert row.started_at and row.finished_at
        delays.append(row.started_at.timestamp() - enqueued[run.pk])
        ratios.append((row.finished_at - row.started_at).total_seconds() / critical_path_s(steps))
    span = max(r.finished_at.timestamp() for r in done.values()) - min(enqueued.values())
    return {
        "runs_per_s": count / span,
        "delay_p50_ms": statistics.median(delays) * 1000,
        "delay_p95_ms": percentile(delays, 0.95) * 1000,
        "ratio_p95": percentile(ratios, 0.95),
        "cpu_ms_per_run": cpu / count * 1000,
    }


class socket_port:
    """A free loopback port (closed again on exit, for a server to bind)."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return self._sock.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds of these processes so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / ticks


def postgres_database(admin_url: str, keep: str) -> dict:
    """The database named `keep` on the server (created if missing), or a fresh one."""
    if not keep:
        from benchmarks.handoff import create_database

        return create_database(admin_url)
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as connection:
        found = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [keep]
        ).fetchone()
        if not found:
            connection.execute(f'CREATE DATABASE "{keep}"')
    return {"admin_url": admin_url, "name": keep, "url": admin_url.rsplit("/", 1)[0] + "/" + keep}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="50,200", help="concurrent run counts")
    parser.add_argument(
        "--sections",
        default="events,enqueue,concurrency,capacity,pages",
        help="events,enqueue,concurrency,capacity,pages,processes; pages-postgres,events-redis,"
        "processes-postgres (on PostgreSQL, one database for them, apart from the SQLite "
        "sections; enqueue may join either)",
    )
    parser.add_argument("--seed", type=int, default=100_000, help="runs seeded for the pages")
    parser.add_argument("--repeats", type=int, default=10, help="requests per page")
    parser.add_argument(
        "--db", default="", help="a SQLite file to keep (seeded once, reused by later runs)"
    )
    parser.add_argument(
        "--pg-db",
        default="",
        help="a PostgreSQL database to keep for pages-postgres (seeded once, reused), on the "
        "server of AGENTSITE_TEST_DATABASE_URL",
    )
    args = parser.parse_args()
    sections = args.sections.split(",")
    with tempfile.TemporaryDirectory(prefix="agentsite-load-") as var_dir:
        database = None
        postgres = {"events-redis", "pages-postgres", "processes-postgres"} & set(sections)
        sqlite = {"pages", "events", "concurrency", "capacity", "processes"} & set(sections)
        if postgres and sqlite:
            parser.error(
                "pages-postgres, events-redis and processes-postgres run apart from the SQLite "
                "sections"
            )
        if postgres:
            # Its own process settings: PostgreSQL and Redis (as started by .ci/services.sh).
            database = postgres_database(os.environ["AGENTSITE_TEST_DATABASE_URL"], args.pg_db)
            os.environ["AGENTSITE_DATABASE_URL"] = database["url"]
            if "events-redis" in sections:
                os.environ["AGENTSITE_REDIS_URL"] = os.environ["AGENTSITE_TEST_REDIS_URL"]
        setup_django(var_dir, args.db)
        print(
            f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f}, Python {platform.python_version()}, "
            + ("PostgreSQL" if postgres else f"SQLite WAL in {args.db or var_dir}")
            + ", DEBUG off\n"
        )
        try:
            if "pages" in sections or "pages-postgres" in sections:
                section_pages(args.seed, args.repeats)
            if "events" in sections:
                section_events(var_dir, 10)
            if "events-redis" in sections:
                section_events(var_dir, 10, redis=True)
            if "enqueue" in sections:
                section_enqueue(var_dir, 30)
            if "concurrency" in sections:
                section_concurrency([int(n) for n in args.runs.split(",")])
            if "capacity" in sections:
                section_capacity(max(int(n) for n in args.runs.split(",")))
            if "processes" in sections or "processes-postgres" in sections:
                section_processes(var_dir, max(int(n) for n in args.runs.split(",")), 2)
        finally:
            if database and not args.pg_db:
                from benchmarks.handoff import drop_database

                drop_database(database)
    return 0


if __name__ == "__main__":
    sys.exit(main())
