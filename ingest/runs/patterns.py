"""Pattern types in the warehouse: re-labelling stored rows, importing hand labels, training
and applying the CNN. The library behind `attnwh patterns`; none of it needs the encoder.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import torch

from attnwh.errors import DataError, UsageError
from attnwh.ingest.measures import calibration, pattern_cnn, pattern_model, patterns
from attnwh.sql.warehouse import first_row, insert_arrow, one_row, registered, transaction

# Accepted spellings of the types in a labels file, beside the names themselves.
_ALIASES = {
    "vertical_diagonal": "vertical+diagonal",
    "vertical + diagonal": "vertical+diagonal",
    "hetero": "heterogeneous",
}
LABEL_COLUMNS = ("run", "example", "layer", "head", "type")


def pattern_code(name: str) -> int | None:
    key = " ".join(name.strip().lower().split())
    key = _ALIASES.get(key, key)
    return patterns.PATTERN_TYPES.index(key) if key in patterns.PATTERN_TYPES else None


def _features(table: pa.Table, columns: Sequence[str] = patterns.FEATURE_COLUMNS) -> np.ndarray:
    """(rows, len(columns)) float32 features from a table holding those columns."""
    return np.stack([table[c].to_numpy(zero_copy_only=False) for c in columns], -1).astype(np.float32)


def _run_filter(runs: Sequence[int] | None) -> tuple[str, list[object]]:
    if not runs:
        return "", []
    return f" AND run_id IN ({', '.join('?' for _ in runs)})", list(runs)


def reclassify(
    con: duckdb.DuckDBPyConnection,
    classifier: pattern_model.PatternModel | patterns.Thresholds,
    runs: Sequence[int] | None = None,
) -> dict[str, int]:
    """Re-label head_stats rows (type and margin) from their stored features, by a fitted
    classifier (the shipped one: `pattern_model.default()`) or by the rules with these
    thresholds, in one transaction; returns the number of rows per type after the change.
    Rows without features (written before pattern types existed) are left alone; so, by a
    fitted classifier, are rows without look features (written before it existed), which
    keep the types they have."""
    where, params = _run_filter(runs)
    rules = isinstance(classifier, patterns.Thresholds)
    columns = patterns.FEATURE_COLUMNS if rules else (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)
    typed = "pattern IS NOT NULL" if rules else "pattern IS NOT NULL AND look_col_1 IS NOT NULL"
    with transaction(con):
        run_ids = [
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT run_id FROM head_stats WHERE {typed}{where} ORDER BY 1", params
            ).fetchall()
        ]
        for run_id in run_ids:  # one run at a time keeps memory bounded
            table = con.sql(
                f"SELECT example_id, layer, head, {', '.join(columns)} FROM head_stats WHERE run_id = $run AND {typed}",
                params={"run": run_id},
            ).to_arrow_table()
            x = torch.from_numpy(_features(table, columns))
            k = len(patterns.FEATURE_COLUMNS)
            code, margin = pattern_model.assign(classifier, x[:, :k], x[:, k:])
            new = pa.table(
                {
                    "example_id": table["example_id"],
                    "layer": table["layer"],
                    "head": table["head"],
                    "pattern": code.numpy().astype(np.int16),
                    "pattern_margin": margin.numpy().astype(np.float32),
                }
            )
            with registered(con, new) as new_patterns:
                con.execute(
                    f"UPDATE head_stats AS s SET pattern = n.pattern, pattern_margin = n.pattern_margin"
                    f" FROM {new_patterns} AS n WHERE s.run_id = ?"
                    " AND s.example_id = n.example_id AND s.layer = n.layer AND s.head = n.head"
                    " AND (s.pattern IS DISTINCT FROM n.pattern OR s.pattern_margin IS DISTINCT FROM n.pattern_margin)",
                    [run_id],
                )
    rows = con.execute(
        f"SELECT t.name, count(s.pattern) FROM pattern_types AS t LEFT JOIN head_stats AS s"
        f" ON s.pattern = t.pattern{where.replace('run_id', 's.run_id')} GROUP BY t.pattern, t.name ORDER BY t.pattern",
        params,
    ).fetchall()
    return dict(rows)


def import_labels(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Read a labels CSV (columns run, example, layer, head, type; run = run_id, example =
    example_id) into pattern_labels, replacing earlier labels of the same maps. Every row is
    checked before anything is written; the first problem is raised as one line."""
    if not path.is_file():
        raise DataError(f"no labels file at {path}")
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip().lower() for h in reader.fieldnames or []]
            missing = [c for c in LABEL_COLUMNS if c not in header]
            if missing:
                raise DataError(
                    f"{path.name}: missing column(s) {', '.join(missing)} (need {', '.join(LABEL_COLUMNS)})"
                )
            reader.fieldnames = header
            rows = []
            for line, record in enumerate(reader, start=2):
                try:
                    keys = [int(str(record[c]).strip()) for c in LABEL_COLUMNS[:4]]
                except (TypeError, ValueError):
                    raise DataError(f"{path.name} line {line}: run, example, layer and head must be integers") from None
                code = pattern_code(record["type"] or "")
                if code is None:
                    raise DataError(
                        f"{path.name} line {line}: unknown type {record['type']!r} "
                        f"(one of {', '.join(patterns.PATTERN_TYPES)})"
                    )
                rows.append((*keys, code, line))
    except UnicodeDecodeError:
        raise DataError(f"{path.name} is not UTF-8 text") from None
    if not rows:
        raise DataError(f"{path.name} holds no labels")
    table = pa.table(
        {
            "run_id": pa.array([r[0] for r in rows], pa.int32()),
            "example_id": pa.array([r[1] for r in rows], pa.int64()),
            "layer": pa.array([r[2] for r in rows], pa.int16()),
            "head": pa.array([r[3] for r in rows], pa.int16()),
            "pattern": pa.array([r[4] for r in rows], pa.int16()),
            "line": pa.array([r[5] for r in rows], pa.int32()),
        }
    )
    with registered(con, table) as new_labels:
        dup = one_row(
            con,
            "SELECT min(line) FROM (SELECT line, row_number() OVER (PARTITION BY run_id, example_id,"
            f" layer, head ORDER BY line) AS k FROM {new_labels}) WHERE k > 1",
        )
        if dup[0] is not None:
            raise DataError(f"{path.name} line {dup[0]}: the same map is labelled twice")
        unknown = one_row(
            con,
            f"SELECT min(n.line) FROM {new_labels} AS n ANTI JOIN head_stats AS s"
            " ON s.run_id = n.run_id AND s.example_id = n.example_id AND s.layer = n.layer AND s.head = n.head",
        )
        if unknown[0] is not None:
            r = rows[[row[5] for row in rows].index(unknown[0])]
            raise DataError(
                f"{path.name} line {unknown[0]}: no map run {r[0]}, example {r[1]}, layer {r[2]}, head {r[3]} "
                "in the warehouse"
            )
        with transaction(con):
            con.execute(
                f"DELETE FROM pattern_labels AS l USING {new_labels} AS n WHERE l.run_id = n.run_id"
                " AND l.example_id = n.example_id AND l.layer = n.layer AND l.head = n.head"
            )
            insert_arrow(
                con,
                "pattern_labels",
                table.drop_columns(["line"]).append_column("source", pa.array([str(path)] * len(rows))),
            )
    return len(rows)


