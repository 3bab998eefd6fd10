"""Writing ingest results into the warehouse.

Every write that belongs together happens in one transaction: a batch's rows (head
statistics or attention change) and the run_examples rows that mark those examples done
are committed together, so an interrupted run leaves whole examples only, and a rerun
skips exactly those.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.sql.warehouse import first_row

from attnwh.ingest.sources.examples import Example, TaskData


def example_id(data: TaskData, example: Example) -> int:
    """A stable signed 64-bit id for an example, from its identity and content."""
    key = json.dumps(
        [data.dataset, data.task, data.split, example.position, example.text_a, example.text_b, example.label]
    )
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


def library_versions() -> dict[str, str]:
    import torch
    import transformers

    import attnwh

    return {
        "attnwh": attnwh.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "duckdb": duckdb.__version__,
        "python": platform.python_version(),
    }


def upsert_model(con: duckdb.DuckDBPyConnection, facts: dict[str, object]) -> int:
    """The model_id of this checkpoint (by name and weights hash), adding it if new.

    A fine-tuned checkpoint's facts carry `base_weights_hash`; its row then points to the
    base's row (`base_model_id`) when the base is in this warehouse too.
    """
    facts = dict(facts)
    base_hash = facts.pop("base_weights_hash", None)
    row = first_row(
        con, "SELECT model_id FROM models WHERE name = ? AND weights_hash = ?", [facts["name"], facts["weights_hash"]]
    )
    if row:
        return row[0]
    if base_hash is not None:
        base = first_row(con, "SELECT min(model_id) FROM models WHERE weights_hash = ?", [base_hash])
        facts["base_model_id"] = base[0] if base else None
    columns = list(facts)
    return first_row(
        con,
        f"INSERT INTO models ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) RETURNING model_id",
        [facts[c] for c in columns],
    )[0]


def insert_examples(con: duckdb.DuckDBPyConnection, data: TaskData, ids: Sequence[int]) -> None:
    """Add the task's examples; ones already stored (same id) are left as they are."""
    labels = {name: i for i, name in enumerate(data.labels)} if data.labels else {}
    table = pa.table(
        {
            "example_id": pa.array(ids, pa.int64()),
            "dataset": [data.dataset] * len(ids),
            "task": [data.task] * len(ids),
            "split": [data.split] * len(ids),
            "position": [e.position for e in data.examples],
            "guid": [e.guid for e in data.examples],
            "text_a": [e.text_a for e in data.examples],
            "text_b": [e.text_b for e in data.examples],
            "label": [e.label for e in data.examples],
            "label_id": pa.array([labels.get(e.label) for e in data.examples], pa.int32()),
        }
    )
    con.register("new_examples", table)
    try:
        con.execute("INSERT OR IGNORE INTO examples BY NAME SELECT * FROM new_examples")
    finally:
        con.unregister("new_examples")


@dataclass(frozen=True)
class RunState:
    run_id: int
    status: str  # as found, or "new" / "replaced" for a run created now
    done: frozenset[int]  # example ids already written

    @property
    def outcome(self) -> str:
        """What finishing this run is, for summaries: complete, replaced or resumed."""
        return {"new": "complete", "replaced": "replaced"}.get(self.status, "resumed")


def open_run(con: duckdb.DuckDBPyConnection, run_key: str, replace: bool, fields: dict[str, object]) -> RunState:
    """Find the run with this key, or create it; with `replace`, drop what it wrote first.

    Must be called inside a transaction.
    """
    row = first_row(con, "SELECT run_id, status FROM runs WHERE run_key = ?", [run_key])
    created = "new"
    if row and replace:
        delete_run(con, row[0])
        row, created = None, "replaced"
    if row:
        run_id, status = row
        done = con.execute("SELECT example_id FROM run_examples WHERE run_id = ?", [run_id]).fetchall()
        if status != "complete":
            con.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?", [run_id])
        return RunState(run_id, status, frozenset(r[0] for r in done))
    columns = ["run_key", "status", "started_at", *fields]
    run_id = first_row(
        con,
        f"INSERT INTO runs ({', '.join(columns)}) VALUES (?, 'running', current_timestamp, "
        f"{', '.join('?' for _ in fields)}) RETURNING run_id",
        [run_key, *fields.values()],
    )[0]
    return RunState(run_id, created, frozenset())


# Every table holding rows of a run; deleting a run (--replace) clears all of them.
RUN_TABLES: tuple[str, ...] = (
    "head_stats", "attention_change", "dependency_heads", "dependency_baselines", "run_examples",
    "feature_attention", "frame_heads", "frame_filters",
    "ablation_configs", "ablation_predictions", "ablations", "head_importance",
    "pattern_thumbnails", "pattern_labels",
)


def delete_run(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    for table in (*RUN_TABLES, "runs"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])


