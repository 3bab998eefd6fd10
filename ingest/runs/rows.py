"""Writing ingest results into the warehouse: examples, and the rows of a run part by part
(the runs rows themselves are written by `attnwh.sql.runs`).

Every write that belongs together happens in one transaction: a part's rows (head
statistics, attention change or ablation predictions) and the run_examples rows that mark
those examples done are committed together, so an interrupted run leaves whole examples
only, and a rerun skips exactly those.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from attnwh.ingest.runs.shards import Part
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.sql.runs import add_seconds, run_tables
from attnwh.sql.warehouse import insert_arrow, registered, transaction


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
    insert_arrow(con, "examples", example_rows(data, range(len(data.examples)), ids), or_ignore=True)


def example_rows(data: TaskData, indices: Sequence[int], ids: Sequence[int]) -> pa.Table:
    """examples rows of the task's examples at `indices`, whose ids are `ids`."""
    # Keyed by str | None so an unlabelled example (label None) looks up to a NULL label_id.
    labels: dict[str | None, int] = {name: i for i, name in enumerate(data.labels)} if data.labels else {}
    chosen = [data.examples[i] for i in indices]
    return pa.table(
        {
            "example_id": pa.array(ids, pa.int64()),
            "dataset": [data.dataset] * len(chosen),
            "task": [data.task] * len(chosen),
            "split": [data.split] * len(chosen),
            "position": [e.position for e in chosen],
            "guid": [e.guid for e in chosen],
            "text_a": [e.text_a for e in chosen],
            "text_b": [e.text_b for e in chosen],
            "label": [e.label for e in chosen],
            "label_id": pa.array([labels.get(e.label) for e in chosen], pa.int32()),
        }
    )


# head_stats columns that have no meaning on a causal map (no [SEP]; the next token cannot be
# attended): a decoder's statistics hold NaN there, stored as SQL NULL (docs/metrics.md#decoders).
CAUSAL_NULL_COLUMNS = ("to_sep", "to_next", "norm_to_sep")
# Likewise value zeroing's columns in head_mixing and layer_mixing.
CAUSAL_NULL_VZ_COLUMNS = ("vz_to_sep", "vz_to_next")
# head_stats columns that are NULL on some layers: the learned sink's share where the layer has
# no learned sink, the norm-weighted shares where its heads are gated before W_O.
LAYER_NULL_COLUMNS = ("to_learned_sink", "norm_to_cls", "norm_to_punct")


def grid_rows(example_ids: np.ndarray, values: np.ndarray, columns: Sequence[str]) -> pa.Table:
    """One row per (example, layer, head) from values shaped (batch, layer, head,
    len(columns)), or per (example, layer) from (batch, layer, len(columns)), keyed by
    example_id, layer (and head) (a part's rows: no run_id)."""
    *shape, k = values.shape
    if k != len(columns):
        raise ValueError(f"{k} values per row but {len(columns)} column names")
    grid = np.indices(shape).reshape(len(shape), -1)
    flat = values.reshape(-1, k)
    rows = {"example_id": np.asarray(example_ids, dtype=np.int64)[grid[0]]}
    rows.update({name: grid[1 + i].astype(np.int16) for i, name in enumerate(("layer", "head")[: len(shape) - 1])})
    rows.update({name: _nullable(name, flat[:, j]) for j, name in enumerate(columns)})
    return pa.table(rows)


# head_roles scores a probe does not define (induction on a needle, retrieval on repeats).
ROLE_NULL_COLUMNS = ("induction", "duplicate", "retrieval")


def _nullable(name: str, values: np.ndarray) -> np.ndarray | pa.Array:
    """A column's values, with NaN as NULL in :data:`CAUSAL_NULL_COLUMNS`,
    :data:`CAUSAL_NULL_VZ_COLUMNS`, :data:`LAYER_NULL_COLUMNS` and :data:`ROLE_NULL_COLUMNS`."""
    nullable = CAUSAL_NULL_COLUMNS + CAUSAL_NULL_VZ_COLUMNS + LAYER_NULL_COLUMNS + ROLE_NULL_COLUMNS
    if name not in nullable or not np.isnan(values).any():
        return values
    return pa.array(values, mask=np.isnan(values))


# Tables whose layer is that of the hidden states (every layer of the model), not the place of an
# attention layer in the order the observers see them.
_MODEL_LAYER_TABLES = frozenset({"massive_activations"})