@dataclass(frozen=True)
class TrainResult:
    model_id: int
    n_labelled: int  # labels that have a thumbnail
    n_train: int
    n_test: int
    f1_cnn: float
    f1_rules: float


def train_cnn(
    con: duckdb.DuckDBPyConnection, seed: int = 42, epochs: int = 60, test_share: float = 0.25
) -> TrainResult:
    """Fit the CNN on every labelled map that has a thumbnail, score the CNN and the rules on
    the held-out maps, and store the model and both F1s in pattern_models."""
    feature_list = ", ".join(f"s.{c}" for c in patterns.FEATURE_COLUMNS)
    data = con.sql(
        f"SELECT t.thumbnail, l.pattern AS label, {feature_list} FROM pattern_labels AS l"
        " JOIN pattern_thumbnails AS t USING (run_id, example_id, layer, head)"
        " JOIN head_stats AS s USING (run_id, example_id, layer, head)"
        " ORDER BY l.run_id, l.example_id, l.layer, l.head"
    ).to_arrow_table()
    if data.num_rows < 10:
        raise UsageError(
            f"only {data.num_rows} labelled maps have thumbnails; `attnwh patterns train` needs at least 10 "
            "(import labels of maps from `attnwh ingest --thumbnails N`)"
        )
    thumbs = np.stack(data["thumbnail"].to_numpy(zero_copy_only=False)).astype(np.float32)
    labels = data["label"].to_numpy().astype(np.int64)
    # The shipped rules' types from the stored features (-1 where a row has none).
    features = _features(data)
    rules = np.where(
        np.isnan(features).any(1), -1, calibration.rule_predictions(np.nan_to_num(features), patterns.THRESHOLDS)
    )
    trained = pattern_cnn.train(thumbs, labels, seed=seed, epochs=epochs, test_share=test_share)
    held_rules = rules[trained.test].astype(np.int64)
    f1_rules = pattern_cnn.macro_f1(labels[trained.test], held_rules)
    settings = {
        "test_share": test_share,
        "learning_rate": 3e-3,
        "batch_size": 64,
        "input": "thumbnail / max",
        "architecture": "3 conv 3x3 (8, 16, 16) + pool to 4x4 + MLP 32",
    }
    # A trained CNN is not a run (it reads no examples with an encoder): its own table, its own ids.
    with transaction(con):
        model_id = one_row(con, "SELECT nextval('pattern_model_ids')")[0]
        insert_arrow(
            con,
            "pattern_models",
            {
                "model_id": pa.array([model_id], pa.int32()),
                "seed": [seed],
                "epochs": [epochs],
                "n_train": [len(trained.train)],
                "n_test": [len(trained.test)],
                "f1_cnn": [float(trained.f1_cnn)],
                "f1_rules": [float(f1_rules)],
                "settings": [json.dumps(settings)],
                "weights": pa.array([pattern_cnn.to_bytes(trained.model)], pa.binary()),
            },
        )
    return TrainResult(model_id, data.num_rows, len(trained.train), len(trained.test), trained.f1_cnn, f1_rules)


