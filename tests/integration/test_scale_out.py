"""Scale-out on real servers: PostgreSQL, Redis, two daphne and two worker processes.

Thirty runs (parallel steps, chains, destructive steps approved through approval_decide) keep
going while one worker is stopped past its lease and resumed, and the other is killed while
it holds running steps. Steps wait on gates (files) the test opens, so it knows exactly what
is in flight when it strikes.
"""

from __future__ import annotations

import re
import signal
import statistics
import threading
import time
from datetime import datetime

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from plans.guards.audit import chain_problems
from plans.models import Approval, LedgerEntry, Run, RunEvent, Step, ToolCall
from plans.services.approvals import approval_decide
from plans.services.runs import run_create, run_start
from tests.integration.conftest import (
    base_env,
    postgres_settings,
    wait_for_http,
)
from tests.integration.it_tools import gate_open
from tests.integration.support import wait_until
from tests.servers import free_port

pytestmark = [pytest.mark.services, pytest.mark.multiprocess]

LEASE_S = 6.0
SWEEP_S = LEASE_S / 3
# After the sweep: the requeue, the NOTIFY wake-up and the new worker's first write.
PICKUP_S = 1.0
RUNS = 30
WATCHED = 5
WORKER_THREADS = 32
LEASE_TAKEN = re.compile(r"run (\d+): lease ([0-9a-f-]{36}) taken by (\S+)")
SEQ = re.compile(r'<li class="event[^"]*" data-seq="(\d+)"')


def plan_for(i: int) -> dict:
    """Parallel steps, a chain, or destructive steps; every kind waits on gates g1 then g2."""
    kind = i % 3
    if kind == 0:
        steps = [
            *(
                {"id": k, "tool": "hold", "args": {"label": f"p{i}-{k}", "gate": "g1"}}
                for k in (1, 2, 3)
            ),
            {
                "id": 4,
                "tool": "pause",
                "args": {"seconds": 0.05, "label": "join"},
                "depends_on": [1, 2, 3],
            },
            {
                "id": 5,
                "tool": "hold",
                "args": {"label": f"p{i}-5", "gate": "g2"},
                "depends_on": [4],
            },
        ]
    elif kind == 1:
        steps = [
            {"id": 1, "tool": "pause", "args": {"seconds": 0.05, "label": f"c{i}"}},
            {
                "id": 2,
                "tool": "hold",
                "args": {"label": "{{1}}-2", "gate": "g1"},
                "depends_on": [1],
            },
            {
                "id": 3,
                "tool": "pause",
                "args": {"seconds": 0.05, "label": "{{2}}-3"},
                "depends_on": [2],
            },
            {
                "id": 4,
                "tool": "hold",
                "args": {"label": "{{3}}-4", "gate": "g2"},
                "depends_on": [3],
            },
            {"id": 5, "tool": "echo", "args": {"text": "{{4}}"}, "depends_on": [4]},
        ]
    else:
        steps = [
            {
                "id": 1,
                "tool": "charge",
                "args": {"account": f"run{i}-a", "amount": i, "gate": "g1"},
            },
            {
                "id": 2,
                "tool": "pause",
                "args": {"seconds": 0.05, "label": "between"},
                "depends_on": [1],
            },
            {
                "id": 3,
                "tool": "charge",
                "args": {"account": f"run{i}-b", "amount": i, "gate": "g2"},
                "depends_on": [2],
            },
            {"id": 4, "tool": "echo", "args": {"text": "charged twice"}, "depends_on": [3]},
        ]
    return {"steps": steps}


