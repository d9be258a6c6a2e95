"""Prepared SQL for hot paths (the executor, storing plans, the notifier, the costs rollup,
bulk loads): many-row inserts and updates, a new instance inserted and an instance reloaded as
save() and refresh_from_db() would, fenced updates, simple loads; and the check of a connection
a long-lived thread keeps between uses (KeptConnection).

The ORM builds and compiles a query (or a model instance per row) on every call; on the
executor's path that costs far more than the database does (~400 us against ~20 us here).
Statements here are built once per model and field list, and values are prepared by the
fields' own database conversion, skipped only where the value is already what the driver
takes (str, int, bool, None into plain columns) or is JSON encoded already (JSONText).
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX as _FORMAT_QMARK
from django.db.models import Model

logger = logging.getLogger(__name__)

Prepare = Callable[[Any, BaseDatabaseWrapper], Any]

# A kept connection idle this long is checked (SELECT 1) before its next use: a server that
# restarted meanwhile is found then, not by the write that needed it. Busier connections are
# not checked (a failure there is a lost connection, which their users retry).
IDLE_CHECK_S = 1.0

# Columns whose database value is the Python value itself when it is one of _PASS_THROUGH.
_PLAIN_FIELDS = (models.CharField, models.TextField, models.IntegerField, models.BooleanField)
_PASS_THROUGH = frozenset({str, int, bool, type(None)})
# Columns whose values are immutable (datetime, UUID, Decimal): a repeat needs no conversion.
_MEMO_FIELDS = (models.DateTimeField, models.UUIDField, models.DecimalField)


class JSONText(str):
    """JSON already encoded: a JSONField column given one stores this text as it is."""


class _Verbatim(json.JSONEncoder):
    """Hands JSONText through the backend's own JSON adaptation without encoding it again."""

    def encode(self, o: Any) -> str:
        return str(o) if type(o) is JSONText else super().encode(o)


def insert_rows(model: type[Model], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT rows given as {attname: value}, all with the same keys, via executemany."""
    if not rows:
        return
    connection = _connection(model)
    attnames = tuple(rows[0])
    sql, prepares = _insert_statement(connection.alias, model, attnames)
    pairs = list(zip(prepares, attnames, strict=True))
    params = [[prepare(row[name], connection) for prepare, name in pairs] for row in rows]
    execute(connection, sql, params, many=True)


def new_row(instance: Model) -> dict[str, Any]:
    """A new instance's columns as save() would insert them ({attname: value}; fields'
    pre_save included, so auto_now_add is set on the instance too), for insert_rows and
    insert_new. No model signal is sent."""
    row = {}
    for field in type(instance)._meta.concrete_fields:
        if field.primary_key and getattr(instance, field.attname) is None:
            continue  # the database numbers it
        value = field.pre_save(instance, True)
        if hasattr(value, "resolve_expression"):
            raise TypeError(f"{field} is an expression ({value!r}): save() it instead")
        row[field.attname] = value
    return row


def insert_new(instance: Model) -> None:
    """INSERT a new instance's row (new_row) and give it the primary key the database chose, as
    save() does: it is then the instance of a stored row."""
    model = type(instance)
    row = new_row(instance)
    connection = _connection(model)
    sql, prepares = _insert_statement(connection.alias, model, tuple(row))
    pk_column = column_sql(model._meta, connection.ops.quote_name, model._meta.pk.name)
    params = [
        prepare(value, connection) for prepare, value in zip(prepares, row.values(), strict=True)
    ]
    (pk,) = execute(connection, f"{sql} RETURNING {pk_column}", params, fetch=FETCH_ONE)
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = connection.alias


def reload(instance: Model) -> None:
    """Read an instance's fields from its row again and forget its cached relations, as
    refresh_from_db() does, in one prepared statement (its query building costs ten times the
    read: ~0.4 ms against ~0.04 ms)."""
    model = type(instance)
    meta = model._meta
    found = rows_where(model, **{meta.pk.attname: instance.pk})
    if not found:
        missing = f"{meta.object_name} {instance.pk} is not stored"
        raise model.DoesNotExist(missing)  # type: ignore[attr-defined]  # every concrete model's
    fresh = found[0]
    for field in meta.concrete_fields:
        instance.__dict__[field.attname] = fresh.__dict__[field.attname]
    instance._prefetched_objects_cache = {}  # type: ignore[attr-defined]
    for relation in (*meta.fields, *meta.related_objects, *meta.private_fields):
        if relation.is_relation and relation.is_cached(instance):
            relation.delete_cached_value(instance)
    instance._state.db = fresh._state.db


def load_rows(model: type[Model], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT many new rows as insert_rows does, for bulk loads (seed_runs): COPY on PostgreSQL.

    Plain columns (text, numbers, booleans, keys) take the rows' values as they are (str, int,
    bool or None); JSON, dates and decimals are converted by a function picked once per column,
    not by the fields' generic preparation, which costs more than the database does here.
    """
    if not rows:
        return
    connection = _connection(model)
    attnames = tuple(rows[0])
    sql, converts = _load_statement(connection.alias, connection.vendor, model, attnames)
    values = operator.itemgetter(*attnames) if len(attnames) > 1 else _one_tuple(attnames[0])
    params = []
    for row in rows:
        row_values = list(values(row))
        for index, convert in converts:
            row_values[index] = convert(row_values[index])
        params.append(row_values)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.copy(sql) as copy:
                for row_values in params:
                    copy.write_row(row_values)
        else:
            cursor.executemany(sql, params)