def reclassify_cnn(
    con: duckdb.DuckDBPyConnection, model_id: int | None = None, runs: Sequence[int] | None = None
) -> tuple[int, dict[str, int]]:
    """Label every stored thumbnail with a trained CNN (default: the latest), into
    pattern_thumbnails.cnn_pattern; returns the model id and the rows per type."""
    row = first_row(
        con,
        "SELECT model_id, weights FROM pattern_models WHERE (? IS NULL OR model_id = ?) ORDER BY model_id DESC LIMIT 1",
        [model_id, model_id],
    )
    if row is None:
        raise UsageError(
            "no trained pattern CNN in the warehouse; train one with `attnwh patterns train`"
            if model_id is None
            else f"no pattern CNN with id {model_id}"
        )
    chosen, weights = row
    model = pattern_cnn.from_bytes(bytes(weights))
    wanted = pa.table({"run_id": pa.array(list(runs or []), pa.int32())})
    with registered(con, wanted) as wanted_runs:
        table = con.sql(
            "SELECT run_id, example_id, layer, head, thumbnail FROM pattern_thumbnails"
            f" WHERE NOT EXISTS (SELECT 1 FROM {wanted_runs}) OR run_id IN (SELECT run_id FROM {wanted_runs})"
        ).to_arrow_table()
    if table.num_rows == 0:
        raise UsageError("no thumbnails to classify; `attnwh ingest --thumbnails N` stores them")
    thumbs = np.stack(table["thumbnail"].to_numpy(zero_copy_only=False)).astype(np.float32)
    codes = pattern_cnn.predict(model, thumbs)
    new = pa.table(
        {
            "run_id": table["run_id"],
            "example_id": table["example_id"],
            "layer": table["layer"],
            "head": table["head"],
            "cnn_pattern": codes.astype(np.int16),
        }
    )
    with registered(con, new) as new_cnn, transaction(con):
        con.execute(
            f"UPDATE pattern_thumbnails AS t SET cnn_pattern = n.cnn_pattern, cnn_model = ? FROM {new_cnn} AS n"
            " WHERE t.run_id = n.run_id AND t.example_id = n.example_id AND t.layer = n.layer AND t.head = n.head",
            [chosen],
        )
    counts = {name: int((codes == k).sum()) for k, name in enumerate(patterns.PATTERN_TYPES)}
    return chosen, counts


LABEL_ORDERS = ("random", "uncertain")


