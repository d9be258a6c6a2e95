"""Webhook benchmark: do runs finish as fast with a hanging webhook endpoint as with none?

20 runs at once (a 5-step diamond of 50 ms tools each) on the embedded default (SQLite, worker
threads in this process, the notifier thread and its pool), timed from their creation until all
have ended. Each sample is taken without endpoints, then with one endpoint that never answers
and one that does (both subscribed to run.created and run.finished), alternately. Afterwards
every delivery must have ended delivered or failed, with its attempts on record.

    ./dev bench webhooks
    ./dev bench webhooks --repeats 7 --runs 20 --workers 4
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EVENTS = ["run.created", "run.finished"]
TIMEOUT_S = 1.0
MAX_ATTEMPTS = 2


def diamond() -> dict[str, Any]:
    deps = {1: [], 2: [], 3: [1, 2], 4: [3], 5: [3]}
    return {
        "steps": [
            {"id": i, "tool": "bench_sleep", "args": {"ms": 50, "tag": i}, "depends_on": d}
            for i, d in deps.items()
        ]
    }


def start_receiver(*, hang: bool, release: threading.Event) -> tuple[str, ThreadingHTTPServer]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if hang:
                release.wait(600)
                return
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", server


def setup_django(var_dir: str) -> None:
    os.environ.update(
        AGENTSITE_VAR_DIR=var_dir,
        AGENTSITE_SQLITE_PATH=str(Path(var_dir) / "bench.sqlite3"),
        AGENTSITE_TOOL_MODULES="benchmarks.bench_tools",
        AGENTSITE_MODEL_BACKEND="offline",
        AGENTSITE_MODEL_CALLS_PER_MINUTE="0",
        AGENTSITE_TASKS_BACKEND="django_tasks_db.DatabaseBackend",
        AGENTSITE_DEBUG="0",
        AGENTSITE_NOTIFICATIONS="1",
        AGENTSITE_WEBHOOK_ALLOW_PRIVATE="1",  # the receivers are on loopback
        AGENTSITE_WEBHOOK_TIMEOUT_S=str(TIMEOUT_S),
        AGENTSITE_NOTIFY_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
        AGENTSITE_NOTIFY_RETRY_BASE_S="0.2",
        AGENTSITE_NOTIFY_RETRY_CAP_S="1",
        AGENTSITE_NOTIFY_POLL_S="0.2",
        DJANGO_SETTINGS_MODULE="agentsite.settings",
    )
    os.environ.setdefault("AGENTSITE_SECRET_KEY", "benchmark-only-" + os.urandom(16).hex())
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def batch(runs: int, user: Any) -> float:
    """Seconds from creating `runs` runs until all of them have ended (all must complete)."""
    from plans.models import Run
    from plans.services.runs import run_create, run_start

    started = time.perf_counter()
    ids = []
    for n in range(runs):
        run = run_create(author=user, goal_text=f"bench {n}", plan_data=diamond())
        run_start(run)
        ids.append(run.pk)
    while True:
        statuses = list(Run.objects.filter(pk__in=ids).values_list("status", flat=True))
        if all(status in Run.TERMINAL for status in statuses):
            break
        time.sleep(0.005)
    wall = time.perf_counter() - started
    if set(statuses) != {"completed"}:
        raise SystemExit(f"runs did not complete: {Counter(statuses)}")
    return wall


def settle(timeout: float) -> float:
    """Seconds until the notifier has taken every event and no delivery is pending."""
    from plans.notifications.dispatch import notifier

    started = time.perf_counter()
    if not notifier.wait_idle(timeout):
        raise SystemExit(f"deliveries still pending after {timeout:g} s")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    release = threading.Event()
    hanging_url, _ = start_receiver(hang=True, release=release)
    healthy_url, _ = start_receiver(hang=False, release=release)
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-webhooks-") as var_dir:
        setup_django(var_dir)
        from django.contrib.auth import get_user_model

        from plans.notifications.models import Delivery, WebhookEndpoint
        from plans.runtime.worker import start_worker_threads

        user, _ = get_user_model().objects.get_or_create(username="bench")
        hanging = WebhookEndpoint.objects.create(
            url=hanging_url, secret="bench", events=EVENTS, active=False
        )
        healthy = WebhookEndpoint.objects.create(
            url=healthy_url, secret="bench", events=EVENTS, active=False
        )
        start_worker_threads(args.workers, prefix="bench")
        print(
            f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; SQLite WAL, {args.workers} worker threads, "
            "DEBUG off"
        )
        print(
            f"{args.runs} runs at once, each a 5-step diamond of 50 ms tools (critical path "
            f"150 ms); webhook timeout {TIMEOUT_S:g} s, {MAX_ATTEMPTS} attempts\n"
        )
        batch(args.runs, user)  # warm up
        settle(120)
        walls: dict[str, list[float]] = {"none": [], "hanging": []}
        settles = []
        for _ in range(args.repeats):
            for mode in ("none", "hanging"):
                active = mode == "hanging"
                WebhookEndpoint.objects.update(active=active)
                walls[mode].append(batch(args.runs, user))
                # The endpoints change only once the notifier has taken every event.
                settled_s = settle(600)
                if active:
                    settles.append(settled_s)
                WebhookEndpoint.objects.update(active=False)
        none, hung = statistics.median(walls["none"]), statistics.median(walls["hanging"])
        print(f"{'endpoints':<44}{'median s':>10}{'min s':>8}{'max s':>8}")
        for mode, label in (
            ("none", "none"),
            ("hanging", "one that hangs + one that answers"),
        ):
            samples = walls[mode]
            print(
                f"{label:<44}{statistics.median(samples):>10.3f}{min(samples):>8.3f}"
                f"{max(samples):>8.3f}"
            )
        print(f"\nratio hanging / none: {hung / none:.2f} (target: <= 1.10)")

        print(f"\ndeliveries settled (none pending) {statistics.median(settles):.1f} s (median)")
        print("after the last run ended; by endpoint and outcome:")
        rows = Delivery.objects.filter(endpoint__isnull=False).select_related("endpoint")
        outcome: Counter[tuple[str, str, int]] = Counter()
        for row in rows:
            name = "hanging" if row.endpoint_id == hanging.pk else "answering"
            outcome[(name, row.status, row.attempts)] += 1
        print(f"  expected per endpoint: {args.repeats * args.runs * len(EVENTS)}")
        for (name, status, attempts), count in sorted(outcome.items()):
            print(f"  {name:<10} {status:<10} {attempts} attempt(s): {count}")
        pending = rows.filter(status=Delivery.Status.PENDING).count()
        latencies = [
            row.last_latency_ms
            for row in rows.filter(endpoint=healthy, status="delivered")
            if row.last_latency_ms is not None
        ]
        if latencies:
            print(f"answering endpoint: median latency {statistics.median(latencies):.0f} ms")
        release.set()
        ok = hung / none <= 1.10 and pending == 0
        print("target met" if ok else "target MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
