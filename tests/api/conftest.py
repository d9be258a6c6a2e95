"""A live daphne (`manage.py serve`, its own SQLite and workers) for the API's end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_START_S = 90
EVENTUALLY_S = 30.0
PASSWORDS = {"author": "author-demo-pass", "author2": "author2-demo-pass"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveSite:
    """The served site: its URL, and manage.py against its database."""

    def __init__(self, url: str, env: dict[str, str]) -> None:
        self.url = url
        self.env = env

    def manage(self, *args: str, expect_exit: int = 0) -> str:
        done = subprocess.run(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != expect_exit:
            raise AssertionError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def token(self, username: str, roles: str = "") -> str:
        args = ["api_token", "create", username, "--name", "tests"]
        return self.manage(*args, *(["--roles", roles] if roles else [])).strip()

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=EVENTUALLY_S)


def start_site(var_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator[LiveSite]:
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"ANTHROPIC_API_KEY", "AGENTSITE_DATABASE_URL", "AGENTSITE_REDIS_URL"}
    }
    env.update(
        AGENTSITE_VAR_DIR=str(var_dir),
        AGENTSITE_MODEL_BACKEND="offline",
        AGENTSITE_TASKS_BACKEND="django_tasks_db.DatabaseBackend",
        DJANGO_SETTINGS_MODULE="agentsite.settings",
        PYTHONUNBUFFERED="1",
        AGENTSITE_TOOL_MODULES="tests.support_tools",
        **(extra_env or {}),
    )
    log_path = var_dir / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            if httpx.get(f"{url}/api/v1/schema/", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"the server did not start:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)
    try:
        yield LiveSite(url, env)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session")
def live_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    yield from start_site(tmp_path_factory.mktemp("agentsite-api"))
