"""A live daphne (manage.py serve, own SQLite) and Debian's chromium driven by Playwright."""

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.mcp_tools.servers import EVERYTHING_STDIO, TIME_SERVER
from tests.servers import free_port, site_served

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_START_S = 90
# Longest wait for something the server does on its own (plan, run, answer) to appear.
EVENTUALLY_MS = 30_000

# The browser logs every 4xx; these statuses carry a message the page shows in place.
REFUSAL_LOGGED = re.compile(r"Failed to load resource: .* status of 4(03|09|10|22)\b")

PASSWORDS = {
    "author": "author-demo-pass",
    "author2": "author2-demo-pass",
    "reviewer": "reviewer-demo-pass",
    "reviewer2": "reviewer2-demo-pass",
    "finance": "finance-demo-pass",
    "operator": "operator-demo-pass",
}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own server
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Remember each phase's outcome on the test item, for the failure diagnostics below."""
    report = yield
    item.stash.setdefault(OUTCOMES, {})[report.when] = report
    return report


OUTCOMES = pytest.StashKey[dict]()
SERVER_LOG = pytest.StashKey[Path]()
SERVER_ENV = pytest.StashKey[dict]()


class MailSink:
    """What the server's mail reached: a real SMTP server (aiosmtpd) on loopback."""

    def __init__(self) -> None:
        self.messages: list = []
        self.arrived = threading.Condition()

    def wait_for(self, match, timeout: float = EVENTUALLY_MS / 1000):
        """The first message match(message) accepts, waiting (woken by each arrival) for it."""
        with self.arrived:
            found = self.arrived.wait_for(
                lambda: next((m for m in self.messages if match(m)), None), timeout
            )
        assert found is not None, (
            f"no such email arrived; got {[m['Subject'] for m in self.messages]}"
        )
        return found


@pytest.fixture(scope="session")
def mail_sink():
    from email import message_from_bytes
    from email.policy import default

    from aiosmtpd.controller import Controller

    sink = MailSink()

    class Handler:
        async def handle_DATA(self, server, session, envelope) -> str:
            message = message_from_bytes(envelope.content, policy=default)
            with sink.arrived:
                sink.messages.append(message)
                sink.arrived.notify_all()
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    sink.port = port
    yield sink
    controller.stop()


@pytest.fixture(scope="session")
def daphne_server(tmp_path_factory, request, mail_sink):
    """`manage.py serve` on a free port with its own var dir, until it answers; then stopped.
    Its emails go to mail_sink, with links to itself."""
    site = served(tmp_path_factory.mktemp("agentsite-var"), mail_port=mail_sink.port)
    url, env, log_path = next(site)
    request.config.stash[SERVER_ENV] = env
    request.config.stash[SERVER_LOG] = log_path
    yield url
    next(site, None)


def served(var_dir: Path, *, mail_port: int | None = None, **extra_env: str):
    """Start `manage.py serve` (extra_env on top of the tests' own; its mail to mail_port, if
    given); yields (url, env, log path) once it answers, and stops it when resumed. A module
    with settings of its own (approval rules) serves its own site: the shared one keeps the
    defaults."""
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.browser.strict_csp_settings",
        # Real MCP servers (test_browser_mcp_approval, test_browser_mcp_servers), started in the
        # background when the server process starts.
        "AGENTSITE_MCP_SERVERS": json.dumps({"time": TIME_SERVER, "everything": EVERYTHING_STDIO}),
        **extra_env,
    }
    if mail_port is not None:
        env.update(AGENTSITE_SMTP_HOST="127.0.0.1", AGENTSITE_SMTP_PORT=str(mail_port))
    for url, site_env in site_served(
        var_dir, lambda url: _answers(f"{url}/accounts/login/"), **env
    ):
        yield url, site_env, var_dir / "server.log"


@pytest.fixture
def server_env(daphne_server, request):
    """The environment the live server runs with (and manage.py against it)."""
    return request.config.stash[SERVER_ENV]