def _one_tuple(name: str) -> Callable[[Mapping[str, Any]], tuple[Any]]:
    return lambda row: (row[name],)


def update_rows(
    model: type[Model], rows: Sequence[Mapping[str, Any]], field_names: Sequence[str]
) -> None:
    """Set some fields of many rows, given as {"id": pk, field: value}, via executemany.

    Django's bulk_update builds one CASE expression per field that grows with the row count,
    which costs O(rows^2) in SQLite; executemany costs O(rows).
    """
    if not rows:
        return
    connection = _connection(model)
    sql, prepares = _update_statement(connection.alias, model, tuple(field_names))
    pairs = list(zip(prepares, field_names, strict=True))
    params = [
        [prepare(row[name], connection) for prepare, name in pairs] + [row["id"]] for row in rows
    ]
    execute(connection, sql, params, many=True)


def rows_where[M: Model](
    model: type[M], *, order_by: str = "", limit: int | None = None, **equals: Any
) -> list[M]:
    """Instances whose fields equal the given values (order_by: a field, "-" for descending)."""
    connection = connections[router.db_for_read(model)]
    sql = _select_statement(connection.alias, model, tuple(equals), order_by, limit)
    rows = execute(connection, sql, _prepared(connection, model, equals), fetch=FETCH_ALL)
    converters = _converters(connection.alias, connection.vendor, model)
    attnames = _attnames(model)
    instances = []
    for row in rows:
        values = list(row)
        for index, convert, column in converters:
            values[index] = convert(values[index], column, connection)
        instances.append(model.from_db(connection.alias, attnames, values))
    return instances


def field_value(model: type[Model], pk: Any, name: str) -> Any:
    """One field of one row, converted as the ORM would (None if there is no such row)."""
    connection = connections[router.db_for_read(model)]
    sql = _field_statement(connection.alias, model, name)
    row = execute(connection, sql, [pk], fetch=FETCH_ONE)
    if not row:
        return None
    value = row[0]
    for convert, column in _field_converters(connection.alias, connection.vendor, model, name):
        value = convert(value, column, connection)
    return value


@functools.cache
def _field_converters(
    alias: str, vendor: str, model: type[Model], name: str
) -> list[tuple[Callable[..., Any], Any]]:
    connection = connections[alias]
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{name} is not a concrete field"
    column = field.get_col(model._meta.db_table)
    converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
    return [(convert, column) for convert in converters]


def update_one_returning(
    model: type[Model],
    pk: Any,
    *,
    increments: Mapping[str, int],
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    where_after: Mapping[str, Any],
    returning: Sequence[str],
) -> tuple[Any, ...] | None:
    """UPDATE one row by pk (field += n, field = value) if it matches; the new raw values.

    The row must also have the values in where and values after those in where_after (for
    expiry times). Returns the returning fields as the database gives them, or None if no row
    matched.
    """
    connection = _connection(model)
    sql = _update_returning_statement(
        connection.alias,
        model,
        tuple(increments),
        tuple(values),
        tuple(where),
        tuple(where_after),
        tuple(returning),
    )
    params = [*increments.values(), *_prepared(connection, model, values), pk]
    params += [*_prepared(connection, model, where), *_prepared(connection, model, where_after)]
    result: tuple[Any, ...] | None = execute(connection, sql, params, fetch=FETCH_ONE)
    return result


FETCH_ONE, FETCH_ALL = "one", "all"