def number_layers(tables: Mapping[str, pa.Table], attention_layers: Sequence[int]) -> dict[str, pa.Table]:
    """`tables` with each attention layer under the model's own number: the observers count
    the attention layers in the order they run (0, 1, …), which on a hybrid model (linear
    attention or state-space layers between them) are not the model's layer numbers."""
    if list(attention_layers) == list(range(len(attention_layers))):
        return dict(tables)
    numbers = np.asarray(attention_layers, dtype=np.int16)
    out = {}
    for name, table in tables.items():
        if name not in _MODEL_LAYER_TABLES and "layer" in table.column_names:
            at = table.column_names.index("layer")
            table = table.set_column(at, "layer", pa.array(numbers[table["layer"].to_numpy()], pa.int16()))
        out[name] = table
    return out


def mixing_rows(
    example_ids: np.ndarray, mixed: np.ndarray | None, columns: Sequence[str], zeroed: np.ndarray | None
) -> pa.Table | None:
    """head_mixing rows from (batch, layer, head, k) or layer_mixing rows from (batch, layer,
    k): the residual + LayerNorm shares `mixed` under `columns` and value zeroing's shares
    `zeroed` (same grid, VZ_COLUMNS), either of which may be absent; None when both are."""
    from attnwh.ingest.measures.value_zeroing import VZ_COLUMNS

    if mixed is None and zeroed is None:
        return None
    parts = [(mixed, columns), (zeroed, VZ_COLUMNS)]
    values = np.concatenate([v for v, _ in parts if v is not None], axis=-1)
    return grid_rows(example_ids, values, [c for v, names in parts if v is not None for c in names])


def massive_rows(example_ids: np.ndarray, found: Mapping[str, np.ndarray]) -> pa.Table:
    """massive_activations rows (without run_id) from `massive.scan`'s columns, whose `row`
    is the example's place in the batch."""
    return pa.table(
        {
            "example_id": np.asarray(example_ids, dtype=np.int64)[found["row"]],
            "layer": found["layer"].astype(np.int16),
            "rank": found["rank"].astype(np.int16),
            "magnitude": found["magnitude"].astype(np.float32),
            "dim": found["dim"].astype(np.int32),
            "position": found["position"].astype(np.int32),
            "token_kind": pa.array(found["token_kind"], pa.string()),
            "median": found["median"].astype(np.float32),
        }
    )


def done_rows(
    example_ids: np.ndarray,
    n_tokens: np.ndarray,
    n_tokens_full: np.ndarray,
    token_ids: Sequence[np.ndarray] | None = None,
) -> pa.Table:
    """run_examples rows (without run_id) marking these examples done; with `token_ids`,
    the ids the model read of each, so that its maps can be recomputed from exactly them."""
    columns = {
        "example_id": np.asarray(example_ids, dtype=np.int64),
        "n_tokens": np.asarray(n_tokens).astype(np.int32),
        "n_tokens_full": np.asarray(n_tokens_full).astype(np.int32),
        "truncated": np.asarray(n_tokens_full) > np.asarray(n_tokens),
    }
    if token_ids is not None:
        columns["token_ids"] = pa.array([np.asarray(ids).tolist() for ids in token_ids], pa.list_(pa.int32()))
    return pa.table(columns)


def store_part(con: duckdb.DuckDBPyConnection, run_id: int, part: Part) -> int:
    """Commit one part of a run (rows by table, without run_id) in one transaction, so a run
    never holds part of an example; returns the examples it marked done.

    The one way rows of the heavy stages reach the warehouse: the single process, the Ray
    driver and `attnwh merge` all store here. Storing is idempotent: rows of examples the
    run already holds are dropped (tables without a key), or skipped by their key; an
    example is marked done when its part covers all its rows, or (an ablation unit of one
    group of configurations) once the run holds its prediction under every configuration
    of the sweep.
    """
    tables = run_tables(con)
    for name in part.tables:
        if name != "examples" and name not in tables:
            raise ValueError(f"{name!r} is not a table of run rows")
    with transaction(con):
        ids = part.example_ids
        with registered(con, pa.table({"example_id": ids})) as wanted:
            stored = con.execute(
                f"SELECT example_id FROM run_examples WHERE run_id = ? AND example_id IN (SELECT example_id FROM {wanted})",
                [run_id],
            ).fetchnumpy()["example_id"]
        fresh = pc.invert(pc.is_in(ids, pa.array(stored, pa.int64())))
        for name, rows in part.tables.items():
            if name in ("examples", "run_examples"):
                continue
            if name not in _KEYED:
                rows = rows.filter(pc.is_in(rows["example_id"], ids.filter(fresh)))
            insert_arrow(con, name, with_run_id(rows, run_id), or_ignore=name in _KEYED)
        if "examples" in part.tables:
            insert_arrow(con, "examples", part.tables["examples"], or_ignore=True)
        done = with_run_id(part.tables["run_examples"].filter(fresh), run_id)
        if part.covers_examples:
            insert_arrow(con, "run_examples", done)
            n_done = done.num_rows
        else:
            n_done = _mark_swept(con, run_id, done, "ablation_losses" in part.tables)
        add_seconds(con, run_id, part.seconds)
    return n_done


