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
        _insert_relations(con, run_id, layers, heads)
        _insert_ablations(con, run_id + 2, len(models), tasks, examples, layers, heads)
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
        INSERT INTO head_stats (run_id, example_id, layer, head, to_cls, to_sep, to_punct, to_self, to_prev,
                                to_next, entropy, max_weight, norm_to_cls, norm_to_sep, norm_to_punct,
                                col_cls, col_sep, col_punct, col_other, band, block, pattern)
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
               cls * 0.4, sep * 0.3, punct * 0.8,
               -- pattern features and a type: vertical where the shares are high, diagonal
               -- and block in some heads of some layers, heterogeneous otherwise
               cls * 0.9, sep * 0.9, punct * 0.9, 0.05 * u, 0.1 + 0.5 * (1 - head_bias) * depth * u,
               {0.4 if task_index % 2 else 0.0} + 0.3 * u,
               CASE WHEN cls + sep + punct >= 0.4 THEN 1
                    WHEN head_bias > 0.9 AND u > 0.3 THEN 2
                    WHEN head_bias < 0.1 AND depth > 0.5 THEN 3
                    WHEN {task_index % 2} = 1 AND u > 0.85 THEN 4
                    ELSE 0 END
        FROM shares
        """
    )
    # Thumbnails of the first two examples: stripes on the first and last columns for
    # vertical maps, a diagonal for diagonal ones, both, two blocks, or a faint checker.
    con.execute(
        f"""
        INSERT INTO pattern_thumbnails (run_id, example_id, layer, head, n_tokens, thumbnail)
        SELECT run_id, example_id, layer, head, 20 + (example_id % 1000000000)::INTEGER % 40,
               list_transform(range(1024), lambda x:
                   (CASE pattern
                        WHEN 1 THEN CASE WHEN x % 32 IN (0, 31) THEN 0.4 ELSE 0.01 END
                        WHEN 2 THEN CASE WHEN x % 32 = x // 32 + 1 THEN 0.6 ELSE 0.01 END
                        WHEN 3 THEN CASE WHEN x % 32 = 0 OR x % 32 = x // 32 - 1 THEN 0.3 ELSE 0.01 END
                        WHEN 4 THEN CASE WHEN (x % 32 < 16) = (x // 32 < 16) THEN 0.06 ELSE 0.005 END
                        ELSE 0.02 + 0.02 * (((x * 37 + layer * 11 + head * 5) % 7) / 7.0)
                    END)::FLOAT)
        FROM head_stats
        WHERE run_id = {run_id} AND example_id % 1000000000 < 2
        """
    )


def _insert_relations(con, last_run_id: int, layers: int, heads: int) -> None:
    """One `attnwh ingest relations` pair of runs for the first model: dependencies with
    feature words, and frame links. Accuracies rise with depth for some heads, as in BERT."""
    deps, frames = last_run_id + 1, last_run_id + 2
    for run_id, task, dataset, n in ((deps, "dependencies", "synthetic-ud.conllu", 200),
                                     (frames, "frames", "synthetic-fn.conll", 60)):
        con.execute(
            "INSERT INTO runs (run_id, kind, run_key, model_id, dataset, task, split, source, example_limit, seed,"
            " max_length, n_examples, n_truncated, device, dtype, batch_size, versions, command, status, started_at,"
            " finished_at, seconds) VALUES (?, 'relations', ?, 1, ?, ?, 'dev', 'attnwh.reports.synthetic', NULL, 42,"
            " 512, ?, 0, 'cpu', 'float32', 32, '{\"attnwh\": \"synthetic\"}', 'build_synthetic_warehouse',"
            " 'complete', TIMESTAMP '2025-01-01 00:00:00', TIMESTAMP '2025-01-01 00:01:00', 60.0)",
            [run_id, f"synthetic-{run_id}", dataset, task, n],
        )
    relations = ("det", "nsubj", "obj", "amod", "case", "advmod")
    totals = ", ".join(f"('{r}', {k}, {400 - 50 * k})" for k, r in enumerate(relations))
    con.execute(
        f"""
        INSERT INTO dependency_heads
        WITH rel(relation, k, total) AS (VALUES {totals}),
        grid AS (
            SELECT relation, k, total, d.i AS d, l.i AS layer, h.i AS head,
                   ((k * 7919 + d.i * 104729 + l.i * 1299709 + h.i * 15485863) % 1000) / 1000.0 AS u
            FROM rel, range(2) AS d(i), range({layers}) AS l(i), range({heads}) AS h(i)
        )
        SELECT {deps}, relation, CASE d WHEN 0 THEN 'dep_to_head' ELSE 'head_to_dep' END, layer, head,
               round(total * (0.05 + 0.85 * u * u * (layer + 1) / {layers}))::INTEGER AS correct, total,
               round(total * (0.05 + 0.85 * u * u * (layer + 1) / {layers}))::INTEGER / total::DOUBLE
        FROM grid
        """
    )
    con.execute(
        f"INSERT INTO dependency_baselines SELECT {deps}, relation, CASE WHEN k % 2 = 0 THEN 1 ELSE -1 END,"
        f" total * (3 + k) // 10, total, (total * (3 + k) // 10) / total::DOUBLE FROM (VALUES {totals}) AS rel(relation, k, total)"
    )
    features = ", ".join(f"('{f}', {k})" for k, f in
                         enumerate(("noun", "verb", "pronoun", "subject", "object", "negation")))
    con.execute(
        f"""
        INSERT INTO feature_attention
        SELECT {deps}, feature, l.i, h.i, 150 - 20 * k, 300 - 40 * k,
               0.08 * (1 + ((k * 31 + l.i * 17 + h.i * 7) % 10) / 5.0),
               0.06 * (1 + ((k * 31 + l.i * 17 + h.i * 7) % 10) / 5.0),
               0.08, 0.06
        FROM (VALUES {features}) AS f(feature, k), range({layers}) AS l(i), range({heads}) AS h(i)
        """
    )
    con.execute(
        f"""
        INSERT INTO frame_heads
        WITH grid AS (
            SELECT d.direction, l.i AS layer, h.i AS head,
                   0.05 + 0.4 * (((l.i * 104729 + h.i * 1299709 + d.k * 7919) % 1000) / 1000.0) AS m
            FROM (VALUES ('target_to_element', 0), ('element_to_target', 1), ('either', 2)) AS d(direction, k),
                 range({layers}) AS l(i), range({heads}) AS h(i)
        )
        SELECT {frames}, direction, layer, head, 60, m,
               100.0 * (count(*) OVER (PARTITION BY direction ORDER BY m
                                       RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) / ({layers} * {heads}),
               row_number() OVER (PARTITION BY direction ORDER BY m DESC, layer, head)
        FROM grid
        """
    )
    con.execute(f"INSERT INTO frame_filters VALUES ({frames}, 300, 40, 150, 30, 20, 60, 45, 60, 12, 3, 2)")


def _insert_ablations(con, last_run_id: int, model_id: int, tasks: tuple[str, ...], examples: int, layers: int,
                      heads: int) -> None:
    """One uniform ablation run per task on the last model: a few heads help a little, whole
    layers hurt more the earlier they are; importance follows the harm, loosely."""
    top_k = 3
    for t, task in enumerate(tasks):
        run_id = last_run_id + 1 + t
        con.execute(
            "INSERT INTO runs (run_id, kind, run_key, model_id, dataset, task, split, source, example_limit, seed,"
            " max_length, n_examples, n_truncated, device, dtype, batch_size, versions, command, status, started_at,"
            " finished_at, seconds) VALUES (?, 'ablation', ?, ?, 'synthetic', ?, 'dev', 'attnwh.reports.synthetic',"
            " NULL, 42, 512, ?, 0, 'cpu', 'float32', 32, '{\"attnwh\": \"synthetic\"}', 'build_synthetic_warehouse',"
            " 'complete', TIMESTAMP '2025-01-01 00:00:00', TIMESTAMP '2025-01-01 00:20:00', 1200.0)",
            [run_id, f"synthetic-{run_id}", model_id, task, examples],
        )
        con.execute(
            f"""
            INSERT INTO ablation_configs
            SELECT {run_id}, 0, 'baseline', 'uniform', NULL, NULL, NULL, 0, ''
            UNION ALL
            SELECT {run_id}, 1 + l.i * {heads} + h.i, 'head', 'uniform', l.i, h.i, NULL, 1, l.i || '-' || h.i
            FROM range({layers}) AS l(i), range({heads}) AS h(i)
            UNION ALL
            SELECT {run_id}, 1 + {layers * heads} + l.i, 'layer', 'uniform', l.i, NULL, NULL, {heads}, ''
            FROM range({layers}) AS l(i)
            UNION ALL
            SELECT {run_id}, 1 + {layers * heads + layers} + k.i, 'top_k', 'uniform', NULL, NULL, k.i + 1, k.i + 1, ''
            FROM range({top_k}) AS k(i)
            """
        )
        # delta per configuration: heads mostly near 0 (a few helpful), layers more harmful early.
        con.execute(
            f"""
            INSERT INTO ablations
            WITH c AS (
                SELECT config_id, kind, layer, head, k,
                       CASE kind
                           WHEN 'baseline' THEN 0.0
                           WHEN 'head' THEN 0.02 * ((((layer * 131 + head * 71 + {t} * 17) % 9) - 6) / 6.0)
                           WHEN 'layer' THEN -0.12 * ({layers} - layer) / {layers}
                           ELSE 0.01 * k - 0.006 * k * k
                       END AS delta
                FROM ablation_configs WHERE run_id = {run_id}
            )
            SELECT {run_id}, config_id, 'accuracy', 0.85 + delta, 0.85, delta, delta - 0.02, delta + 0.02,
                   CASE WHEN kind = 'baseline' THEN 1.0 ELSE least(1.0, 0.5 * exp(-60 * abs(delta))) END,
                   CASE WHEN kind IN ('head', 'layer') THEN least(1.0, 0.9 * exp(-60 * abs(delta))) END,
                   'mcnemar-exact', {examples}, 1000
            FROM c
            """
        )
        con.execute(
            f"""
            INSERT INTO head_importance
            SELECT {run_id}, layer, head, imp, imp / sqrt(sum(imp * imp) OVER (PARTITION BY layer)), {examples}
            FROM (SELECT l.i AS layer, h.i AS head, 0.01 + 0.002 * (8 - (l.i * 131 + h.i * 71 + {t} * 17) % 9) AS imp
                  FROM range({layers}) AS l(i), range({heads}) AS h(i))
            """
        )