def execute(
    connection: BaseDatabaseWrapper,
    sql: str,
    params: Sequence[Any],
    *,
    many: bool = False,
    fetch: str = "",
) -> Any:
    """Run a prepared statement (%s placeholders): the row or rows asked for by fetch.

    On SQLite, unless queries are being logged (DEBUG, a test counting them) or wrapped
    (connection.execute_wrapper), it goes to the driver's cursor directly: Django's cursor
    wrapper, its checks and its placeholder rewrite cost as much as SQLite's own work on the
    executor's path (about 40 us a statement). Errors are Django's all the same.
    """
    if connection.vendor != "sqlite" or connection.execute_wrappers or connection.queries_logged:
        with connection.cursor() as cursor:
            if many:
                cursor.executemany(sql, params)
            else:
                cursor.execute(sql, params)
            if fetch:
                return cursor.fetchone() if fetch == FETCH_ONE else cursor.fetchall()
            return None
    raw = connection.connection
    if raw is None:
        connection.ensure_connection()
        raw = connection.connection
    if connection.needs_rollback:
        connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = raw.cursor()
        if many:
            cursor.executemany(_qmark(sql), params)
        else:
            cursor.execute(_qmark(sql), params)
        if fetch:
            return cursor.fetchone() if fetch == FETCH_ONE else cursor.fetchall()
        return None


@functools.lru_cache(maxsize=1024)
def _qmark(sql: str) -> str:
    """A statement's %s placeholders as SQLite's ?, as Django's SQLite cursor rewrites them."""
    return _FORMAT_QMARK.sub("?", sql).replace("%%", "%")


@functools.cache
def _field_statement(alias: str, model: type[Model], name: str) -> str:
    meta = model._meta
    quote = connections[alias].ops.quote_name
    table, pk = quote(meta.db_table), column_sql(meta, quote, meta.pk.name)
    return f"SELECT {column_sql(meta, quote, name)} FROM {table} WHERE {pk} = %s"  # noqa: S608


@functools.cache
def _select_statement(
    alias: str, model: type[Model], names: tuple[str, ...], order_by: str, limit: int | None
) -> str:
    meta = model._meta
    quote = connections[alias].ops.quote_name
    columns = ", ".join(column_sql(meta, quote, field.name) for field in meta.concrete_fields)
    conditions = " AND ".join(f"{column_sql(meta, quote, name)} = %s" for name in names)
    sql = f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {conditions}"  # noqa: S608
    if order_by:
        direction = " DESC" if order_by.startswith("-") else ""
        sql += f" ORDER BY {column_sql(meta, quote, order_by.lstrip('-'))}{direction}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


@functools.cache
def _converters(
    alias: str, vendor: str, model: type[Model]
) -> list[tuple[int, Callable[..., Any], Any]]:
    """(column index, converter, column) for each conversion the loaded values need, in order.

    The same converters the ORM applies to a queryset's rows (database, then field); cached per
    vendor too, since an alias may be pointed at another database (tests do it).
    """
    connection = connections[alias]
    converters = []
    for index, field in enumerate(model._meta.concrete_fields):
        column = field.get_col(model._meta.db_table)
        for convert in connection.ops.get_db_converters(column) + field.get_db_converters(
            connection
        ):
            converters.append((index, convert, column))
    return converters


