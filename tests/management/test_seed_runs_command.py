"""manage.py seed_runs: synthetic runs that look like real ones to every audit page."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from plans.demo.seeding import runs_seed
from plans.engine import idempotency_key
from plans.guards.audit import chain_problems
from plans.models import Approval, ModelCall, Plan, Run, RunEvent, Step, ToolCall
from plans.runtime.sweeper import sweep_once
from tests.pages import section

pytestmark = pytest.mark.django_db


def test_it_creates_the_runs_with_plans_calls_and_a_spread_of_outcomes():
    out = StringIO()

    call_command("seed_runs", "200", "--authors", "3", "--batch", "64", stdout=out)

    assert "Created 200 runs" in out.getvalue()
    assert Run.objects.count() == 200
    assert Run.objects.values("goal__author").distinct().count() == 3
    assert {"completed", "failed", "blocked"} <= set(Run.objects.values_list("status", flat=True))
    assert Step.objects.exists() and ToolCall.objects.exists() and Approval.objects.exists()
    completed = Run.objects.filter(status="completed").first()
    assert completed.model_call_count == ModelCall.objects.filter(run=completed).count() == 2
    assert completed.duration_ms > 0 and completed.tools_used


def test_seeded_runs_have_intact_event_hash_chains():
    call_command("seed_runs", "20", stdout=StringIO())

    assert [problem for run in Run.objects.all() for problem in chain_problems(run)] == []


def test_the_same_seed_gives_the_same_runs_after_the_existing_ones():
    call_command("seed_runs", "5", "--seed", "7", stdout=StringIO())
    first = list(Run.objects.order_by("pk").values_list("status", "cost_usd"))

    call_command("seed_runs", "5", "--seed", "7", stdout=StringIO())

    assert list(Run.objects.order_by("pk").values_list("status", "cost_usd"))[5:] == first


def test_seeded_runs_render_on_the_list_audit_and_costs_pages(client, operator):
    call_command("seed_runs", "30", stdout=StringIO())
    client.force_login(operator)
    run = Run.objects.filter(status="blocked").first() or Run.objects.first()

    assert client.get(reverse("plans:run_list")).status_code == 200
    assert client.get(reverse("plans:run_audit", args=[run.pk])).status_code == 200
    assert client.get(reverse("plans:costs")).status_code == 200


def test_it_refuses_a_count_below_one():
    with pytest.raises(CommandError, match="positive"):
        call_command("seed_runs", "0", stdout=StringIO())


def test_it_refuses_to_go_back_further_than_dates_can():
    with pytest.raises(CommandError, match="--days goes back at most 36,500 days, got 10,000,000"):
        call_command("seed_runs", "5", "--days", "10000000", stdout=StringIO())


def test_a_sweeper_finds_nothing_to_take_over_or_expire_in_seeded_runs(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    call_command("seed_runs", "300", "--days", "30", stdout=StringIO())

    assert not Run.objects.filter(status__in=[Run.Status.RUNNING, Run.Status.PLANNING]).exists()
    assert Approval.objects.filter(decision="pending").exists()
    assert sweep_once() == []
    assert not Approval.objects.filter(decision="expired").exists()


def test_seeded_approvals_ask_about_resolved_arguments_as_a_run_does():
    call_command("seed_runs", "200", stdout=StringIO())

    approvals = Approval.objects.select_related("step")
    assert approvals.exists()
    for approval in approvals:
        assert "{{" not in json.dumps(approval.args), approval.args
        assert approval.args == approval.step.resolved_args
    for call in ToolCall.objects.all():
        assert "{{" not in json.dumps(call.args), call.args


def seed_with_copies(count: int = 60, now=None) -> None:
    """Ten generated runs, then one in five generated and the rest copied (as at a million)."""
    runs_seed(
        count=count,
        authors=3,
        days=30,
        seed=3,
        batch=25,
        originals_every=5,
        originals_first=10,
        now=now,
    )


def assert_copied_runs_read_as_runs(client) -> None:
    """Copied runs are whole runs of their own: their rows point at them, their dates follow
    theirs, and the runs list, run page, audit page and inbox show them."""
    copies = Run.objects.filter(last_seq=0).select_related("goal")
    assert copies.count() >= 30
    originals = Run.objects.exclude(last_seq=0)
    assert not RunEvent.objects.filter(run__in=copies).exists()
    for run in copies:
        plan = Plan.objects.get(run=run)
        steps = list(Step.objects.filter(plan=plan))
        assert steps or run.status == "invalid_plan"
        assert ModelCall.objects.filter(run=run).count() == run.model_call_count
        assert all(step.started_at is None or step.started_at >= run.created_at for step in steps)
        for call in ToolCall.objects.filter(run=run).select_related("step__plan"):
            assert call.step.plan.run_id == run.pk and call.started_at >= run.created_at
            if call.tool in ("book_flight", "book_hotel", "issue_refund", "send_email"):
                assert call.idempotency_key == idempotency_key(
                    call.tool, call.args, run_id=run.pk, step=""
                )
        for approval in Approval.objects.filter(run=run).select_related("step__plan"):
            assert approval.step.plan.run_id == run.pk
        assert chain_problems(run) == []
    assert len({run.goal.author_id for run in copies}) > 1
    assert {run.goal.text for run in copies} <= {run.goal.text for run in originals}
    assert len({run.created_at for run in copies}) == copies.count()

    listing = client.get(reverse("plans:run_list") + "?sort=-cost")
    assert listing.status_code == 200
    copy = copies.filter(status="completed").first()
    page = client.get(reverse("plans:run_detail", args=[copy.pk]))
    assert page.status_code == 200 and copy.goal.text in page.content.decode()
    audit = client.get(reverse("plans:run_audit", args=[copy.pk])).content.decode()
    assert "hash chain intact" in audit and "0 events" in audit
    assert section(audit, "tool-calls-heading").count("<tr>") == 1 + copy.tool_calls.count()
    waiting = copies.filter(status="awaiting_approval").first()
    assert waiting is not None
    inbox = client.get(reverse("plans:inbox")).content.decode()
    assert f"/runs/{waiting.pk}/" in inbox


def test_copied_runs_are_runs_of_their_own_on_every_page(client, django_user_model):
    seed_with_copies()
    client.force_login(django_user_model.objects.create_superuser("seed-operator"))

    assert Run.objects.count() == 60
    assert_copied_runs_read_as_runs(client)


def test_the_same_seed_gives_the_same_copies():
    now = timezone.now()
    seed_with_copies(now=now)
    first = list(Run.objects.order_by("pk").values_list("status", "cost_usd", "created_at"))
    Run.objects.all().delete()

    seed_with_copies(now=now)

    assert list(Run.objects.order_by("pk").values_list("status", "cost_usd", "created_at")) == first


def test_seeded_spend_is_on_the_costs_page_at_once():
    """Seeding writes around the services: it sums the costs rollup afresh at its end."""
    from plans.journal.rollup import rollup_drift
    from plans.selectors.costs import cost_report

    call_command("seed_runs", "40", "--days", "5", stdout=StringIO())

    assert rollup_drift() == []
    report = cost_report(days=7)
    assert report.model_calls == ModelCall.objects.count() > 0
    assert report.total_usd > 0


def test_it_streams_its_rows_a_few_hundred_runs_at_a_time_whatever_the_batch(monkeypatch):
    from plans.demo import seeding

    monkeypatch.setattr(seeding, "FLUSH_RUNS", 7)
    insert, held = seeding._Rows.insert, []

    def counted(rows):
        held.append(len(rows.by_model[Run]))
        insert(rows)

    monkeypatch.setattr(seeding._Rows, "insert", counted)

    call_command("seed_runs", "40", "--batch", "30", stdout=StringIO())

    assert Run.objects.count() == 40
    assert max(held) == 7 and sum(held) == 40  # never the batch's 30 at once


def test_with_debug_on_its_query_log_does_not_grow_with_the_runs(monkeypatch, settings):
    from django.db import connection, reset_queries

    from plans.demo import seeding

    settings.DEBUG = True  # manage.py's default: Django keeps every statement it runs
    monkeypatch.setattr(seeding, "FLUSH_RUNS", 5)
    logged = []
    for count in (20, 80):
        reset_queries()
        runs_seed(count=count, batch=40, originals_every=3, originals_first=4)
        logged.append(len(connection.queries))

    assert logged[1] <= logged[0]  # a few flushes' statements, not every flush's