def grid_rows(
    run_id: int, example_ids: np.ndarray, values: np.ndarray, columns: Sequence[str]
) -> dict[str, np.ndarray]:
    """Columns of one row per (example, layer, head) from values shaped
    (batch, layer, head, len(columns)), keyed by run_id, example_id, layer and head."""
    batch, layers, heads, k = values.shape
    if k != len(columns):
        raise ValueError(f"{k} values per head but {len(columns)} column names")
    grid = np.indices((batch, layers, heads)).reshape(3, -1)
    flat = values.reshape(-1, k)
    rows = {
        "run_id": np.full(flat.shape[0], run_id, dtype=np.int32),
        "example_id": example_ids[grid[0]],
        "layer": grid[1].astype(np.int16),
        "head": grid[2].astype(np.int16),
    }
    rows.update({name: flat[:, j] for j, name in enumerate(columns)})
    return rows


def write_batch(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    table: str,
    rows: dict[str, np.ndarray],
    example_ids: np.ndarray,
    n_tokens: np.ndarray,
    n_tokens_full: np.ndarray,
    seconds: float,
    extra: dict[str, pa.Table] | None = None,
) -> None:
    """Commit one batch: `rows` (columns by name) into `table`, `extra` rows into their
    tables (e.g. pattern_thumbnails), and the examples' done marks, in one transaction, so a
    run never holds part of an example."""
    if table not in RUN_TABLES or table == "run_examples":
        raise ValueError(f"{table!r} is not a table of per-head run rows")
    done = pa.table(
        {
            "run_id": np.full(len(example_ids), run_id, dtype=np.int32),
            "example_id": example_ids,
            "n_tokens": n_tokens.astype(np.int32),
            "n_tokens_full": n_tokens_full.astype(np.int32),
            "truncated": n_tokens_full > n_tokens,
        }
    )
    rows_table = pa.table(rows)
    con.begin()
    try:
        con.register("batch_rows", rows_table)
        con.register("batch_done", done)
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM batch_rows")
        for name, extra_rows in (extra or {}).items():
            if name not in RUN_TABLES:
                raise ValueError(f"{name!r} is not a table of run rows")
            con.register("batch_extra", extra_rows)
            try:
                con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM batch_extra")
            finally:
                con.unregister("batch_extra")
        con.execute("INSERT INTO run_examples BY NAME SELECT * FROM batch_done")
        con.execute("UPDATE runs SET seconds = coalesce(seconds, 0) + ? WHERE run_id = ?", [seconds, run_id])
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        con.unregister("batch_rows")
        con.unregister("batch_done")


def thumbnail_rows(
    run_id: int, example_ids: np.ndarray, n_tokens: Sequence[int], thumbnails: np.ndarray
) -> pa.Table:
    """pattern_thumbnails rows from thumbnails shaped (examples, layer, head, size²)."""
    count, layers, heads, cells = thumbnails.shape
    grid = np.indices((count, layers, heads)).reshape(3, -1)
    flat = np.ascontiguousarray(thumbnails.reshape(-1, cells), dtype=np.float32)
    offsets = pa.array(np.arange(0, flat.size + 1, cells, dtype=np.int32))
    return pa.table(
        {
            "run_id": np.full(grid.shape[1], run_id, dtype=np.int32),
            "example_id": np.asarray(example_ids, dtype=np.int64)[grid[0]],
            "layer": grid[1].astype(np.int16),
            "head": grid[2].astype(np.int16),
            "n_tokens": np.asarray(n_tokens, dtype=np.int32)[grid[0]],
            "thumbnail": pa.ListArray.from_arrays(offsets, pa.array(flat.ravel())),
        }
    )


def thumbnail_sample(example_ids: np.ndarray, count: int, seed: int) -> frozenset[int]:
    """The seeded sample of a run's examples whose maps are kept as thumbnails: the same
    examples on every resume of the run."""
    ids = np.sort(np.asarray(example_ids, dtype=np.int64))
    if count <= 0 or not len(ids):
        return frozenset()
    chosen = np.random.default_rng(seed).choice(len(ids), size=min(count, len(ids)), replace=False)
    return frozenset(int(i) for i in ids[chosen])


@contextlib.contextmanager
def marking_failure(con: duckdb.DuckDBPyConnection, run_id: int) -> Iterator[None]:
    """Inside the block, an exception marks the run `interrupted` (Ctrl-C) or `failed`, so a
    rerun resumes it; the exception goes on."""
    try:
        yield
    except KeyboardInterrupt:
        finish_run(con, run_id, "interrupted")
        raise
    except BaseException:
        finish_run(con, run_id, "failed")
        raise


def finish_run(con: duckdb.DuckDBPyConnection, run_id: int, status: str) -> None:
    con.execute(
        "UPDATE runs SET status = ?, finished_at = current_timestamp WHERE run_id = ?", [status, run_id]
    )
