"""Fixtures configuring real MCP servers for one test and stopping them after it."""

import pytest

from tests.mcp_tools.servers import TIME_SERVER


@pytest.fixture
def mcp_servers(settings):
    """Configure MCP servers for one test; every server it started is stopped afterwards."""
    from plans.mcp.tools import close_all

    def configure(**servers):
        settings.AGENTSITE_MCP_SERVERS = servers

    yield configure
    close_all()


@pytest.fixture
def time_server(mcp_servers):
    mcp_servers(time=TIME_SERVER)
