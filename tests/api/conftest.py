"""A live daphne (`manage.py serve`, its own SQLite and workers) for the API's end-to-end tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import site_served

ROOT = Path(__file__).resolve().parents[2]
EVENTUALLY_S = 30.0
PASSWORDS = {"author": "author-demo-pass", "author2": "author2-demo-pass"}


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
    for url, env in site_served(var_dir, _serves_the_api, **(extra_env or {})):
        yield LiveSite(url, env)


def _serves_the_api(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/schema/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def live_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    yield from start_site(tmp_path_factory.mktemp("agentsite-api"))
