"""Storing `attnwh ingest relations` runs: one run per input file (task `dependencies` for a
CoNLL-U file, `frames` for a FrameNet file), written with all its rows in one transaction at
the end, so a run row exists only when its rows do. A stored run with the same key (model
weights, file contents, --limit, --seed and what is measured) is kept unless `replace`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .models import EncoderModel


@dataclass(frozen=True)
class Measured:
    """What one run measured: rows per table, and the run's counts."""

    tables: dict[str, dict[str, list]]
    n_examples: int
    n_skipped: int
    seconds: float
    result: Any  # the analysis' own result object, handed back in the summary


@dataclass(frozen=True)
class RelationsSummary:
    run_id: int
    outcome: str  # "complete", "replaced" or "already complete"
    result: Any | None  # None when already complete
    task: str = "dependencies"


def run_key(encoder: EncoderModel, path: Path, limit: int | None, seed: int, **extra: object) -> str:
    key = {
        "kind": "relations",
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "file": hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest(),
        "limit": limit,
        "seed": seed,
        "dtype": str(encoder.dtype),
        **extra,
    }
    return hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16).hexdigest()


def ingest_run(
    db_path: Path,
    encoder: EncoderModel,
    path: Path,
    *,
    task: str,
    key: str,
    limit: int | None,
    seed: int,
    batch_size: int,
    replace: bool,
    command: str | None,
    measure: Callable[[], Measured],
    n_todo: int,
    on_start: Callable[[int], None] | None = None,
) -> RelationsSummary:
    """Skip a stored run (unless `replace`), else measure and write it in one transaction."""
    import pyarrow as pa

    from attnwh.sql import warehouse
    from attnwh.sql.warehouse import first_row

    from . import store

    con = warehouse.connect(db_path)
    try:
        found = first_row(con, "SELECT run_id FROM runs WHERE run_key = ?", [key])
        if found and not replace:
            return RelationsSummary(found[0], "already complete", None, task)
        if on_start:
            on_start(n_todo)
        measured = measure()
        con.begin()
        try:
            model_id = store.upsert_model(con, encoder.facts())
            state = store.open_run(
                con,
                key,
                True,
                {
                    "kind": "relations",
                    "model_id": model_id,
                    "dataset": Path(path).name,
                    "task": task,
                    "split": Path(path).stem,
                    "source": str(path),
                    "example_limit": limit,
                    "seed": seed,
                    "max_length": encoder.max_length,
                    "n_examples": measured.n_examples,
                    "n_truncated": measured.n_skipped,  # skipped as longer than max_length (or unusable)
                    "device": str(encoder.device),
                    "dtype": str(encoder.dtype).removeprefix("torch."),
                    "batch_size": batch_size,
                    "versions": json.dumps(store.library_versions()),
                    "command": command,
                },
            )
            for table, rows in measured.tables.items():
                n = len(next(iter(rows.values())))
                arrow = pa.table({"run_id": pa.array([state.run_id] * n, pa.int32()), **rows})
                con.register("new_rows", arrow)
                try:
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM new_rows")
                finally:
                    con.unregister("new_rows")
            con.execute(
                "UPDATE runs SET status = 'complete', finished_at = current_timestamp, seconds = ? WHERE run_id = ?",
                [measured.seconds, state.run_id],
            )
            con.commit()
        except BaseException:
            con.rollback()
            raise
        return RelationsSummary(state.run_id, "replaced" if found else "complete", measured.result, task)
    finally:
        con.close()
