"""A server's tools/list_changed re-reads its catalog at once, not at the next 30 s re-list."""

import threading

import pytest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from plans.mcp.config import configured_servers
from plans.mcp.connection import CATALOG_TTL_S
from plans.mcp.tools import connection_for, servers_start
from tests.mcp_tools.servers import (
    EVERYTHING_JS,
    EVERYTHING_STDIO,
    HOSTILE_SERVER,
    everything_installed,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Far below the re-list period, so only the notice can have brought the new tool.
WITHIN_S = CATALOG_TTL_S / 3


def test_a_tool_the_server_announces_is_in_the_catalog_without_a_registry_read(mcp_servers):
    mcp_servers(hostile=HOSTILE_SERVER)
    connection = connection_for(configured_servers()["hostile"])
    assert "export_all" not in [tool.name for tool in connection.tools(start=False)]
    relisted = threading.Event()
    connection.on_relisted = relisted.set

    connection.call_tool("grow", {}, timeout_s=10, meta=None)  # adds export_all, announces it

    assert relisted.wait(WITHIN_S), "the catalog was not re-read after the server's notice"
    # start=False: only what is already in memory, so nothing here asked the server again.
    assert "export_all" in [tool.name for tool in connection.tools(start=False)]


@pytest.mark.skipif(not everything_installed(), reason=f"run ./dev test to install {EVERYTHING_JS}")
def test_a_bare_list_changed_notification_re_reads_the_catalog(mcp_servers):
    # server-everything (an older protocol version: bare notifications, no listen stream)
    # registers tools once the client has initialised, and announces them.
    mcp_servers(start=False, everything=EVERYTHING_STDIO)
    connection = connection_for(configured_servers()["everything"])
    relisted = threading.Event()
    connection.on_relisted = relisted.set

    servers_start(wait=True)

    assert relisted.wait(WITHIN_S), "the catalog was not re-read after the server's notice"
    assert connection._client.session.protocol_version not in MODERN_PROTOCOL_VERSIONS
