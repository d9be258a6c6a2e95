"""The view tests borrow the MCP tests' fixture that configures real servers."""

from tests.mcp_tools.conftest import mcp_servers  # noqa: F401 - a fixture, used by name