@functools.cache
def _attnames(model: type[Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


def column_sql(meta: Any, quote: Callable[[str], str], name: str) -> str:
    """The quoted column of a model's field, for statements built from model metadata."""
    return quote(meta.get_field(name).column)


@functools.cache
def _update_returning_statement(
    alias: str,
    model: type[Model],
    increments: tuple[str, ...],
    values: tuple[str, ...],
    where: tuple[str, ...],
    where_after: tuple[str, ...],
    returning: tuple[str, ...],
) -> str:
    meta = model._meta
    quote = connections[alias].ops.quote_name

    column = functools.partial(column_sql, meta, quote)
    assignments = [f"{column(n)} = {column(n)} + %s" for n in increments]
    assignments += [f"{column(n)} = %s" for n in values]
    conditions = [f"{column_sql(meta, quote, meta.pk.name)} = %s"]
    conditions += [f"{column(n)} = %s" for n in where]
    conditions += [f"{column(n)} > %s" for n in where_after]
    # Identifiers come from model metadata; every value is a parameter.
    return (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "  # noqa: S608
        f"WHERE {' AND '.join(conditions)} RETURNING {', '.join(map(column, returning))}"
    )


def prepared_value(
    model: type[Model], name: str, value: Any, connection: BaseDatabaseWrapper
) -> Any:
    """A field's value as the driver takes it (as the field's get_db_prep_save gives it)."""
    return _preparer(model, name)(value, connection)


def _prepared(
    connection: BaseDatabaseWrapper, model: type[Model], values: Mapping[str, Any]
) -> list[Any]:
    return [_preparer(model, name)(value, connection) for name, value in values.items()]


def _connection(model: type[Model]) -> BaseDatabaseWrapper:
    return connections[router.db_for_write(model)]


@functools.cache
def _insert_statement(
    alias: str, model: type[Model], attnames: tuple[str, ...]
) -> tuple[str, list[Prepare]]:
    connection = connections[alias]
    meta = model._meta
    quote = connection.ops.quote_name
    names = [_field_name(meta, attname) for attname in attnames]
    columns = ", ".join(column_sql(meta, quote, name) for name in names)
    placeholders = ", ".join(["%s"] * len(names))
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608
    return sql, [_preparer(model, name) for name in names]


@functools.cache
def _load_statement(
    alias: str, vendor: str, model: type[Model], attnames: tuple[str, ...]
) -> tuple[str, list[tuple[int, Callable[[Any], Any]]]]:
    """The statement and converters for the database behind the alias now (tests repoint one
    alias from SQLite to PostgreSQL, hence the vendor in the cache's key)."""
    connection = connections[alias]
    meta = model._meta
    names = [_field_name(meta, attname) for attname in attnames]
    if connection.vendor != "postgresql":
        sql, _ = _insert_statement(alias, model, attnames)
    else:
        quote = connection.ops.quote_name
        columns = ", ".join(column_sql(meta, quote, name) for name in names)
        sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN"
    converts = [
        (index, convert)
        for index, name in enumerate(names)
        if (convert := _load_converter(connection, model, name)) is not None
    ]
    return sql, converts


def _load_converter(
    connection: BaseDatabaseWrapper, model: type[Model], name: str
) -> Callable[[Any], Any] | None:
    """Python value -> what the driver (or COPY) takes for this column, as the field stores
    it; None for plain columns, whose values go as they are."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{name} is not a concrete field"
    if isinstance(field, models.ForeignKey):
        field = field.target_field
    sqlite = connection.vendor == "sqlite"
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        return lambda value: (
            None
            if value is None
            else str(value)
            if type(value) is JSONText
            else json.dumps(value, cls=encoder)
        )
    if isinstance(field, models.DateTimeField) and sqlite:
        # As Django's SQLite backend stores them: naive, in UTC, str(datetime).
        return lambda value: (
            None
            if value is None
            else value.isoformat(" ")[:-6]
            if value.tzinfo is UTC
            else str((value.astimezone(UTC) if value.utcoffset() else value).replace(tzinfo=None))
        )
    if isinstance(field, models.DecimalField) and sqlite:
        return lambda value: None if value is None else str(value)
    if isinstance(field, _PLAIN_FIELDS) or (
        isinstance(field, (models.DateTimeField, models.DecimalField)) and not sqlite
    ):
        return None
    prepare = _preparer(model, name)
    return lambda value: prepare(value, connection)


@functools.cache
def _update_statement(
    alias: str, model: type[Model], names: tuple[str, ...]
) -> tuple[str, list[Prepare]]:
    connection = connections[alias]
    meta = model._meta
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{column_sql(meta, quote, name)} = %s" for name in names)
    table, pk = quote(meta.db_table), column_sql(meta, quote, meta.pk.name)
    sql = f"UPDATE {table} SET {assignments} WHERE {pk} = %s"  # noqa: S608
    return sql, [_preparer(model, name) for name in names]


@functools.cache
def _preparer(model: type[Model], name: str) -> Prepare:
    """The function turning a Python value into the driver's value for this field."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{name} is not a concrete field"
    if isinstance(field, models.ForeignKey):
        field = field.target_field
    prepare = field.get_db_prep_save
    if isinstance(field, _PLAIN_FIELDS):
        return lambda value, connection: (
            value if type(value) in _PASS_THROUGH else prepare(value, connection)
        )
    if isinstance(field, models.FloatField):
        return lambda value, connection: (
            value if type(value) is float or value is None else prepare(value, connection)
        )
    if isinstance(field, models.DateTimeField):
        return _datetime_preparer(_remembering_last(prepare))
    if isinstance(field, _MEMO_FIELDS):
        return _remembering_last(prepare)
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        return lambda value, connection: (
            connection.ops.adapt_json_value(value, _Verbatim)
            if type(value) is JSONText
            # Plain data on SQLite: what the field's preparation comes to, minus its calls.
            else json.dumps(value, cls=encoder)
            if connection.vendor == "sqlite" and type(value) in _JSON_DATA
            else prepare(value, connection)
        )
    return prepare


# Values a JSONField stores as json.dumps gives them (on SQLite: adapt_json_value).
_JSON_DATA = frozenset({dict, list, str, int, float, bool})


def _datetime_preparer(prepare: Prepare) -> Prepare:
    """prepare, but an aware UTC datetime bound for SQLite (the site is UTC) is written as
    Django's SQLite backend writes it, naive UTC text, without the field's half a dozen calls;
    the last one is remembered (a batch's events and rows share their time)."""
    last: tuple[Any, str] = (None, "")  # one tuple, replaced whole: threads share it

    def prepare_datetime(value: Any, connection: BaseDatabaseWrapper) -> Any:
        nonlocal last
        if (
            type(value) is datetime
            and value.tzinfo is UTC
            and connection.vendor == "sqlite"
            and connection.timezone_name == "UTC"
        ):
            seen, text = last
            if value is not seen:
                text = value.isoformat(" ")[:-6]
                last = (value, text)
            return text
        return prepare(value, connection)

    return prepare_datetime


def _remembering_last(prepare: Prepare) -> Prepare:
    """prepare, answering at once when given the very same (immutable) value again.

    A batch repeats one timestamp and lease token in every event row; converting a datetime
    goes through half a dozen Django calls.
    """
    last: tuple[Any, str, Any] = (None, "", None)  # value, database vendor, prepared value

    def prepare_remembering(value: Any, connection: BaseDatabaseWrapper) -> Any:
        nonlocal last
        seen, vendor, prepared = last
        if value is seen and vendor == connection.vendor and value is not None:
            return prepared
        prepared = prepare(value, connection)
        last = (value, connection.vendor, prepared)
        return prepared

    return prepare_remembering


def _field_name(meta: Any, attname: str) -> str:
    # "run_id" names the column of the field "run".
    for field in meta.concrete_fields:
        if field.attname == attname:
            return field.name
    raise ValueError(f"{meta.label} has no column attribute {attname!r}")


def connection_used(alias: str = DEFAULT_DB_ALIAS) -> Any:
    """This thread's driver connection, opened if need be: pass it to connection_lost() if
    what follows fails."""
    wrapper = connections[alias]
    wrapper.ensure_connection()
    return wrapper.connection


def connection_lost(alias: str = DEFAULT_DB_ALIAS, *, used: Any = None) -> bool:
    """Whether this thread's connection is gone: closed, replaced since `used` (Django drops a
    connection whose rollback failed, and the end of the atomic block may open the next), or
    no longer answering (then it is closed, so the next query opens a new one)."""
    wrapper = connections[alias]
    if wrapper.connection is None or (used is not None and wrapper.connection is not used):
        return True
    if wrapper.in_atomic_block or wrapper.is_usable():
        return False
    wrapper.close()
    return True


def connection_wait(until: float, *, every: float = 0.2, alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Reconnect this thread, trying every `every` seconds until monotonic time `until`;
    whether it is connected (the server is back)."""
    while True:
        connections[alias].close()
        try:
            connections[alias].ensure_connection()
            return True
        except DatabaseError:
            if time.monotonic() + every >= until:
                return False
            time.sleep(every)


class KeptConnection:
    """A thread's connection kept between uses (a writer, the lease keeper, the sweeper, the
    notifier): before a use after IDLE_CHECK_S idle, a dead one is replaced.

    Django checks connections around requests only (CONN_HEALTH_CHECKS); these threads have
    none, so a connection the server dropped while idle (a restart, a failover) would
    otherwise fail the first write of the next run.
    """

    def __init__(self, owner: str, alias: str = DEFAULT_DB_ALIAS) -> None:
        self.owner = owner
        self.alias = alias
        self._used_at: float | None = None

    def check(self, *, always: bool = False) -> None:
        """Call before each use, on the thread that uses the connection (always: even if it
        was used within IDLE_CHECK_S)."""
        now = time.monotonic()
        idle = self._used_at is not None and (always or now - self._used_at >= IDLE_CHECK_S)
        self._used_at = now
        wrapper = connections[self.alias]
        if idle and wrapper.connection is not None and connection_lost(self.alias):
            logger.info("%s: its database connection was lost while idle; reconnecting", self.owner)