# Tables of run rows keyed by (run_id, example_id, …): a row already there is skipped.
# head_stats and attention_change have no key (it would slow every insert); their rows are
# dropped for examples the run already holds instead.
_KEYED = frozenset(
    {
        "pattern_thumbnails",
        "pattern_maps",
        "example_tokens",
        "ablation_configs",
        "ablation_predictions",
        "ablation_losses",
        "prompt_predictions",
        "role_settings",
        "role_probes",
        "head_roles",
        "relation_sums",  # keyed by unit: a relations part holds running totals, not rows per example
    }
)


def with_run_id(rows: pa.Table, run_id: int) -> pa.Table:
    """A part's rows as rows of run `run_id`."""
    return rows.add_column(0, "run_id", pa.array(np.full(rows.num_rows, run_id, dtype=np.int32)))


def _mark_swept(con: duckdb.DuckDBPyConnection, run_id: int, candidates: pa.Table, losses: bool = False) -> int:
    """Mark done the candidates that now have a prediction (with `losses`, a loss over the
    whole sequence) under every configuration of the sweep (baseline, heads, layers);
    returns how many."""
    swept = "ablation_losses AS p" if losses else "ablation_predictions AS p"
    whole = "AND p.span = 'all'" if losses else ""
    with registered(con, candidates) as name:
        marked = con.execute(
            f"""
            INSERT OR IGNORE INTO run_examples BY NAME
            SELECT c.* FROM {name} AS c
            JOIN (SELECT p.example_id, count(*) AS n
                  FROM {swept} JOIN ablation_configs AS k USING (run_id, config_id)
                  WHERE p.run_id = $run AND k.kind IN ('baseline', 'head', 'layer') {whole}
                    AND p.example_id IN (SELECT example_id FROM {name})
                  GROUP BY p.example_id) AS swept USING (example_id)
            WHERE swept.n = (SELECT count(*) FROM ablation_configs
                             WHERE run_id = $run AND kind IN ('baseline', 'head', 'layer'))
            RETURNING example_id
            """,
            {"run": run_id},
        ).fetchall()
    return len(marked)


def thumbnail_rows(example_ids: np.ndarray, n_tokens: Sequence[int], thumbnails: np.ndarray) -> pa.Table:
    """pattern_thumbnails rows (without run_id) from thumbnails shaped (examples, layer,
    head, size²)."""
    count, layers, heads, cells = thumbnails.shape
    grid = np.indices((count, layers, heads)).reshape(3, -1)
    flat = np.ascontiguousarray(thumbnails.reshape(-1, cells), dtype=np.float32)
    offsets = pa.array(np.arange(0, flat.size + 1, cells, dtype=np.int32))
    return pa.table(
        {
            "example_id": np.asarray(example_ids, dtype=np.int64)[grid[0]],
            "layer": grid[1].astype(np.int16),
            "head": grid[2].astype(np.int16),
            "n_tokens": np.asarray(n_tokens, dtype=np.int32)[grid[0]],
            "thumbnail": pa.ListArray.from_arrays(offsets, pa.array(flat.ravel())),
        }
    )


def map_rows(example_ids: np.ndarray, maps: Sequence[np.ndarray]) -> pa.Table:
    """pattern_maps rows (without run_id) from one (layer, head, n, n) array per example: the
    rows of :func:`thumbnail_rows` with each whole map flattened in place of a thumbnail."""
    tables = [
        thumbnail_rows(np.array([example_id]), [m.shape[-1]], m.reshape(1, *m.shape[:2], -1))
        for example_id, m in zip(np.asarray(example_ids, dtype=np.int64), maps, strict=True)
    ]
    return pa.concat_tables(tables).rename_columns(["example_id", "layer", "head", "n_tokens", "attention"])


def token_rows(example_ids: np.ndarray, tokens: Sequence[Sequence[str]]) -> pa.Table:
    """example_tokens rows (without run_id): each example's real tokens."""
    return pa.table(
        {
            "example_id": pa.array(np.asarray(example_ids, dtype=np.int64)),
            "tokens": pa.array([list(t) for t in tokens], pa.list_(pa.string())),
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