def label_sample(
    con: duckdb.DuckDBPyConnection,
    *,
    runs: Sequence[int] | None = None,
    task: str | None = None,
    layer: int | None = None,
    pattern: str | None = None,
    order: str = "random",
    limit: int | None = 200,
    seed: int = 0,
) -> list[dict[str, object]]:
    """The stored maps a labelling page shows (named query `label_maps`), as plain records:
    a seeded random sample, or with `order="uncertain"` the maps nearest a threshold of the
    rules first (head_stats.pattern_margin). Each record has the map's keys, model, task, its
    `n_tokens`, `tokens` (None where not stored), `cells` (the whole n × n map where kept,
    else the 32 × 32 thumbnail), `whole` (which one) and `margin`."""
    from attnwh.sql import queries

    if order not in LABEL_ORDERS:
        raise UsageError(f"order must be one of {', '.join(LABEL_ORDERS)}; got {order!r}")
    code = None if pattern is None else pattern_code(pattern)
    if pattern is not None and code is None:
        raise UsageError(f"unknown type {pattern!r} (one of {', '.join(patterns.PATTERN_TYPES)})")
    query = queries.get_query("label_maps")
    params = {"task": task, "layer": layer, "pattern": None if code is None else patterns.PATTERN_TYPES[code]}
    chosen_runs: list[int | None] = list(runs) if runs else [None]
    table = pa.concat_tables([queries.run_query(con, query, {**params, "run": run}) for run in chosen_runs])
    if not table.num_rows:
        return []
    records = table.to_pylist()
    # The stored margin is that of the thresholds the types were last given with; rows written
    # before margins were kept get the shipped thresholds' margin.
    computed = patterns.margins(torch.from_numpy(_features(table))).numpy()
    margin = np.array([computed[i] if r["margin"] is None else r["margin"] for i, r in enumerate(records)])
    if order == "uncertain":
        # Ties (equal margins) in a fixed order: the query's.
        chosen = np.argsort(margin, kind="stable")
    else:
        chosen = np.random.default_rng(seed).permutation(len(records))
    out = []
    for i in chosen[:limit]:
        r = records[int(i)]
        whole = r["attention"] is not None
        out.append(
            {
                "run": r["run_id"],
                "example": r["example_id"],
                "layer": r["layer"],
                "head": r["head"],
                "model": r["model"],
                "task": r["task"],
                "n_tokens": r["n_tokens"],
                "tokens": r["tokens"] if whole else None,
                "whole": whole,
                "cells": r["attention"] if whole else r["thumbnail"],
                "margin": float(margin[int(i)]),
            }
        )
    return out


RESERVED_THRESHOLDS = "default"


@dataclass(frozen=True)
class Calibration:
    """What `attnwh patterns calibrate` found: the thresholds fitted to every label, and the
    cross-validated scores of the classifiers."""

    name: str
    thresholds: patterns.Thresholds
    n_labels: int
    folds: int
    seed: int
    # Shipped rules, fitted rules, then (where every labelled map has look features) the shipped
    # classifier and its training procedure, then the CNN if it ran.
    scores: list[calibration.Scores]
    # The training procedure's nested cross-validated predictions read per model and per length
    # band (LENGTH_BANDS), and, where the labels hold maps of two models or more, trained on the
    # other models' labels only and scored on each model's (empty without look features).
    by_model: dict[str, calibration.Scores] = dataclasses.field(default_factory=dict)
    by_length: dict[str, calibration.Scores] = dataclasses.field(default_factory=dict)
    across_models: dict[str, calibration.Scores] = dataclasses.field(default_factory=dict)


# Length bands the classifier's agreement is read in: the labelled maps of the shipped set
# were at most 64 tokens long at first; longer maps are where it may not carry over.
LENGTH_BANDS: tuple[tuple[str, int, int], ...] = (("≤ 64 tokens", 0, 64), ("> 64 tokens", 65, 1 << 30))


