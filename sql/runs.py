"""The one writer of the runs table: run keys, creating, resuming, replacing, finishing and
deleting runs, and the models they name.

A run is found again by its key, a hash of its kind and of everything that determines its
rows (its identity): rerunning the same work resumes or skips it. Every kind of run
(statistics, compare, ablation, relations, finetune, and the test fixtures) goes through
:func:`create_run`, so the key recipe, the resume rules and the guard against a key of
another kind live here only. No torch here: the report and SQL commands import this.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from attnwh.errors import AttnwhError
from attnwh.sql.warehouse import first_row, one_row


def run_key(kind: str, identity: Mapping[str, object]) -> str:
    """The key of a run of `kind` with this identity: blake2b-16 hex of the identity with its
    kind, as sorted JSON. (The recipe every warehouse so far was written with: keep it, or
    stored runs stop resuming.) An identity that names another kind is a mistake."""
    named = identity.get("kind", kind)
    if named != kind:
        raise ValueError(f"a run identity of kind {named!r} cannot key a {kind!r} run")
    key = {**identity, "kind": kind}
    return hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class RunState:
    run_id: int
    status: str  # as found, or "new" / "replaced" for a run created now
    done: frozenset[int]  # example ids already written

    @property
    def outcome(self) -> str:
        """What finishing this run is, for summaries: complete, replaced or resumed."""
        return {"new": "complete", "replaced": "replaced"}.get(self.status, "resumed")


@dataclass(frozen=True)
class StoredRun:
    run_id: int
    status: str


def find_run(con: duckdb.DuckDBPyConnection, kind: str, identity: Mapping[str, object]) -> StoredRun | None:
    """The stored run of `kind` with this identity, if any. Raises AttnwhError when the key
    belongs to a run of another kind, rather than resume or replace the wrong run."""
    key = run_key(kind, identity)
    row = first_row(con, "SELECT run_id, kind, status FROM runs WHERE run_key = ?", [key])
    if row is None:
        return None
    run_id, stored_kind, status = row
    if stored_kind != kind:
        raise AttnwhError(
            f"run {run_id} has the key {key} of this {kind} run but is a {stored_kind} run; "
            "the warehouse is inconsistent: delete that run or use another --db"
        )
    return StoredRun(run_id, status)


def create_run(
    con: duckdb.DuckDBPyConnection,
    kind: str,
    identity: Mapping[str, object],
    fields: Mapping[str, object],
    *,
    replace: bool = False,
) -> RunState:
    """Find the run of `kind` with this identity and resume it, or create it; with
    `replace`, delete the stored one and everything it wrote first.

    `fields` are the other runs columns (model_id, dataset, …; `started_at` defaults to
    now). A resumed run that is not complete is marked running again; its `done` holds the
    examples it has written. Call inside :func:`warehouse.transaction`, so a replaced run
    is never half deleted.
    """
    reserved = {"run_id", "run_key", "kind", "status"} & set(fields)
    if reserved:
        raise ValueError(f"create_run sets {', '.join(sorted(reserved))} itself")
    stored = find_run(con, kind, identity)
    created = "new"
    if stored and replace:
        delete_run(con, stored.run_id)
        stored, created = None, "replaced"
    if stored:
        done = con.execute("SELECT example_id FROM run_examples WHERE run_id = ?", [stored.run_id]).fetchall()
        if stored.status != "complete":
            con.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?", [stored.run_id])
        return RunState(stored.run_id, stored.status, frozenset(r[0] for r in done))
    values = {"kind": kind, "run_key": run_key(kind, identity), "status": "running", **fields}
    columns = list(values)
    started = "" if "started_at" in values else ", started_at"
    placeholders = ", ".join("?" for _ in columns) + (", current_timestamp" if started else "")
    run_id = one_row(
        con,
        f"INSERT INTO runs ({', '.join(columns)}{started}) VALUES ({placeholders}) RETURNING run_id",
        list(values.values()),
    )[0]
    return RunState(run_id, created, frozenset())


def finish_run(
    con: duckdb.DuckDBPyConnection, run_id: int, status: str, seconds: float | None = None, *, finished_at=None
) -> None:
    """Mark the run `status` (complete, interrupted, failed) as of now (or `finished_at`,
    for fixtures that pin their times), adding `seconds` of model time to its total."""
    sets: list[str] = ["status = ?"]
    params: list[object] = [status]
    if finished_at is None:
        sets.append("finished_at = current_timestamp")
    else:
        sets.append("finished_at = ?")
        params.append(finished_at)
    if seconds is not None:
        sets.append("seconds = coalesce(seconds, 0) + ?")
        params.append(seconds)
    con.execute(f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ?", [*params, run_id])


def add_seconds(con: duckdb.DuckDBPyConnection, run_id: int, seconds: float) -> None:
    """Add model time to a run that goes on (a batch written, a stage done)."""
    con.execute("UPDATE runs SET seconds = coalesce(seconds, 0) + ? WHERE run_id = ?", [seconds, run_id])


@contextlib.contextmanager
def marking_failure(con: duckdb.DuckDBPyConnection, *run_ids: int) -> Iterator[None]:
    """Inside the block, an exception marks the runs `interrupted` (Ctrl-C) or `failed`, so a
    rerun resumes them; the exception goes on."""
    try:
        yield
    except KeyboardInterrupt:
        for run_id in run_ids:
            finish_run(con, run_id, "interrupted")
        raise
    except BaseException:
        for run_id in run_ids:
            finish_run(con, run_id, "failed")
        raise


def run_tables(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    """Every table holding rows of runs: each base table with a run_id column, but runs
    itself. Read from the schema, so a table added by a migration is never forgotten."""
    rows = con.execute(
        "SELECT c.table_name FROM information_schema.columns AS c"
        " JOIN information_schema.tables AS t USING (table_catalog, table_schema, table_name)"
        " WHERE c.column_name = 'run_id' AND t.table_type = 'BASE TABLE' AND c.table_name <> 'runs'"
        " AND c.table_catalog = current_database() AND c.table_schema = current_schema()"
        " ORDER BY c.table_name"
    ).fetchall()
    return tuple(r[0] for r in rows)


def delete_run(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Delete the run and every row it wrote, in every table (see :func:`run_tables`)."""
    for table in (*run_tables(con), "runs"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])


