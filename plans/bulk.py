"""Many-row writes for the executor's hot path, as single prepared statements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, router
from django.db.models import Model


def insert_rows(model: type[Model], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT rows given as {attname: value}, all with the same keys, via executemany.

    bulk_create builds and compiles a model instance per row; on the executor's hot path that
    costs more than the database does.
    """
    if not rows:
        return
    connection = connections[router.db_for_write(model)]
    meta = model._meta
    fields = [meta.get_field(_field_name(meta, key)) for key in rows[0]]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    # Identifiers come from model metadata; every value is a parameter.
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608
    params = [
        [field.get_db_prep_save(row[field.attname], connection) for field in fields] for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def update_rows(
    model: type[Model], rows: Sequence[Mapping[str, Any]], field_names: Sequence[str]
) -> None:
    """Set some fields of many rows, given as {"id": pk, field: value}, via executemany.

    Django's bulk_update builds one CASE expression per field that grows with the row count,
    which costs O(rows^2) in SQLite; executemany costs O(rows).
    """
    if not rows:
        return
    connection = connections[router.db_for_write(model)]
    meta = model._meta
    fields = [meta.get_field(name) for name in field_names]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    sql = f"UPDATE {table} SET {assignments} WHERE {pk} = %s"  # noqa: S608
    params = [
        [field.get_db_prep_save(row[field.name], connection) for field in fields] + [row["id"]]
        for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _field_name(meta: Any, attname: str) -> str:
    # "run_id" names the column of the field "run".
    for field in meta.concrete_fields:
        if field.attname == attname:
            return field.name
    raise ValueError(f"{meta.label} has no column attribute {attname!r}")