def calibrate(
    con: duckdb.DuckDBPyConnection,
    name: str,
    folds: int = 5,
    seed: int = 0,
    cnn: bool = True,
    epochs: int = 60,
) -> Calibration:
    """Fit the rules' thresholds to the hand labels in pattern_labels; score the shipped
    rules, the fitted rules, the shipped classifier (as it is: if these labels are the ones
    it was trained on, that score is not held out), its training procedure (architecture
    chosen and weights fitted on each fold's training maps: nested cross-validation) and the
    CNN on the same seeded folds (`calibration.py`); store the thresholds fitted to all labels
    as threshold set `name` (replacing one of that name)."""
    if not name or name.strip() != name or name == RESERVED_THRESHOLDS:
        raise UsageError(f"a threshold set needs a name other than {RESERVED_THRESHOLDS!r}, without spaces at its ends")
    if folds < 2:
        raise UsageError(f"--folds must be at least 2, got {folds}")
    feature_list = ", ".join(f"s.{c}" for c in (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS))
    data = con.sql(
        f"SELECT l.pattern AS label, {feature_list}, t.thumbnail, t.n_tokens, m.name AS model"
        " FROM pattern_labels AS l"
        " JOIN head_stats AS s USING (run_id, example_id, layer, head)"
        " JOIN runs AS r USING (run_id) JOIN models AS m ON m.model_id = r.model_id"
        " LEFT JOIN pattern_thumbnails AS t USING (run_id, example_id, layer, head)"
        " WHERE s.band IS NOT NULL ORDER BY l.run_id, l.example_id, l.layer, l.head"
    ).to_arrow_table()
    labels = data["label"].to_numpy().astype(np.int64)
    counts = np.bincount(labels, minlength=len(patterns.PATTERN_TYPES))
    if len(labels) < 2 * folds or counts.max(initial=0) == len(labels):
        raise UsageError(
            f"{len(labels)} labelled maps with features ({', '.join(f'{n} {t}' for n, t in zip(counts, patterns.PATTERN_TYPES, strict=True) if n)});"
            f" calibrating needs at least {2 * folds} and two types (import labels with `attnwh patterns import-labels`)"
        )
    features = _features(data)
    split = calibration.folds(labels, folds, seed)
    shipped = patterns.THRESHOLDS
    scores = [
        calibration.cross_validate("rules (shipped)", labels, split, calibration.fixed_rules(features, shipped)),
        calibration.cross_validate(
            "rules (fitted)", labels, split, calibration.fitted_rules(features, labels, shipped)
        ),
    ]
    by_model, by_length, across = {}, {}, {}
    if data["look_col_1"].null_count == 0:  # every labelled map has look features
        x = pattern_model.features_of(_features(data, (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)))
        shipped_model = pattern_model.default()
        procedure = calibration.fitted_classifier(x, labels, seed)
        scores += [
            dataclasses.replace(
                calibration.cross_validate(
                    "classifier (shipped weights)",
                    labels,
                    split,
                    lambda _train, test: pattern_model.predict(shipped_model, x[test]),
                ),
                held_out=False,
            ),
            calibration.cross_validate("classifier (retrained, nested)", labels, split, procedure),
        ]
        nested = scores[-1]
        models = np.array(data["model"].to_pylist(), dtype=object)
        lengths = np.array([n if n is not None else -1 for n in data["n_tokens"].to_pylist()])
        for model in sorted(set(models.tolist())):
            by_model[model] = calibration.subset(nested, labels, models == model, model)
        for band, least, most in LENGTH_BANDS:
            where = (lengths >= least) & (lengths <= most)
            if where.any():
                by_length[band] = calibration.subset(nested, labels, where, band)
        if len(by_model) > 1:
            across = calibration.across_groups("trained on the other models", labels, models, procedure)
    thumbs = data["thumbnail"].to_pylist()
    if cnn and all(t is not None for t in thumbs):
        stacked = np.asarray(thumbs, dtype=np.float32)
        scores.append(
            calibration.cross_validate("CNN", labels, split, calibration.fitted_cnn(stacked, labels, seed, epochs))
        )
    fitted = calibration.fit_thresholds(features, labels, shipped)
    with transaction(con):
        con.execute("DELETE FROM pattern_thresholds WHERE name = ?", [name])
        insert_arrow(
            con,
            "pattern_thresholds",
            {
                "name": [name],
                **{k: [v] for k, v in fitted.as_dict().items()},
                "n_labels": pa.array([len(labels)], pa.int32()),
                "folds": pa.array([folds], pa.int32()),
                "seed": pa.array([seed], pa.int32()),
                "cv_macro_f1": [scores[1].macro_f1],
                "cv_agreement": [scores[1].agreement],
            },
        )
    return Calibration(name, fitted, len(labels), folds, seed, scores, by_model, by_length, across)


def threshold_set(con: duckdb.DuckDBPyConnection, name: str) -> patterns.Thresholds:
    """A stored threshold set by name; 'default' is the shipped thresholds."""
    if name == RESERVED_THRESHOLDS:
        return patterns.THRESHOLDS
    names = list(patterns.THRESHOLDS.as_dict())
    row = first_row(con, f"SELECT {', '.join(names)} FROM pattern_thresholds WHERE name = ?", [name])
    if row is None:
        known = [r[0] for r in con.execute("SELECT name FROM pattern_thresholds ORDER BY 1").fetchall()]
        raise UsageError(
            f"no threshold set {name!r} (stored: {', '.join([RESERVED_THRESHOLDS, *known])}); "
            "fit one with `attnwh patterns calibrate --name NAME`"
        )
    return patterns.Thresholds(**dict(zip(names, (float(v) for v in row), strict=True)))
