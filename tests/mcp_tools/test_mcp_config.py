"""AGENTSITE_MCP_SERVERS read: trust is off unless set, and "tools" keys may be patterns."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from plans.mcp.config import server_config


def config(**entry):
    return server_config("s", {"command": "mcp-server", **entry})


def test_annotations_are_untrusted_unless_the_operator_says_so():
    assert config().trust_annotations is False
    assert config(trust_annotations=True).trust_annotations is True
    assert server_config("w", {"url": "https://mcp.example/mcp"}).trust_annotations is False


def test_trust_annotations_must_be_true_or_false():
    with pytest.raises(
        ImproperlyConfigured, match=r"\['trust_annotations'\] must be true or false"
    ):
        config(trust_annotations="yes")


def test_a_tools_own_entry_wins_then_the_most_specific_pattern_field_by_field():
    servers = config(
        tools={
            "*": {"timeout_s": 60},
            "get_*": {"destructive": False, "timeout_s": 10},
            "get_secret": {"timeout_s": 5},
            "get_secret_*": {"destructive": True},
        }
    )

    assert servers.override("get_secret").destructive is False  # from get_*, its entry unset
    assert servers.override("get_secret").destructive_from == "get_*"
    assert servers.override("get_secret").timeout_s == 5
    assert servers.override("get_secret_key").destructive is True
    assert servers.override("get_secret_key").timeout_s == 10
    assert servers.override("delete").destructive is None
    assert servers.override("delete").timeout_s == 60
    assert servers.unmatched_overrides(["delete"]) == ["get_*", "get_secret", "get_secret_*"]


def test_equally_specific_patterns_that_disagree_gate_the_tool():
    servers = config(tools={"get_*": {"destructive": False}, "*_all": {"destructive": True}})

    override = servers.override("get_all")
    assert (override.destructive, override.destructive_from) == (True, "*_all")


def test_a_tools_key_must_be_a_non_empty_name_or_pattern():
    with pytest.raises(ImproperlyConfigured, match="non-empty string"):
        config(tools={"": {"destructive": False}})
