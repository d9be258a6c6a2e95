"""Migration 0035: votes cast before it keep counting (their approval's preview is the one they
saw), and earlier preview rows get their arguments' hash."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from plans.models import Approval, ApprovalVote, ToolPreview
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests import preview_tools

pytestmark = pytest.mark.django_db(transaction=True)


def migrate(target=None):
    """To a migration of this app, or (None) to the latest of every app."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([("plans", target)] if target else executor.loader.graph.leaf_nodes())


def test_earlier_votes_keep_their_approvals_version_and_previews_get_their_hash(
    settings, author, reviewer
):
    settings.AGENTSITE_TOOL_MODULES = ["tests.preview_tools"]
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.two_for_shipping"]
    preview_tools.reset(widget=10)
    steps = [{"id": 1, "tool": "ship", "args": {"item": "widget", "quantity": 3}}]
    run = run_create(author=author, goal_text="ship", plan_data={"steps": steps})
    advance_run(run.pk)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    try:
        migrate("0034_run_replay")  # as the rows were before: no version, no hash
        migrate("0035_previews_edits")
    finally:
        migrate()  # the models read below are today's

    approval = Approval.objects.get(run=run)
    assert ApprovalVote.objects.get().target_version == "widget@1"
    assert approval.approvals_counted == 1
    assert ToolPreview.objects.get().args_sha256 == approval.args_sha256
