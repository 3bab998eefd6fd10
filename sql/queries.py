"""Named queries: one ``.sql`` file per query in this folder, with a header

    -- name: special_tokens_by_layer
    -- title: One line saying what the rows are
    -- params: model, task

Parameters are DuckDB named parameters (``$model``); an omitted one is NULL, which every
query reads as "all". A value given by a user is checked first (``run_query(..., check=True)``):
one that can match nothing (a task or model the warehouse lacks, an unknown statistic, a layer
past the model's last) is refused with the values there are; a valid value that selects no
rows gives the empty table, which is then the answer.
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
    con: duckdb.DuckDBPyConnection,
    query: NamedQuery,
    params: Mapping[str, object] | None = None,
    *,
    check: bool = False,
) -> pa.Table:
    """Execute a named query; unknown parameters are refused, missing ones are NULL. With
    `check` (a user's values), a value that can match nothing in the warehouse is refused too
    (:func:`refuse_unmatched`) rather than answered with an empty table."""
    params = params or {}
    unknown = set(params) - set(query.params)
    if unknown:
        accepted = ", ".join(query.params) or "none"
        raise UsageError(f"query {query.name} has no parameter {sorted(unknown)[0]!r} (it takes: {accepted})")
    if check:
        refuse_unmatched(con, params)
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
# word for the column). A value outside them can match nothing, so a misspelt value is refused
# with the values there are instead of answered with a silent empty result.
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


# Parameters that take one of a fixed set of values, whatever the warehouse holds (the
# queries read any other value as matching nothing, or, for order, as the default).
_CHOICES: dict[str, tuple[str, ...]] = {
    "order": ("asc", "desc"),
    "classifier": ("stored", "cnn"),
    "by": ("depth", "layer", "group"),
}
# Parameters numbering a model's layers or heads (0-based): the models' column of their count.
_SIZES: dict[str, str] = {"layer": "num_layers", "head": "num_heads"}
# The most known values a line names (every statistic, the first of many run ids).
_LISTED = 60


def unmatched_params(con: duckdb.DuckDBPyConnection, params: Mapping[str, object]) -> list[str]:
    """One line per given parameter whose value can match nothing in the warehouse, naming
    the values it could take, e.g. "no run has task 'x' (tasks: rte, sentiment)", "run 3's
    model has no layer 12 (layers 0 to 5)". A value that matches but selects no rows is not
    listed: that empty result is an answer."""
    hints: dict[str, str] = {}
    for name, value in params.items():
        hint = None if value is None else _known_hint(con, name, value)
        if hint:
            hints[name] = hint
    # A layer or head is checked against the models of the run or model asked for, when that
    # one exists, else against every stored run's model.
    scope = {k: params[k] for k in ("run", "model") if params.get(k) is not None and k not in hints}
    for name, value in params.items():
        if name in _SIZES and value is not None:
            hint = _size_hint(con, name, value, scope)
            if hint:
                hints[name] = hint
    return [hints[name] for name in params if name in hints]


def refuse_unmatched(con: duckdb.DuckDBPyConnection, params: Mapping[str, object]) -> None:
    """Raise UsageError, one line naming the values there are, when a value in `params` can
    match nothing in the warehouse (:func:`unmatched_params`)."""
    hints = unmatched_params(con, params)
    if hints:
        raise UsageError("; ".join(hints))


def _known_hint(con: duckdb.DuckDBPyConnection, name: str, value: object) -> str | None:
    if name in _CHOICES:
        choices = _CHOICES[name]
        given = str(value).lower() if name == "order" else str(value)  # the query lower-cases order
        return None if given in choices else f"{name} {str(value)!r} is not one of {', '.join(choices)}"
    if name not in _KNOWN_VALUES:
        return None
    sql, row, column = _KNOWN_VALUES[name]
    try:
        rows = con.execute(sql).fetchall()
    except duckdb.Error:  # an older warehouse without that table: nothing to check against
        return None
    known = sorted(str(v[0]) for v in rows if v[0] is not None)
    given = str(value)
    ids = all(v.isdigit() for v in known)
    if ids:
        known.sort(key=int)  # 2 before 10
        given = str(int(given)) if given.strip().lstrip("-").isdigit() else given  # run 01 is run 1
    if given in known:
        return None
    word = _PLURAL.get(column, column + "s")
    listed = f"{word}: {', '.join(known)}" if known else f"the warehouse has no {word}"
    if len(known) > _LISTED:
        listed = f"{word}: {', '.join(known[:_LISTED])}, … {len(known) - _LISTED} more"
    near = [] if ids else difflib.get_close_matches(given, known, n=3, cutoff=0.6)
    if near:  # a misspelling's likely meaning first: a long list may not show it
        listed = f"did you mean {', '.join(near[:-1]) + ' or ' if len(near) > 1 else ''}{near[-1]}? {listed}"
    if column == "name":
        return f"no model is named {str(value)!r} ({listed})"
    return f"no {row} has {column} {str(value)!r} ({listed})"


def _size_hint(con: duckdb.DuckDBPyConnection, name: str, value: object, scope: Mapping[str, object]) -> str | None:
    try:
        number = int(value) if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        return None  # not a whole number: the query's own cast refuses it
    run, model = scope.get("run"), scope.get("model")
    found = con.execute(
        f"SELECT max(m.{_SIZES[name]}) FROM runs AS r JOIN models AS m USING (model_id) "
        "WHERE ($run IS NULL OR r.run_id = CAST($run AS INTEGER)) AND ($model IS NULL OR m.name = $model)",
        {"run": run, "model": None if run is not None else model},
    ).fetchall()
    size = found[0][0]
    if size is not None and 0 <= number < size:
        return None
    listed = f"{name}s 0 to {size - 1}" if size else "the warehouse has no runs"
    if run is not None:
        return f"run {run}'s model has no {name} {number} ({listed})"
    if model is not None:
        return f"model {str(model)!r} has no {name} {number} ({listed})"
    return f"no stored model has {name} {number} ({listed})"
