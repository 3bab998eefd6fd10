"""Writing ingest results into the warehouse: examples, and the per-head rows of a run
batch by batch (the runs rows themselves are written by `attnwh.sql.runs`).

Every write that belongs together happens in one transaction: a batch's rows (head
statistics or attention change) and the run_examples rows that mark those examples done
are committed together, so an interrupted run leaves whole examples only, and a rerun
skips exactly those.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Sequence

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.sql.runs import add_seconds, run_tables
from attnwh.sql.warehouse import insert_arrow, transaction


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


def insert_examples(con: duckdb.DuckDBPyConnection, data: TaskData, ids: Sequence[int]) -> None:
    """Add the task's examples; ones already stored (same id) are left as they are."""
    # Keyed by str | None so an unlabelled example (label None) looks up to a NULL label_id.
    labels: dict[str | None, int] = {name: i for i, name in enumerate(data.labels)} if data.labels else {}
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
    insert_arrow(con, "examples", table, or_ignore=True)


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
    tables = run_tables(con)
    if table not in tables or table == "run_examples":
        raise ValueError(f"{table!r} is not a table of per-head run rows")
    for name in extra or {}:
        if name not in tables:
            raise ValueError(f"{name!r} is not a table of run rows")
    done = pa.table(
        {
            "run_id": np.full(len(example_ids), run_id, dtype=np.int32),
            "example_id": example_ids,
            "n_tokens": n_tokens.astype(np.int32),
            "n_tokens_full": n_tokens_full.astype(np.int32),
            "truncated": n_tokens_full > n_tokens,
        }
    )
    with transaction(con):
        insert_arrow(con, table, rows)
        for name, extra_rows in (extra or {}).items():
            insert_arrow(con, name, extra_rows)
        insert_arrow(con, "run_examples", done)
        add_seconds(con, run_id, seconds)


def thumbnail_rows(run_id: int, example_ids: np.ndarray, n_tokens: Sequence[int], thumbnails: np.ndarray) -> pa.Table:
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