def upsert_model(con: duckdb.DuckDBPyConnection, facts: Mapping[str, object]) -> int:
    """The model_id of this checkpoint (by name and weights hash), adding it if new.

    A fine-tuned checkpoint's facts carry `base_weights_hash`; its row then points to the
    base's row (`base_model_id`) when the base is in this warehouse too. A known checkpoint's
    `folder` is brought up to where it was loaded from now.
    """
    facts = dict(facts)
    base_hash = facts.pop("base_weights_hash", None)
    layers: Any = facts.pop("layers", None) or []
    row = first_row(
        con,
        "SELECT model_id, folder FROM models WHERE name = ? AND weights_hash = ?",
        [facts["name"], facts["weights_hash"]],
    )
    if row:
        # The folder it loaded from this time: a checkpoint moved since an earlier run (or
        # recorded before folders were) is found where it was last seen.
        if facts.get("folder") is not None and facts["folder"] != row[1]:
            con.execute("UPDATE models SET folder = ? WHERE model_id = ?", [facts["folder"], row[0]])
        model_id = row[0]
    else:
        if base_hash is not None:
            base = first_row(con, "SELECT min(model_id) FROM models WHERE weights_hash = ?", [base_hash])
            facts["base_model_id"] = base[0] if base else None
        columns = list(facts)
        model_id = one_row(
            con,
            f"INSERT INTO models ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) RETURNING model_id",
            [facts[c] for c in columns],
        )[0]
    _insert_layers(con, model_id, layers)
    return model_id


# model_layers' columns, in the order of each layer's facts (`attnwh.ingest.model.reading.LayerFacts`).
LAYER_COLUMNS = ("layer", "kind", "read", "module", "sliding_window", "chunk", "rotary", "gated", "learned_sink")


def _insert_layers(con: duckdb.DuckDBPyConnection, model_id: int, layers: Sequence[Mapping[str, object]]) -> None:
    """The model's model_layers rows, where it has none yet (a model stored before the table
    existed gets them the next time it loads)."""
    if not layers or first_row(con, "SELECT 1 FROM model_layers WHERE model_id = ? LIMIT 1", [model_id]):
        return
    con.executemany(
        f"INSERT INTO model_layers (model_id, {', '.join(LAYER_COLUMNS)}) VALUES (?, {', '.join('?' for _ in LAYER_COLUMNS)})",
        [[model_id, *(layer[c] for c in LAYER_COLUMNS)] for layer in layers],
    )


def store_prompt_scores(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """The accuracy of a run's prompt answers (prompt_predictions: a statistics run read
    through a prompt) in scores, over its labelled examples; nothing for any other run."""
    con.execute(
        "INSERT OR REPLACE INTO scores SELECT run_id, 'accuracy', avg(correct::INTEGER), count(correct) "
        "FROM prompt_predictions WHERE run_id = ? AND correct IS NOT NULL GROUP BY run_id",
        [run_id],
    )
