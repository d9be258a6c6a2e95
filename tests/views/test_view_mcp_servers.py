"""The operators' MCP servers page, on real servers: state, last error and (re)start per server,
gating and limit per tool, the servers' text escaped, and never a wait for a server to start."""

import pytest
from django.test import Client
from django.urls import reverse

from plans.mcp import mcp_servers_start
from plans.mcp.config import configured_servers
from plans.mcp.tools import connection_for
from plans.roles import roles_ensure
from tests.mcp_tools.servers import HOSTILE_SERVER, TIME_SERVER, held_time_server

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = reverse("plans:mcp_servers")


@pytest.fixture
def operator_client(client, django_user_model):
    user = django_user_model.objects.create_user("oscar", password="oscar-pass-123")
    user.groups.add(roles_ensure()["operators"])
    client.force_login(user)
    return client


def server_section(html: str, name: str) -> str:
    start = html.index(f'data-server="{name}"')
    end = html.find('data-server="', start + 1)
    return html[start : end if end != -1 else len(html)]


def test_the_page_answers_while_a_server_is_still_starting_and_says_so(
    operator_client, mcp_servers, tmp_path
):
    with held_time_server(tmp_path) as (held, release):
        mcp_servers(start=False, slow=held)
        mcp_servers_start()  # as the serving process does when it starts

        page = operator_client.get(PAGE).content.decode()
        runs = operator_client.get(reverse("plans:run_list"))  # it reads the registry

        connection = connection_for(configured_servers()["slow"])
        assert connection.state.label == "starting"  # both answered before the server did
        assert runs.status_code == 200
        section = server_section(page, "slow")
        assert 'data-state="starting"' in section
        assert "its tools are listed once it answers" in section

        release()
        connection.wait_started()
        section = server_section(operator_client.get(PAGE).content.decode(), "slow")
        assert 'data-state="running"' in section
        assert 'data-tool="slow.get_current_time"' in section


def test_each_tool_shows_its_gating_what_decided_it_and_its_limit(operator_client, mcp_servers):
    mcp_servers(time={**TIME_SERVER, "tools": {"convert_*": {"destructive": True, "timeout_s": 7}}})

    section = server_section(operator_client.get(PAGE).content.decode(), "time")

    assert 'data-state="running"' in section
    assert "stdio: <code>" in section and "mcp_server_time" in section
    current = section[section.index('data-tool="time.get_current_time"') :]
    convert = section[section.index('data-tool="time.convert_time"') :]
    assert '<td class="mcp-gating">read-only</td>' in current.split("</tr>")[0]
    assert "annotation trusted" in current.split("</tr>")[0]
    row = convert.split("</tr>")[0]
    assert '<td class="mcp-gating">destructive (needs approval)</td>' in row
    assert "overridden: pattern convert_*" in row
    assert '<td class="mcp-limit">7 s</td>' in row
    assert "Last (re)start" in section and "not started yet" not in section


def test_a_server_that_cannot_start_shows_its_last_error(operator_client, mcp_servers):
    mcp_servers(broken={"command": "/nonexistent/mcp-server"})

    section = server_section(operator_client.get(PAGE).content.decode(), "broken")

    assert 'data-state="failed"' in section
    error = section[section.index('class="mcp-last-error"') :].split("</dd>")[0]
    assert "No such file or directory" in error or "FileNotFoundError" in error


def test_a_hostile_servers_text_is_escaped_and_its_hidden_characters_shown(
    operator_client, mcp_servers
):
    mcp_servers(hostile=HOSTILE_SERVER)

    section = server_section(operator_client.get(PAGE).content.decode(), "hostile")

    row = section[section.index('data-tool="hostile.delete_everything"') :].split("</tr>")[0]
    assert "destructive (needs approval)" in row and "untrusted default" in row
    assert "&lt;/server_tools&gt;" in row and "</server_tools>" not in row
    for raw in ("\u202e", "\x1b", "\r"):
        assert raw not in section
    assert "U+202E" in row


def test_only_operators_see_the_page_and_its_link(operator_client, author, mcp_servers):
    mcp_servers(start=False)
    client = Client()
    client.force_login(author)

    assert client.get(PAGE).status_code == 403
    assert PAGE not in client.get(reverse("plans:run_list")).content.decode()
    nav = operator_client.get(reverse("plans:run_list")).content.decode()
    assert f'href="{PAGE}"' in nav
    assert "No MCP servers are configured" in operator_client.get(PAGE).content.decode()
