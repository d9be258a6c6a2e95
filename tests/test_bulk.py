"""The executor's prepared SQL: rows written and read exactly as the ORM would."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from plans.bulk import (
    JSONText,
    field_value,
    insert_new,
    insert_rows,
    new_row,
    reload,
    rows_where,
    update_one_returning,
    update_rows,
)
from plans.models import ModelCall, Plan, Run, RunEvent, Step, ToolCall
from plans.selectors.plans import plan_current
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db

PLAN = {
    "steps": [
        {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}},
        {"id": 2, "tool": "price", "args": {"item": "AirPods 4"}},
        {
            "id": 3,
            "tool": "calculator",
            "args": {"expression": "{{1}} + {{2}}"},
            "depends_on": [1, 2],
        },
    ]
}


@pytest.fixture
def run(author):
    return run_create(author=author, goal_text="bulk", plan_data=PLAN)


def steps_of(run):
    return list(Step.objects.filter(plan__run=run).order_by("step_id"))


def test_inserted_rows_read_back_through_the_orm_with_every_type_intact(run):
    step = steps_of(run)[0]
    at = timezone.now()
    key = "k" * 64
    insert_rows(
        ToolCall,
        [
            {
                "run_id": run.pk,
                "step_id": step.pk,
                "tool": "price",
                "attempt": attempt,
                "args": {"item": "iPhone 16", "nested": [1, 2.5, None, "é"]},
                "result": 79900 if attempt == 1 else None,
                "error": "" if attempt == 1 else "boom",
                "idempotency_key": key,
                "started_at": at,
                "duration_ms": 1.5,
            }
            for attempt in (1, 2)
        ],
    )

    first, second = ToolCall.objects.filter(step=step).order_by("attempt")
    assert first.args == {"item": "iPhone 16", "nested": [1, 2.5, None, "é"]}
    assert (first.result, first.error, second.result, second.error) == (79900, "", None, "boom")
    assert first.started_at == at and second.started_at == at
    assert first.idempotency_key == key and first.duration_ms == 1.5


def test_json_given_as_text_is_stored_as_that_json_not_as_a_string(run):
    step = steps_of(run)[0]
    insert_rows(
        ToolCall,
        [
            {
                "run_id": run.pk,
                "step_id": step.pk,
                "tool": "price",
                "attempt": 1,
                "args": JSONText('{"item": "iPhone 16"}'),
                "result": JSONText("[1, 2]"),
                "error": "",
                "idempotency_key": "k",
                "started_at": timezone.now(),
                "duration_ms": 0.0,
            }
        ],
    )

    call = ToolCall.objects.get(step=step)
    assert call.args == {"item": "iPhone 16"} and call.result == [1, 2]


def test_decimals_keep_every_digit(run):
    insert_rows(
        ModelCall,
        [
            {
                "run_id": run.pk,
                "purpose": "plan",
                "model": "m",
                "prices": {},
                "cost_usd": Decimal("0.00001234"),
                "latency_ms": 5,
                "error": "",
                "input_tokens": 1,
                "output_tokens": 2,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "created_at": timezone.now(),
            }
        ],
    )

    assert ModelCall.objects.get(run=run).cost_usd == Decimal("0.00001234")


def test_update_rows_sets_only_the_named_fields_of_each_row(run):
    one, two, three = steps_of(run)
    update_rows(
        Step,
        [
            {"id": one.pk, "status": "succeeded", "result": {"a": 1}},
            {"id": two.pk, "status": "failed", "result": None},
        ],
        ["status", "result"],
    )

    one, two, untouched = steps_of(run)
    assert (one.status, one.result) == ("succeeded", {"a": 1})
    assert (two.status, two.result) == ("failed", None)
    assert untouched.status == three.status and untouched.args == three.args


def test_rows_where_builds_instances_like_the_orm_in_the_order_asked(run):
    plan = plan_current(run)

    loaded = rows_where(Step, plan=plan.pk, order_by="-step_id")

    assert [s.step_id for s in loaded] == [3, 2, 1]
    expected = {s.pk: s for s in Step.objects.filter(plan=plan)}
    for step in loaded:
        orm = expected[step.pk]
        assert (step.tool, step.args, step.depends_on, step.status, step.round) == (
            orm.tool,
            orm.args,
            orm.depends_on,
            orm.status,
            orm.round,
        )
        assert not step._state.adding and step._state.db == "default"


def test_rows_where_finds_nothing_for_values_no_row_has(run):
    assert rows_where(Step, plan=plan_current(run).pk, tool="no-such-tool") == []


def test_field_value_reads_one_column_and_none_for_a_missing_row(run):
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)

    assert bool(field_value(Run, run.pk, "cancel_requested")) is True
    assert field_value(Run, run.pk + 1000, "cancel_requested") is None


def test_field_value_converts_as_the_orm_does(run):
    plan = plan_current(run)
    requests = [{"step": 1, "text": "cheaper, please"}]
    type(plan).objects.filter(pk=plan.pk).update(change_requests=requests)

    assert field_value(type(plan), plan.pk, "change_requests") == requests
    assert field_value(Run, run.pk, "cancel_requested") is False
    assert field_value(Run, run.pk, "created_at") == Run.objects.get(pk=run.pk).created_at


def test_update_one_returning_increments_sets_and_returns_the_new_values(run):
    before = Run.objects.get(pk=run.pk).last_seq

    updated = update_one_returning(
        Run,
        run.pk,
        increments={"last_seq": 3},
        values={"error": "x"},
        where={},
        where_after={},
        returning=("last_seq", "error"),
    )

    assert updated == (before + 3, "x")
    assert Run.objects.get(pk=run.pk).error == "x"


def test_update_one_returning_changes_nothing_when_the_fence_does_not_match(run):
    token = uuid.uuid4()
    Run.objects.filter(pk=run.pk).update(
        lease_token=token, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    before = Run.objects.get(pk=run.pk).last_seq

    for where in ({"lease_token": uuid.uuid4()}, {"lease_token": token}):
        assert (
            update_one_returning(
                Run,
                run.pk,
                increments={"last_seq": 1},
                values={},
                where=where,
                where_after={"lease_expires_at": timezone.now()},
                returning=("last_seq",),
            )
            is None
        )

    assert Run.objects.get(pk=run.pk).last_seq == before


def test_nothing_to_write_is_no_query(run, django_assert_num_queries):
    with django_assert_num_queries(0):
        insert_rows(ToolCall, [])
        update_rows(Step, [], ["status"])


def tool_call_row(run, *, started_at, attempt=1):
    step = steps_of(run)[0]
    return {
        "run_id": run.pk,
        "step_id": step.pk,
        "tool": "price",
        "attempt": attempt,
        "args": {"item": "iPhone 16"},
        "result": {"price": 79900, "note": "é"},
        "error": "",
        "idempotency_key": "k" * 64,
        "started_at": started_at,
        "duration_ms": 1.5,
    }


def stored_text(table, column, pk):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "{column}" FROM "{table}" WHERE "id" = %s', [pk])  # noqa: S608
        return cursor.fetchone()[0]


@pytest.mark.parametrize("microsecond", [0, 123456])
def test_times_and_json_are_stored_as_the_very_text_the_orm_stores(run, microsecond):
    at = timezone.now().replace(microsecond=microsecond)
    insert_rows(ToolCall, [tool_call_row(run, started_at=at)])
    by_orm = ToolCall.objects.create(**tool_call_row(run, started_at=at, attempt=2))
    ours = ToolCall.objects.get(step__plan__run=run, attempt=1)

    for column in ("started_at", "args", "result"):
        assert stored_text("plans_toolcall", column, ours.pk) == stored_text(
            "plans_toolcall", column, by_orm.pk
        )


def test_on_sqlite_statements_go_to_the_driver_unless_queries_are_counted(
    run, monkeypatch, django_assert_num_queries
):
    from django.db import connection

    def no_wrapper():
        raise AssertionError("Django's cursor was used")

    row = tool_call_row(run, started_at=timezone.now())
    with monkeypatch.context() as patched:
        patched.setattr(connection, "cursor", no_wrapper)
        insert_rows(ToolCall, [row])
        assert field_value(Run, run.pk, "status") == run.status
    # Counted (a test, DEBUG): through Django's cursor, so every statement is seen.
    with django_assert_num_queries(1):
        assert field_value(Run, run.pk, "status") == run.status


def test_a_refused_statement_raises_djangos_own_error(run):
    from django.db import IntegrityError

    first = RunEvent.objects.filter(run=run).order_by("seq").values().first()
    assert first is not None
    with pytest.raises(IntegrityError):
        insert_rows(RunEvent, [{k: v for k, v in first.items() if k != "id"}])  # seq taken


def plan_columns(pk):
    return {k: v for k, v in Plan.objects.filter(pk=pk).values().get().items() if k != "id"}


def test_a_new_row_is_stored_as_save_stores_it_and_the_instance_gets_its_key(run):
    first = plan_current(run)
    fields = {
        "run": run,
        "parent": first,
        "source": Plan.Source.REPLAN,
        "raw_output": '{"steps": []}',
        "problems": ["a", {"nested": [1, None]}],
        "forecast": {"model_usd": "0.01"},
    }
    ours = Plan(version=2, **fields)
    insert_new(ours)
    by_orm = Plan.objects.create(version=3, **fields)

    assert ours.pk is not None and not ours._state.adding and ours._state.db == "default"
    assert ours.created_at is not None  # auto_now_add, as save() sets it
    stored, expected = plan_columns(ours.pk), plan_columns(by_orm.pk)
    for differing in ("version", "created_at"):
        stored.pop(differing), expected.pop(differing)
    assert stored == expected
    assert stored["parent_id"] == first.pk and stored["decision"] == ""  # a default
    assert stored_text("plans_plan", "problems", ours.pk) == stored_text(
        "plans_plan", "problems", by_orm.pk
    )


def test_a_new_row_refuses_an_expression_it_cannot_write_as_a_value(run):
    from django.db.models import F

    plan = Plan(run=run, version=F("version") + 1)
    with pytest.raises(TypeError, match="version"):
        new_row(plan)


def test_reload_reads_every_field_again_and_forgets_cached_relations(run):
    loaded = Run.objects.select_related("goal").get(pk=run.pk)
    goal = loaded._meta.get_field("goal")
    assert goal.is_cached(loaded)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error="gone", cost_usd="1.5")

    reload(loaded)
    by_orm = Run.objects.get(pk=run.pk)
    by_orm.refresh_from_db()
    for field in Run._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(by_orm, field.attname), field.name
    assert loaded.status == Run.Status.FAILED and loaded.cost_usd == Decimal("1.5")
    assert not goal.is_cached(loaded)  # read again when next asked for, as refresh_from_db does


def test_reload_of_a_row_that_is_gone_raises_does_not_exist(run):
    loaded = Run.objects.get(pk=run.pk)
    Run.objects.filter(pk=run.pk).delete()
    with pytest.raises(Run.DoesNotExist):
        reload(loaded)
