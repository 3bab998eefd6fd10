"""A synthetic warehouse: realistic shapes, made-up numbers, written straight with SQL.

`attnwh report` is read by people comparing models at dataset scale, so it has to stay fast
on warehouses with millions of head-statistics rows. Running real encoders to get such a file
takes hours; this module writes one in seconds with DuckDB's `range()`, in the same schema
(the real migrations), for the report benchmark (`bench/report.py`) and for tests that need a
deterministic warehouse (the golden chart specs). The values are deterministic arithmetic,
shaped loosely like BERT's (attention to [CLS] early, to [SEP] in the middle layers, to
punctuation late) so that charts look like charts; they are not measurements.
"""

from __future__ import annotations

from pathlib import Path

from attnwh.sql import warehouse


def build_synthetic_warehouse(
    path: Path | str,
    models: tuple[str, ...] = ("synthetic/bert-base", "synthetic/roberta-base"),
    tasks: tuple[str, ...] = ("sst2", "rte"),
    examples: int = 580,
    layers: int = 6,
    heads: int = 12,
) -> int:
    """Create a warehouse at `path` (which must not exist) with one complete statistics run
    per model and task; returns the number of head_stats rows written
    (models × tasks × examples × layers × heads). Ids are written explicitly, so the file is
    for reading: do not `attnwh ingest` into it."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(path)
    con = warehouse.connect(path)
    try:
        con.begin()
        for m, name in enumerate(models, start=1):
            con.execute(
                "INSERT INTO models (model_id, name, weights_hash, family, architecture, num_layers, num_heads,"
                " hidden_size, max_length, added_at) VALUES (?, ?, ?, ?, 'BertModel', ?, ?, 768, 512,"
                " TIMESTAMP '2025-01-01 00:00:00')",
                [m, name, f"{m:064x}", name.rsplit("/", 1)[-1].split("-")[0], layers, heads],
            )
        for t, task in enumerate(tasks):
            # Example ids only need to be unique; real ones are hashes, these are t·10⁹ + position.
            con.execute(
                "INSERT INTO examples SELECT ? * 1000000000 + i, 'synthetic', ?, 'dev', i, NULL,"
                " 'Synthetic sentence number ' || i || ' of task ' || ?, NULL, (i % 2)::VARCHAR, i % 2"
                " FROM range(?) AS r(i)",
                [t, task, task, examples],
            )
        run_id = 0
        for m, _ in enumerate(models, start=1):
            for t, task in enumerate(tasks):
                run_id += 1
                con.execute(
                    "INSERT INTO runs (run_id, kind, run_key, model_id, dataset, task, split, source, example_limit,"
                    " seed, max_length, n_examples, n_truncated, device, dtype, batch_size, versions, command,"
                    " status, started_at, finished_at, seconds) VALUES (?, 'statistics', ?, ?, 'synthetic', ?,"
                    " 'dev', 'attnwh.reports.synthetic', NULL, 42, 512, ?, 0, 'cpu', 'float32', 32,"
                    " '{\"attnwh\": \"synthetic\"}', 'build_synthetic_warehouse', 'complete',"
                    " TIMESTAMP '2025-01-01 00:00:00', TIMESTAMP '2025-01-01 00:10:00', 600.0)",
                    [run_id, f"synthetic-{run_id}", m, task, examples],
                )
                con.execute(
                    "INSERT INTO run_examples SELECT ?, ? * 1000000000 + i, 20 + i % 40, 20 + i % 40, false"
                    " FROM range(?) AS r(i)",
                    [run_id, t, examples],
                )
                _insert_head_stats(con, run_id, t, examples, layers, heads)
        if len(models) > 1:  # the last model plays a tuned version of the first
            for t, task in enumerate(tasks):
                run_id += 1
                con.execute(
                    "INSERT INTO runs (run_id, kind, run_key, model_id, base_model_id, dataset, task, split, source,"
                    " example_limit, seed, max_length, n_examples, n_truncated, device, dtype, batch_size, versions,"
                    " command, status, started_at, finished_at, seconds) VALUES (?, 'compare', ?, ?, 1, 'synthetic',"
                    " ?, 'dev', 'attnwh.reports.synthetic', NULL, 42, 512, ?, 0, 'cpu', 'float32', 32,"
                    " '{\"attnwh\": \"synthetic\"}', 'build_synthetic_warehouse', 'complete',"
                    " TIMESTAMP '2025-01-01 00:00:00', TIMESTAMP '2025-01-01 00:10:00', 600.0)",
                    [run_id, f"synthetic-{run_id}", len(models), task, examples],
                )
                # Cosine falls with depth, as the paper saw: the last layers change most.
                con.execute(
                    f"INSERT INTO attention_change SELECT {run_id}, {t} * 1000000000 + e.i, l.i, h.i,"
                    f" 1 - 0.4 * (l.i / greatest({layers} - 1, 1)::DOUBLE)"
                    f" * (((e.i * 7919 + l.i * 104729 + h.i * 1299709) % 1000) / 1000.0)"
                    f" FROM range({examples}) AS e(i), range({layers}) AS l(i), range({heads}) AS h(i)"
                )
        con.commit()
        return con.execute("SELECT count(*) FROM head_stats").fetchall()[0][0]
    except BaseException:
        con.rollback()
        raise
    finally:
        con.close()


def _insert_head_stats(con, run_id: int, task_index: int, examples: int, layers: int, heads: int) -> None:
    # u is a deterministic pseudo-random number in [0, 1) per row; depth is the layer's
    # position in [0, 1]. The three shares stay below 1 together.
    con.execute(
        f"""
        INSERT INTO head_stats
        WITH grid AS (
            SELECT e.i AS i, l.i::SMALLINT AS layer, h.i::SMALLINT AS head,
                   ((e.i * 7919 + l.i * 104729 + h.i * 1299709 + {run_id} * 15485863) % 1000) / 1000.0 AS u,
                   ((h.i * 31 + l.i * 17 + {run_id} * 7) % 100) / 100.0 AS head_bias,
                   l.i / greatest({layers} - 1, 1)::DOUBLE AS depth
            FROM range({examples}) AS e(i), range({layers}) AS l(i), range({heads}) AS h(i)
        ), shares AS (
            SELECT *,
                   0.45 * (1 - depth) * head_bias + 0.05 * u AS cls,
                   0.55 * (1 - abs(depth - 0.5) * 2) * (1 - head_bias) + 0.05 * u AS sep,
                   0.25 * depth * head_bias + 0.03 * u AS punct
            FROM grid
        )
        SELECT {run_id}, {task_index} * 1000000000 + i, layer, head,
               cls, sep, punct,
               0.05 + 0.1 * u, 0.1 * (1 - depth) * u, 0.1 * depth * u,
               0.5 + 2.5 * (1 - head_bias) * (1 - 0.3 * u), 0.2 + 0.6 * head_bias,
               cls * 0.4, sep * 0.3, punct * 0.8
        FROM shares
        """
    )
