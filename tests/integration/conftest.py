"""Real servers for the integration tests: processes, a fresh database, this process's ORM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from asgiref.local import Local

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60


def service_url(name: str) -> str:
    """A service's URL from the environment; skipped without it, except on CI where it fails."""
    url = os.environ.get(name, "")
    if not url:
        why = f"{name} is not set: start PostgreSQL and Redis with .ci/services.sh (./dev test)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return url


@pytest.fixture
def redis_url() -> str:
    return service_url("AGENTSITE_TEST_REDIS_URL")


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A database of its own on the test PostgreSQL server (dropped afterwards); its URL."""
    import psycopg

    admin_url = service_url("AGENTSITE_TEST_DATABASE_URL")
    name = f"agentsite_it_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    yield admin_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def postgres_settings(url: str) -> dict:
    parsed = urlparse(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.path.lstrip("/"),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
    }


def sqlite_settings(path: Path) -> dict:
    from django.conf import settings

    return {**settings.DATABASES["default"], "NAME": str(path), "TEST": {}}


@pytest.fixture
def this_process_on(django_db_blocker):
    """Point this test process's ORM at the servers' database (services are called directly)."""

    @contextmanager
    def use(database: dict) -> Iterator[None]:
        from django.db import connections

        previous = connections.settings["default"]
        connections["default"].close()
        connections.settings["default"] = connections.configure_settings({"default": database})[
            "default"
        ]
        _every_thread_reconnects(connections)
        try:
            with django_db_blocker.unblock():
                yield
        finally:
            connections.close_all()
            connections.settings["default"] = previous
            _every_thread_reconnects(connections)

    return use


def _every_thread_reconnects(connections) -> None:
    """Drop every thread's connection wrappers, not only this one's: the process keeps threads
    from test to test (the tool pool, recorders, the lease keeper), and a wrapper made before
    the switch would still reach the old database (a tool's query ran on SQLite)."""
    connections._connections = Local(connections.thread_critical)


class Process:
    """A server or worker started as `python ARGS...`, its output kept in a log file."""

    def __init__(self, name: str, args: list[str], *, env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.popen = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, *args], cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait_for_log(self, text: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{self.name} never logged {text!r}:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()


@pytest.fixture
def processes(tmp_path) -> Iterator:
    """Start processes with process(name, args, env); all are stopped at the end."""
    started: list[Process] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, args: list[str], env: dict[str, str]) -> Process:
        process = Process(name, args, env=env, logs=logs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def wait_for_http(url: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our server
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} did not answer within {timeout:g}s")
        time.sleep(0.1)


def base_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTSITE_", "ANTHROPIC_"))
    }
    env.update(PYTHONUNBUFFERED="1", AGENTSITE_MODEL_BACKEND="offline", **extra)
    return env
