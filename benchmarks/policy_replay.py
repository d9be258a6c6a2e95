"""What `manage.py policy_replay` costs at a seeded size: wall time, CPU and peak memory of the
command replaying 30 days of approvals against the demo shop's rules, on SQLite and PostgreSQL.

    ./dev bench replay                                  # 100k and 1M runs, SQLite and PostgreSQL
    ./dev bench replay --runs 100000 --databases sqlite --repeats 5
    ./dev bench replay --keep                           # keep the seeded databases for next time

Runs are seeded with `manage.py seed_runs --days 30 --originals-every 100` (every approval
inside the window), the smaller size first and the larger on top of it, into /tmp (or --dir).
The command runs in a process of its own each time (as an operator runs it), and its figures
come from wait4(): wall, user + system CPU and peak RSS. Seeded databases are deleted at the
end unless --keep. PostgreSQL is the server .ci/services.sh starts (./dev bench replay does).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DAYS = 30
RULES = "plans.demo.approval_rules"
SEED = 24
# One run in 100 generated in full, the others copies (twice as fast as seed_runs' default 10
# at a million: the approvals' mix of tools, amounts and decisions is the same).
ORIGINALS_EVERY = 100
AUTHORS = 20


def environment(database: str, target: str) -> dict[str, str]:
    """The environment of a manage.py against this database (a SQLite path or a PostgreSQL
    URL); DEBUG off, as an operator runs it."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"AGENTSITE_DATABASE_URL", "AGENTSITE_SQLITE_PATH", "AGENTSITE_REDIS_URL"}
    }
    env.update(
        AGENTSITE_DEBUG="0",
        AGENTSITE_MODEL_BACKEND="offline",
        AGENTSITE_SECRET_KEY=env.get(
            "AGENTSITE_SECRET_KEY", "benchmark-only-" + os.urandom(16).hex()
        ),
        DJANGO_SETTINGS_MODULE="agentsite.settings",
        PYTHONUNBUFFERED="1",
    )
    if database == "sqlite":
        env["AGENTSITE_SQLITE_PATH"] = target
        env["AGENTSITE_VAR_DIR"] = str(Path(target).parent)
    else:
        env["AGENTSITE_DATABASE_URL"] = target
    return env


def manage(env: dict[str, str], *args: str) -> tuple[str, float, float, int]:
    """Run manage.py; returns (stdout, wall s, CPU s, peak RSS in KB) of that process alone."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{output[-4000:]}")
    return output, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def runs_in(env: dict[str, str]) -> int:
    output, *_ = manage(
        env, "shell", "-c", "from plans.models import Run; print(Run.objects.count())"
    )
    return int(output.split()[-1])


def seed_to(env: dict[str, str], count: int) -> None:
    have = runs_in(env)
    if have >= count:
        print(f"  {have:,} runs seeded before")
        return
    _, wall, _, rss = manage(
        env,
        "seed_runs",
        str(count - have),
        "--days",
        str(DAYS),
        "--authors",
        str(AUTHORS),
        "--seed",
        str(SEED),
        "--originals-every",
        str(ORIGINALS_EVERY),
    )
    print(f"  seeded {count - have:,} runs in {wall:.0f} s (peak RSS {rss / 1024:.0f} MB)")


def replay(env: dict[str, str], repeats: int) -> None:
    rows = []
    output = ""
    for _ in range(repeats):
        output, wall, cpu, rss = manage(
            env, "policy_replay", "--days", str(DAYS), "--rules", RULES, "--listed", "5"
        )
        rows.append((wall, cpu, rss))
    asked = re.search(r"^([\d,]+) approval", output, re.MULTILINE)
    tallies = [line.strip() for line in output.splitlines() if "matched ->" in line]
    print(f"  {asked.group(1) if asked else '?'} approvals replayed; " + "; ".join(tallies))
    walls, cpus, peaks = zip(*rows, strict=True)
    print(
        f"  policy_replay --days {DAYS}: wall {statistics.median(walls):.2f} s "
        f"(min {min(walls):.2f}), CPU {statistics.median(cpus):.2f} s, "
        f"peak RSS {max(peaks) / 1024:.0f} MB  (median of {repeats})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="100000,1000000", help="seeded sizes, smallest first")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="/tmp", help="where the SQLite files are seeded")
    parser.add_argument("--keep", action="store_true", help="keep the seeded databases")
    options = parser.parse_args()
    sizes = sorted(int(n) for n in options.runs.split(","))
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, Python {platform.python_version()}, DEBUG off"
    )
    for database in options.databases.split(","):
        if database == "sqlite":
            target = str(Path(options.dir) / f"agentsite-replay-{SEED}.sqlite3")
            cleanup = [target, target + "-wal", target + "-shm"]
        elif database == "postgres":
            from benchmarks.load import postgres_database

            keep = f"agentsite_replay_{SEED}"
            created = postgres_database(os.environ["AGENTSITE_TEST_DATABASE_URL"], keep)
            target = created["url"]
            cleanup = []
        else:
            parser.error(f"unknown database {database!r}: sqlite or postgres")
        env = environment(database, target)
        manage(env, "migrate", "--verbosity", "0")
        try:
            for size in sizes:
                print(f"\n{database} at {size:,} runs (seeded over {DAYS} days):")
                seed_to(env, size)
                print(f"  load average {os.getloadavg()[0]:.1f}")
                replay(env, options.repeats)
        finally:
            if not options.keep:
                for path in cleanup:
                    Path(path).unlink(missing_ok=True)
                if database == "postgres":
                    import psycopg

                    with psycopg.connect(created["admin_url"], autocommit=True) as connection:
                        connection.execute(f'DROP DATABASE IF EXISTS "{keep}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