class Watcher:
    """A websocket client on a run page's live feed, through one of the daphne processes."""

    def __init__(self, run_id: int, port: int, cookie: str) -> None:
        self.run_id = run_id
        self.seqs: list[int] = []
        self.messages = 0
        self.closed_early = ""
        self._stop = threading.Event()
        self._socket = connect(
            f"ws://127.0.0.1:{port}/ws/runs/{run_id}/?after=0",
            origin=f"http://127.0.0.1:{port}",
            additional_headers={"Cookie": f"{django_settings.SESSION_COOKIE_NAME}={cookie}"},
            proxy=None,
            open_timeout=10,
            legacy=True,  # a connection object to keep, not a context manager
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                html = self._socket.recv(timeout=0.2)
            except TimeoutError:
                continue
            except ConnectionClosed as closed:
                self.closed_early = str(closed)
                return
            self.messages += 1
            # Each push lists its events oldest first (they are appended to the timeline).
            self.seqs.extend(int(seq) for seq in SEQ.findall(html))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()


class Scenario:
    """The servers, the runs, and what the test observes of them."""

    def __init__(self, processes, database_url: str, redis_url: str, gates) -> None:
        env = base_env(
            AGENTSITE_DATABASE_URL=database_url,
            AGENTSITE_REDIS_URL=redis_url,
            AGENTSITE_LEASE_SECONDS=str(LEASE_S),
            AGENTSITE_TOOL_MODULES="tests.integration.it_tools",
            AGENTSITE_IT_GATES=str(gates),
        )
        migrate = processes("migrate", ["manage.py", "migrate", "--no-input"], env)
        assert migrate.popen.wait(timeout=120) == 0, migrate.log()
        self.ports = [free_port(), free_port()]
        self.daphnes = [
            processes(
                f"daphne-{n}",
                ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "agentsite.asgi:application"],
                env,
            )
            for n, port in enumerate(self.ports, 1)
        ]
        worker_args = ["manage.py", "run_worker", "--threads", str(WORKER_THREADS), "-v", "2"]
        self.workers = {name: processes(name, worker_args, env) for name in ("w1", "w2")}
        for port in self.ports:
            wait_for_http(f"http://127.0.0.1:{port}/accounts/login/")
        for worker in self.workers.values():
            worker.wait_for_log("threads, sweeper on")

    def tokens(self) -> dict[str, str]:
        """Lease token -> the worker process that took it (from the workers' logs)."""
        return {
            token: name
            for name, worker in self.workers.items()
            for _, token, _ in LEASE_TAKEN.findall(worker.log())
        }

    def holders(self, runs) -> dict[int, str]:
        tokens = self.tokens()
        return {
            run_id: tokens.get(str(token), "?")
            for run_id, token in Run.objects.filter(pk__in=runs).values_list("pk", "lease_token")
            if token
        }


def approve_pending(reviewer) -> int:
    pending = Approval.objects.filter(decision=Approval.Decision.PENDING)
    for approval in pending:
        approval_decide(approval=approval, reviewer=reviewer, approve=True)  # a reviewer's click
    return len(pending)


def in_flight_on(gate: str, runs, reviewer) -> bool:
    approve_pending(reviewer)
    steps = Step.objects.filter(plan__run__in=runs, args__gate=gate)
    return steps.count() > 0 and not steps.exclude(status=Step.Status.RUNNING).exists()


def all_ended(runs, reviewer) -> bool:
    approve_pending(reviewer)
    return Run.objects.filter(pk__in=runs, status__in=Run.TERMINAL).count() == len(runs)


def first_recovery(run_id: int, after: datetime) -> RunEvent | None:
    return (
        RunEvent.objects.filter(run_id=run_id, kind="run_recovered", at__gt=after)
        .order_by("seq")
        .first()
    )


