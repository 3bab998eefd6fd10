"""What the warehouse holds, read from the file itself: every table and view, its columns and
types, and the comments the migrations put on them (migration 0007 and later). `attnwh schema`
and ``Warehouse.schema`` both print this."""

from __future__ import annotations

import duckdb
import polars as pl

from attnwh.errors import UsageError

_OBJECTS = """
SELECT table_name AS name, 'table' AS kind, comment FROM duckdb_tables() WHERE NOT internal AND schema_name = 'main'
UNION ALL
SELECT view_name, 'view', comment FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'
ORDER BY kind, name
"""
_COLUMNS = """
SELECT table_name, column_name, data_type, comment FROM duckdb_columns()
WHERE NOT internal AND schema_name = 'main'
ORDER BY table_name, column_index
"""


def describe(con: duckdb.DuckDBPyConnection, table: str | None = None) -> pl.DataFrame:
    """One row per column of every table and view (or of `table`): table, kind, the table's
    comment, column, type and the column's comment."""
    objects = con.execute(_OBJECTS).fetchall()
    if table is not None and table not in {name for name, _, _ in objects}:
        known = ", ".join(name for name, _, _ in objects)
        raise UsageError(f"no table or view named {table!r} (there are: {known})")
    columns: dict[str, list[tuple[str, str, str | None]]] = {}
    for name, column, dtype, comment in con.execute(_COLUMNS).fetchall():
        columns.setdefault(name, []).append((column, dtype, comment))
    rows = [
        {
            "table": name,
            "kind": kind,
            "table_comment": table_comment,
            "column": column,
            "type": dtype,
            "comment": comment,
        }
        for name, kind, table_comment in objects
        if table is None or name == table
        for column, dtype, comment in columns.get(name, [])
    ]
    schema = {c: pl.String for c in ("table", "kind", "table_comment", "column", "type", "comment")}
    return pl.DataFrame(rows, schema=schema)
