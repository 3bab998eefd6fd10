"""Named queries: one ``.sql`` file per query in this folder, with a header

    -- name: special_tokens_by_layer
    -- title: One line saying what the rows are
    -- params: model, task

Parameters are DuckDB named parameters (``$model``); an omitted one is NULL, which every
query reads as "all".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import duckdb
import pyarrow as pa

from attnwh.errors import AttnwhError, UsageError

_HEADER = re.compile(r"^--\s*(name|title|params):\s*(.*?)\s*$")


@dataclass(frozen=True)
class NamedQuery:
    name: str
    title: str
    params: tuple[str, ...]
    sql: str


def _parse(text: str, filename: str) -> NamedQuery:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
        elif line.strip() and not line.startswith("--"):
            break
    if "name" not in fields or "title" not in fields:
        raise AttnwhError(f"query file {filename} lacks a '-- name:' or '-- title:' header")
    params = tuple(p.strip() for p in fields.get("params", "").split(",") if p.strip())
    return NamedQuery(fields["name"], fields["title"], params, text)


def named_queries() -> dict[str, NamedQuery]:
    """Every named query shipped with attnwh, by name."""
    found = {}
    for entry in sorted(resources.files("attnwh.sql").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            query = _parse(entry.read_text(encoding="utf-8"), entry.name)
            found[query.name] = query
    return found


def get_query(name: str) -> NamedQuery:
    queries = named_queries()
    if name not in queries:
        raise UsageError(f"no query named {name!r}; `attnwh queries` lists them ({', '.join(queries)})")
    return queries[name]


def run_query(
    con: duckdb.DuckDBPyConnection, query: NamedQuery, params: Mapping[str, object] | None = None
) -> pa.Table:
    """Execute a named query; unknown parameters are refused, missing ones are NULL."""
    params = params or {}
    unknown = set(params) - set(query.params)
    if unknown:
        accepted = ", ".join(query.params) or "none"
        raise UsageError(f"query {query.name} has no parameter {sorted(unknown)[0]!r} (it takes: {accepted})")
    return run_sql(con, query.sql, {p: params.get(p) for p in query.params})


def run_sql(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object] | None = None) -> pa.Table:
    """Execute SQL and return the result as an Arrow table; SQL errors become one line."""
    try:
        relation = con.sql(sql, params=params or None)
        return pa.table({}) if relation is None else relation.to_arrow_table()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