def test_thirty_runs_survive_a_stopped_and_a_killed_worker(
    pg_database, redis_url, processes, this_process_on, settings, tmp_path, monkeypatch
):
    gates = tmp_path / "gates"
    monkeypatch.setenv("AGENTSITE_IT_GATES", str(gates))
    settings.TASKS = {
        "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}
    }
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": redis_url, "socket_timeout": 30}]},
        }
    }
    settings.AGENTSITE_TOOL_MODULES = ["tests.integration.it_tools"]
    servers = Scenario(processes, pg_database, redis_url, gates)
    w1, w2 = servers.workers["w1"], servers.workers["w2"]

    with this_process_on(postgres_settings(pg_database)):
        users = get_user_model().objects
        author = users.create_user("it-author")
        reviewer = users.create_user("it-reviewer")
        reviewer.user_permissions.add(Permission.objects.get(codename="decide_approval"))
        reviewer = users.get(pk=reviewer.pk)
        client = Client()
        client.force_login(author)
        cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value

        runs = [
            run_create(author=author, goal_text=f"scale-out run {i}", plan_data=plan_for(i))
            for i in range(RUNS)
        ]
        run_ids = [run.pk for run in runs]
        watchers = [
            Watcher(run.pk, servers.ports[n % 2], cookie) for n, run in enumerate(runs[:WATCHED])
        ]
        started_at = time.monotonic()
        for run in runs:
            run_start(run)

        # 1. Every run holds steps waiting on gate g1 (destructive ones once approved).
        wait_until(lambda: in_flight_on("g1", run_ids, reviewer), timeout=60, what="g1 in flight")
        holders = wait_until(
            lambda: (
                (h := servers.holders(run_ids)) and len(h) == RUNS and "?" not in h.values() and h
            ),
            what="every run to be held by a known worker",
        )
        stale_runs = sorted(run for run, worker in holders.items() if worker == "w2")
        assert stale_runs, f"w2 holds no run: {holders}"
        time.sleep(0.3)  # let commits in flight land: a stopped writer would hold its row lock

        # 2. Stop w2 past its lease: w1 takes its runs over; then w2 wakes up, stale.
        w2.signal(signal.SIGSTOP)
        stopped_at = timezone.now()
        stale_tokens = {t for t, worker in servers.tokens().items() if worker == "w2"}
        wait_until(
            lambda: all(
                (e := first_recovery(run, stopped_at))
                and servers.tokens().get(str(e.lease_token)) == "w1"
                for run in stale_runs
            ),
            timeout=LEASE_S + SWEEP_S + 15,
            what="w1 to take over the stopped worker's runs",
        )
        w2.signal(signal.SIGCONT)
        resumed_at = timezone.now()
        # Awake, it finds its leases gone and drops those runs, its calls still waiting on g1.
        wait_until(
            lambda: all(f"run {run}: lease lost" in w2.log() for run in stale_runs),
            what="the stale worker to give its runs up",
        )

        # 3. Open g1; every run moves on to steps waiting on g2.
        gate_open("g1")
        wait_until(lambda: in_flight_on("g2", run_ids, reviewer), timeout=60, what="g2 in flight")
        killed_runs = sorted(r for r, worker in servers.holders(run_ids).items() if worker == "w1")
        assert killed_runs, "w1 holds no run"
        assert Step.objects.filter(plan__run__in=killed_runs, status=Step.Status.RUNNING).exists()
        time.sleep(0.3)

        # 4. Kill w1 while it holds running steps: w2 resumes its runs.
        w1.signal(signal.SIGKILL)
        killed_at = timezone.now()
        recoveries = wait_until(
            lambda: (
                all(first_recovery(run, killed_at) for run in killed_runs)
                and [first_recovery(run, killed_at) for run in killed_runs]
            ),
            timeout=LEASE_S + SWEEP_S + 15,
            what="w2 to resume the killed worker's runs",
        )
        resume_s = [(e.at - killed_at).total_seconds() for e in recoveries]

        # 5. Open g2: everything finishes.
        gate_open("g2")
        wait_until(lambda: all_ended(run_ids, reviewer), timeout=90, what="every run to end")
        elapsed = time.monotonic() - started_at
        for watcher in watchers:
            last = Run.objects.get(pk=watcher.run_id).last_seq
            wait_until(lambda w=watcher, n=last: len(w.seqs) >= n or w.closed_early, timeout=20)
            watcher.close()

        # --- what must hold ----------------------------------------------------------------
        statuses = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))
        completed = sum(status == Run.Status.COMPLETED for status in statuses.values())

        keys = list(
            LedgerEntry.objects.filter(kind="it_charge").values_list("idempotency_key", flat=True)
        )
        destructive = Step.objects.filter(plan__run__in=run_ids, tool="charge")
        duplicate_effects = len(keys) - len(set(keys))
        per_run = {}
        for step in destructive.select_related("plan"):
            per_run.setdefault(step.plan.run_id, set()).update(
                ToolCall.objects.filter(step=step, error="").values_list(
                    "idempotency_key", flat=True
                )
            )

        lost = duplicated = 0
        for run_id in run_ids:
            seqs = list(
                RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True)
            )
            expected = list(range(1, Run.objects.get(pk=run_id).last_seq + 1))
            lost += len(set(expected) - set(seqs))
            duplicated += len(seqs) - len(set(seqs))

        late_stale_writes = RunEvent.objects.filter(
            lease_token__in=stale_tokens, at__gte=stopped_at
        ).count()
        interleaved = []
        for run_id in run_ids:
            writers = [
                str(t)
                for t in RunEvent.objects.filter(run_id=run_id, lease_token__isnull=False)
                .order_by("seq")
                .values_list("lease_token", flat=True)
            ]
            segments = [t for n, t in enumerate(writers) if n == 0 or t != writers[n - 1]]
            if len(segments) != len(set(segments)):
                interleaved.append(run_id)

        stopped_s = (resumed_at - stopped_at).total_seconds()
        print(
            f"\nscale-out: {completed}/{RUNS} runs completed in {elapsed:.1f}s; "
            f"duplicate side effects: {duplicate_effects} ({len(keys)} charges); "
            f"lost events: {lost}; duplicated events: {duplicated}; "
            f"stale writes accepted after the stop: {late_stale_writes}\n"
            f"w2 stopped holding runs {stale_runs}, resumed {stopped_s:.1f}s later; "
            f"w1 killed holding runs {killed_runs}: resumed after "
            f"{statistics.median(resume_s):.2f}s median, {max(resume_s):.2f}s max "
            f"(lease + sweep interval = {LEASE_S + SWEEP_S:g}s)\n"
            f"websocket: {[(w.run_id, len(w.seqs), w.messages) for w in watchers]}"
        )

        assert statuses == dict.fromkeys(run_ids, Run.Status.COMPLETED)
        assert duplicate_effects == 0
        assert len(keys) == destructive.count() == 2 * (RUNS // 3)
        assert all(len(run_keys) == 2 for run_keys in per_run.values()), per_run
        assert set(keys) == set().union(*per_run.values())
        assert (lost, duplicated) == (0, 0)
        assert [p for run in Run.objects.filter(pk__in=run_ids) for p in chain_problems(run)] == []
        assert late_stale_writes == 0
        assert interleaved == []
        # The lease may have been renewed just before the kill, and the sweep come just before
        # it expired: up to a lease plus a sweep interval, plus the pickup.
        assert max(resume_s) < LEASE_S + SWEEP_S + PICKUP_S
        # Steps running at a crash ran again with their attempts counted; done ones never did.
        assert (
            Step.objects.filter(plan__run__in=stale_runs, args__gate="g1", attempts__lt=2).count()
            == 0
        )
        assert (
            Step.objects.filter(plan__run__in=killed_runs, args__gate="g2", attempts__lt=2).count()
            == 0
        )
        done_before_a_crash = Step.objects.filter(plan__run__in=run_ids, tool="pause")
        assert all(s.attempts == 1 for s in done_before_a_crash)
        assert all(ToolCall.objects.filter(step=s).count() == 1 for s in done_before_a_crash)
        for watcher in watchers:
            last = Run.objects.get(pk=watcher.run_id).last_seq
            assert watcher.seqs == list(range(1, last + 1)), (watcher.run_id, watcher.closed_early)
