"""What tests need to serve things on loopback: a free port, and `manage.py serve` of a site
of its own (the offline model, the database task queue, the tests' tools), until stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER_START_S = 90


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def site_served(
    var_dir: Path, answers: Callable[[str], bool], **extra_env: str
) -> Iterator[tuple[str, dict[str, str]]]:
    """`manage.py serve` on a free port with var_dir and the tests' tools (echo, explode),
    embedded whatever the caller's shell says (no PostgreSQL, Redis or Anthropic key), extra_env
    on top; yields (url, env) once answers(url), and stops the server when resumed. Its output
    goes to var_dir/server.log."""
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"ANTHROPIC_API_KEY", "AGENTSITE_DATABASE_URL", "AGENTSITE_REDIS_URL"}
    }
    env.update(
        AGENTSITE_VAR_DIR=str(var_dir),
        AGENTSITE_BASE_URL=f"http://127.0.0.1:{port}",  # links in its e-mails and webhooks
        AGENTSITE_MODEL_BACKEND="offline",
        AGENTSITE_TASKS_BACKEND="django_tasks_db.DatabaseBackend",
        DJANGO_SETTINGS_MODULE="agentsite.settings",
        PYTHONUNBUFFERED="1",
        AGENTSITE_TOOL_MODULES="tests.support_tools",
    )
    env.update(extra_env)
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
    while not answers(url):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"the server did not start:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)
    try:
        yield url, env
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
