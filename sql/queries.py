"""Named queries: one ``.sql`` file per query in this folder, with a header

    -- name: special_tokens_by_layer
    -- title: One line saying what the rows are
    -- params: model, task

Parameters are DuckDB named parameters (``$model``); an omitted one is NULL, which every
query reads as "all".
"""

from __future__ import annotations

import difflib
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
    """The named query `name`; an unknown name is refused with the nearest names."""
    queries = named_queries()
    if name not in queries:
        # Names that hold what was typed ("ablation"), then names spelt alike ("head_sumary").
        holding = sorted((q for q in queries if name.lower() in q), key=lambda q: (q.find(name.lower()), len(q)))
        alike = difflib.get_close_matches(name, queries, n=3, cutoff=0.75) or difflib.get_close_matches(
            name, queries, n=2, cutoff=0.6
        )
        near = list(dict.fromkeys([*holding, *alike]))[:3]
        hint = f"did you mean {near[0]}? " if len(near) == 1 else ""
        if len(near) > 1:
            hint = f"did you mean {', '.join(near[:-1])} or {near[-1]}? "
        raise UsageError(f"no query named {name!r}; {hint}`attnwh queries` lists all {len(queries)}")
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
    """Execute one SQL statement and return the result as an Arrow table; SQL errors, and
    more than one statement (of which only the last result would show), become one line."""
    try:
        statements = len(con.extract_statements(sql))
        if statements > 1:
            raise UsageError(f"give one SQL statement at a time (got {statements}, separated by ';')")
        relation = con.sql(sql, params=params or None)
        return pa.table({}) if relation is None else relation.to_arrow_table()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {error_text(exc)}") from None


def error_text(exc: duckdb.Error) -> str:
    """DuckDB's message on one line, its hints kept ('Did you mean "head_means"?', 'Candidate
    bindings: …', the LINE of a syntax error); the caret line under it says nothing alone."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return " ".join(line for line in lines if line and set(line) != {"^"})


# Where the known values of a common parameter live: (SQL listing them, what a row is, the
# word for the column). A named query that returns nothing is checked against these, so a
# misspelt value gets a hint instead of a silent empty result.
_KNOWN_VALUES: dict[str, tuple[str, str, str]] = {
    "model": ("SELECT DISTINCT name FROM models", "model", "name"),
    "base": ("SELECT DISTINCT name FROM models", "model", "name"),
    "tuned": ("SELECT DISTINCT name FROM models", "model", "name"),
    "task": ("SELECT DISTINCT task FROM runs", "run", "task"),
    "mode": ("SELECT DISTINCT mode FROM ablation_configs", "ablation run", "mode"),
    "metric": ("SELECT metric FROM ablations UNION SELECT metric FROM scores", "score", "metric"),
    "relation": ("SELECT DISTINCT relation FROM dependency_heads", "relations run", "relation"),
    "feature": ("SELECT DISTINCT feature FROM feature_attention", "relations run", "feature"),
    "run": ("SELECT DISTINCT run_id FROM runs", "run", "id"),
    "finetune_run": ("SELECT run_id FROM runs WHERE kind = 'finetune'", "fine-tuning run", "id"),
    "compare_run": ("SELECT run_id FROM runs WHERE kind = 'compare'", "compare run", "id"),
    "ablation_run": ("SELECT run_id FROM runs WHERE kind = 'ablation'", "ablation run", "id"),
    "statistic": (
        "SELECT column_name FROM information_schema.columns WHERE table_name IN ('head_stats', 'head_mixing') "
        "AND column_name NOT IN ('run_id', 'example_id', 'layer', 'head', 'pattern') UNION SELECT 'cosine'",
        "head",
        "statistic",
    ),
    "kind": ("SELECT DISTINCT kind FROM ablation_configs WHERE config_id <> 0", "ablation configuration", "kind"),
    "pattern": ("SELECT name FROM pattern_types", "map", "pattern type"),
}
_PLURAL = {
    "id": "ids",
    "name": "models",
    "task": "tasks",
    "mode": "modes",
    "metric": "metrics",
    "statistic": "statistics",
    "kind": "kinds",
    "pattern type": "pattern types",
}


def unmatched_params(con: duckdb.DuckDBPyConnection, params: Mapping[str, object]) -> list[str]:
    """One line per given parameter whose value matches nothing in the warehouse, naming
    the values it could take, e.g. "no run has task 'x' (tasks: rte, sentiment)"."""
    hints = []
    for name, value in params.items():
        if value is None or name not in _KNOWN_VALUES:
            continue
        sql, row, column = _KNOWN_VALUES[name]
        try:
            known = sorted(str(v[0]) for v in con.execute(sql).fetchall() if v[0] is not None)
        except duckdb.Error:
            continue
        if str(value) in known:
            continue
        word = _PLURAL.get(column, column + "s")
        listed = f"{word}: {', '.join(known)}" if known else f"the warehouse has no {word}"
        if len(known) > 20:
            listed = f"{word}: {', '.join(known[:20])}, … {len(known) - 20} more"
        if column == "name":
            hints.append(f"no model is named {str(value)!r} ({listed})")
        else:
            hints.append(f"no {row} has {column} {str(value)!r} ({listed})")
    return hints
