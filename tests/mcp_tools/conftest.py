"""Fixtures configuring real MCP servers for one test and stopping them after it."""

import pytest

from tests.mcp_tools.servers import TIME_SERVER


@pytest.fixture
def mcp_servers(settings):
    """Configure MCP servers for one test; every server it started is stopped afterwards."""
    from plans.mcp.tools import close_all, servers_start

    def configure(*, start=True, **servers):
        settings.AGENTSITE_MCP_SERVERS = servers
        if start:  # as the process does when it starts; waits here, so tests see them up
            servers_start(wait=True)

    yield configure
    close_all()


@pytest.fixture
def time_server(mcp_servers):
    mcp_servers(time=TIME_SERVER)
