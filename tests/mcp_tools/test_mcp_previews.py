"""An MCP tool's preview, as its server's settings name it: a read-only tool of the same server
with mapped arguments (the hostile server's lookup, whose text stays data), else "no preview"."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from plans.mcp.config import server_config
from plans.models import Approval, ToolPreview
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.mcp_tools.hostile_server import LOOKUP_RESULT
from tests.mcp_tools.servers import HOSTILE_SERVER

pytestmark = pytest.mark.django_db(transaction=True)

DELETE = {"id": 1, "tool": "hostile.delete_everything", "args": {"confirm": "yes"}}
READ_ONLY_LOOKUP = {"lookup": {"destructive": False}}


def requested(author):
    run = run_create(author=author, goal_text="tidy up", plan_data={"steps": [DELETE]})
    advance_run(run.pk)
    return Approval.objects.get(run=run)


def test_a_read_only_server_tool_named_in_preview_previews_the_call(author, mcp_servers):
    mcp_servers(
        hostile={
            **HOSTILE_SERVER,
            "tools": READ_ONLY_LOOKUP,
            "preview": {"delete_everything": {"tool": "lookup", "args": {"word": "confirm"}}},
        }
    )

    approval = requested(author)

    assert approval.preview["summary"] == f"hostile.lookup says: result: {LOOKUP_RESULT}"
    assert approval.preview["facts"] == [["result", LOOKUP_RESULT]]
    assert approval.preview["target_version"].startswith("sha256:")
    assert ToolPreview.objects.get(run=approval.run).error == ""


def test_without_a_preview_setting_an_mcp_tool_has_no_preview(author, mcp_servers):
    mcp_servers(hostile=HOSTILE_SERVER)

    assert requested(author).preview is None  # the card says "no preview"


def test_a_preview_tool_that_is_not_read_only_is_never_called(author, mcp_servers):
    # grow adds a tool to the server when called: an effect, so never a preview.
    mcp_servers(hostile={**HOSTILE_SERVER, "preview": {"delete_everything": {"tool": "grow"}}})

    approval = requested(author)

    assert approval.preview == {
        "error": "the preview tool hostile.grow is not read-only here (untrusted default), and "
        "a preview must not act"
    }


def test_a_bad_preview_setting_names_the_server_and_the_key():
    with pytest.raises(ImproperlyConfigured, match=r"\['preview'\]\['delete_\*'\]: name one tool"):
        server_config("hostile", {**HOSTILE_SERVER, "preview": {"delete_*": {"tool": "lookup"}}})
    with pytest.raises(ImproperlyConfigured, match=r"\['preview'\]\['x'\] must be an object"):
        server_config("hostile", {**HOSTILE_SERVER, "preview": {"x": {"to": "lookup"}}})
