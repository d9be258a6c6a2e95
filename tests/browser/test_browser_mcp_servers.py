"""The operators' MCP servers page, from the nav, with the real servers the suite runs."""

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import EVENTUALLY_MS

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots")


def test_an_operator_finds_each_server_its_state_and_each_tools_gating(sign_in, screenshot):
    operator = sign_in("operator")
    operator.get_by_role("link", name="MCP servers").click()
    expect(operator.get_by_role("heading", name="MCP servers", level=1)).to_be_visible()

    # Started in the background when the server process started: reload until both are up.
    deadline = time.monotonic() + EVENTUALLY_MS / 1000
    states = operator.locator(".mcp-server [data-state]")
    while {states.nth(i).get_attribute("data-state") for i in range(states.count())} != {"running"}:
        assert time.monotonic() < deadline, "the MCP servers did not come up"
        operator.reload()

    time_server = operator.locator('[data-server="time"]')
    expect(time_server).to_contain_text("stdio")
    expect(time_server).to_contain_text("Last (re)start")
    current = time_server.locator('[data-tool="time.get_current_time"]')
    expect(current.locator(".mcp-gating")).to_have_text("read-only")
    expect(current.locator(".mcp-gated-by")).to_have_text("annotation trusted")
    expect(current.locator(".mcp-limit")).to_have_text(re.compile(r"^\d+ s$"))
    everything = operator.locator('[data-server="everything"]')
    logging = everything.locator('[data-tool="everything.toggle-simulated-logging"]')
    expect(logging.locator(".mcp-gating")).to_have_text("destructive (needs approval)")
    text = operator.locator("main").inner_text()
    assert not re.search(r"[\x00-\x08\x0b-\x1f\u202a-\u202e\u2066-\u2069]", text)

    screenshot(operator, "mcp_servers")
    SHOTS.mkdir(parents=True, exist_ok=True)
    operator.screenshot(path=str(SHOTS / "mcp_servers.png"), full_page=True)
    operator.set_viewport_size({"width": 420, "height": 900})
    operator.screenshot(path=str(SHOTS / "mcp_servers_narrow.png"), full_page=True)