@pytest.fixture
def manage(server_env):
    """manage("run_goal", ...) runs a management command against the live server's database."""

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**server_env, **env},
            capture_output=True,
            text=True,
            timeout=EVENTUALLY_MS / 1000,
            check=False,
        )

    return run


@pytest.fixture
def ends_runs(manage):
    """ends_runs(run_id): the run is cancelled after the test, so its approvals leave the inbox.

    The server is shared by the whole session: later tests expect an inbox this test emptied.
    """
    run_ids: list[str] = []
    yield run_ids.append
    for run_id in run_ids:
        ended = manage("cancel_run", str(run_id), "--wait", "20")
        assert ended.returncode == 0, ended.stderr


# Per module, not per session: Playwright's sync API keeps an event loop running in this thread,
# and Django refuses database work in the tests after it while that loop is alive.
@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EVENTUALLY_MS)

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (./dev test does)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def open_page(browser, request):
    """open_page("who") -> a page of a fresh browser context; its console errors fail the test."""
    contexts = []
    errors: list[str] = []

    def open_(who: str):
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        context.set_default_timeout(EVENTUALLY_MS)
        contexts.append(context)
        page = context.new_page()
        # Scripts must run cleanly: a CSP violation, an htmx swap without a target or a JS
        # error is logged as a console error.
        page.on("pageerror", lambda error: errors.append(f"{who}: {error}"))
        page.on(
            "console",
            lambda message: (
                message.type == "error"
                and not REFUSAL_LOGGED.match(message.text)
                and errors.append(f"{who}: {message.text}")
            ),
        )
        return page

    yield open_
    call = request.node.stash.get(OUTCOMES, {}).get("call")
    if call is not None and call.failed:
        _explain_failure(request.node.name, contexts, request.config.stash.get(SERVER_LOG, None))
    found = list(errors)
    for context in contexts:
        context.close()
    assert not found, "errors in the browser console:\n" + "\n".join(found)


@pytest.fixture
def sign_in(open_page, daphne_server):
    """sign_in("reviewer") -> a page of a fresh browser context, signed in as that demo user."""
    from playwright.sync_api import expect

    def open_as(username: str):
        page = open_page(username)
        page.goto(f"{daphne_server}/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORDS[username])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("link", name="New goal")).to_be_visible()
        return page

    return open_as


@pytest.fixture
def screenshot():
    """screenshot(page, "inbox") saves artifacts/screenshots/inbox.png (the whole page)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def save(page, name: str, *, full_page: bool = True) -> None:
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)

    return save


def _explain_failure(test_name: str, contexts, log: Path | None) -> None:
    """Screenshots of every open page and the server's log, where a failure is looked into."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for index, context in enumerate(contexts):
        for number, page in enumerate(context.pages):
            path = SCREENSHOTS / f"failed-{test_name}-{index}-{number}.png"
            page.screenshot(path=str(path), full_page=True)
    if log is not None and log.exists():
        print(f"--- server log (last lines) ---\n{log.read_text()[-6000:]}")


CLEAN_SLATE = """
import time
from plans.models import LedgerEntry, Run
from plans.services.runs import run_cancel
for run in Run.objects.exclude(status__in=Run.TERMINAL).select_related("goal"):
    run_cancel(run=run, user=None)
deadline = time.monotonic() + 20
while Run.objects.exclude(status__in=Run.TERMINAL).exists() and time.monotonic() < deadline:
    time.sleep(0.1)
LedgerEntry.objects.all().delete()
"""


@pytest.fixture(autouse=True)
def clean_slate(manage):
    """After each test the shared server has nothing waiting and a shop that forgot its effects.

    Later tests expect an empty inbox, and each run's refund is an effect of its own
    (idempotency keys are per run): a second full refund of the demo order would be refused.
    """
    yield
    cleared = manage("shell", "-c", CLEAN_SLATE)
    assert cleared.returncode == 0, cleared.stderr
