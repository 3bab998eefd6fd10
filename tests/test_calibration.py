"""Calibrating the pattern rules to hand labels: the threshold fit recovers thresholds that
generated the labels, cross-validation predicts every map once from a classifier that never
saw it, and `attnwh patterns calibrate` stores a named set that `reclassify --thresholds`
applies; errors are one line."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from attnwh.ingest.measures import calibration, patterns
from fixtures import synthetic_maps
from helpers import run

# Thresholds unlike the shipped ones, inside the grid: labels made with them are what a fit
# must find again.
HIDDEN = patterns.Thresholds(vertical=0.31, diagonal=0.22, mixed_vertical=0.12, mixed_diagonal=0.09, block=0.71)


def _features(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    features = rng.dirichlet(np.ones(7), size=n)[:, :6].astype(np.float32)  # shares summing below 1
    features[:, 5] = np.where(rng.random(n) < 0.5, rng.random(n), 0.0)  # block: pairs only
    return features


def test_fit_recovers_the_thresholds_that_made_the_labels():
    features = _features(600, 0)
    labels = calibration.rule_predictions(features, HIDDEN)
    assert len(set(labels.tolist())) == 5
    fitted = calibration.fit_thresholds(features, labels)
    assert calibration.macro_f1(labels, calibration.rule_predictions(features, fitted), range(5)) == 1.0
    shipped = calibration.macro_f1(labels, calibration.rule_predictions(features, patterns.THRESHOLDS), range(5))
    assert shipped < 0.9  # the fit had something to find
    held_out = _features(600, 1)
    agreement = np.mean(
        calibration.rule_predictions(held_out, fitted) == calibration.rule_predictions(held_out, HIDDEN)
    )
    assert agreement > 0.97


def test_macro_f1_equals_scikit_learn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(2)
    for _ in range(30):
        y = rng.integers(0, 5, 80)
        p = np.where(rng.random(80) < 0.6, y, rng.integers(0, 5, 80))
        classes = sorted(set(y.tolist()))
        want = f1_score(y, p, labels=classes, average="macro", zero_division=0)
        assert calibration.macro_f1(y, p, classes) == pytest.approx(want)


def test_cross_validation_predicts_each_map_once_without_its_label():
    labels = np.repeat(np.arange(5), [30, 25, 20, 15, 4])
    split = calibration.folds(labels, 5, seed=3)
    tests = np.concatenate([t for _, t in split])
    assert sorted(tests.tolist()) == list(range(len(labels)))
    assert all(not set(tr) & set(te) for tr, te in split)
    again = calibration.folds(labels, 5, seed=3)
    assert all(a.tolist() == b.tolist() for (_, a), (_, b) in zip(split, again, strict=True))
    assert split[0][1].tolist() != calibration.folds(labels, 5, seed=4)[0][1].tolist()

    seen: list[set[int]] = []

    def majority(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        seen.append(set(train.tolist()))
        return np.full(len(test), np.bincount(labels[train]).argmax())

    scores = calibration.cross_validate("majority", labels, split, majority)
    assert all(not s & set(te.tolist()) for s, (_, te) in zip(seen, split, strict=True))
    assert (scores.predictions == 0).all() and scores.agreement == pytest.approx(30 / 94)
    from sklearn.metrics import f1_score

    assert scores.macro_f1 == pytest.approx(f1_score(labels, scores.predictions, average="macro"))
    assert scores.confusion.sum() == len(labels) and scores.confusion[:, 0].tolist() == [30, 25, 20, 15, 4]


def test_scores_across_groups_and_on_subsets():
    """across_groups fits on every other group only and scores each group's own maps; subset
    reads held-out predictions on a mask; both as scikit-learn scores them."""
    from sklearn.metrics import accuracy_score, f1_score

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 120)
    groups = np.array(["a"] * 50 + ["b"] * 40 + ["c"] * 30, dtype=object)
    seen = {}

    def noisy(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        seen[tuple(test.tolist())] = set(train.tolist())
        return np.where(rng.random(len(test)) < 0.7, labels[test], (labels[test] + 1) % 5)

    across = calibration.across_groups("others", labels, groups, noisy)
    assert list(across) == ["a", "b", "c"]
    for group, scores in across.items():
        test = np.flatnonzero(groups == group)
        assert seen[tuple(test.tolist())] == set(np.flatnonzero(groups != group).tolist())
        assert scores.agreement == pytest.approx(accuracy_score(labels[test], scores.predictions))
        assert scores.macro_f1 == pytest.approx(f1_score(labels[test], scores.predictions, average="macro"))
        assert scores.confusion.sum() == len(test)
        assert scores.f1_of(4) == pytest.approx(f1_score(labels[test], scores.predictions, labels=[4], average=None)[0])
    split = calibration.folds(labels, 4, seed=1)
    pooled = calibration.cross_validate("noisy", labels, split, noisy)
    where = groups == "b"
    part = calibration.subset(pooled, labels, where, "b")
    assert part.agreement == pytest.approx(accuracy_score(labels[where], pooled.predictions[where]))
    assert part.macro_f1 == pytest.approx(f1_score(labels[where], pooled.predictions[where], average="macro"))


def _labelled_warehouse(tmp_path: Path, monkeypatch, capsys) -> tuple[Path, np.ndarray]:
    """A synthetic-map warehouse whose hand labels are the HIDDEN thresholds' types."""
    db = tmp_path / "labelled.duckdb"
    rows = synthetic_maps.write_warehouse(db, synthetic_maps.generate(30, 5))
    with duckdb.connect(str(db), read_only=True) as con:
        features = np.array(
            con.execute(
                f"SELECT {', '.join(patterns.FEATURE_COLUMNS)} FROM head_stats ORDER BY run_id, example_id, layer, head"
            ).fetchall(),
            np.float32,
        )
    labels = calibration.rule_predictions(features, HIDDEN)
    path = tmp_path / "labels.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "example", "layer", "head", "type"])
        for (r, e, layer, head, _), code in zip(sorted(rows), labels, strict=True):
            writer.writerow([r, e, layer, head, patterns.PATTERN_TYPES[code]])
    code, _, err = run(monkeypatch, capsys, "patterns", "import-labels", str(path), "--db", str(db))
    assert code == 0, err
    return db, features


@pytest.mark.slow
def test_calibrate_stores_a_set_that_reclassify_applies(tmp_path, monkeypatch, capsys):
    db, features = _labelled_warehouse(tmp_path, monkeypatch, capsys)
    code, out, err = run(monkeypatch, capsys, "patterns", "calibrate", "--name", "mine", "--no-cnn", "--db", str(db))
    assert code == 0, err
    text = " ".join(out.split())
    assert "150 labelled maps, 5 stratified folds" in text and "stored as 'mine'" in text
    # The shipped classifier as it is (marked: not fitted per fold) and its training procedure.
    assert "classifier (shipped weights) *" in text and "classifier (retrained, nested)" in text
    # The nested predictions read per model and per length band (the synthetic maps run from
    # 8 to 128 tokens); one model, so no row trained on other models.
    cells = [c.strip() for c in out.replace("┃", "│").split("│")]
    rows = {cells[i]: cells[i + 1 : i + 5] for i in range(len(cells) - 4) if cells[i].startswith(("model ", "length "))}
    assert set(rows) == {"model synthetic/maps", "length ≤ 64 tokens", "length > 64 tokens"}
    assert rows["model synthetic/maps"][0] == "150"
    assert int(rows["length ≤ 64 tokens"][0]) + int(rows["length > 64 tokens"][0]) == 150
    assert "trained on the others" not in text
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute(
            "SELECT vertical, diagonal, mixed_vertical, mixed_diagonal, block, n_labels, cv_macro_f1 FROM pattern_thresholds"
        ).fetchall()
    assert len(stored) == 1 and stored[0][5] == 150 and stored[0][6] > 0.8
    fitted = patterns.Thresholds(*stored[0][:5])

    code, out, err = run(monkeypatch, capsys, "patterns", "reclassify", "--thresholds", "mine", "--db", str(db))
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        codes = np.array(
            con.execute("SELECT pattern FROM head_stats ORDER BY run_id, example_id, layer, head").fetchall()
        )[:, 0]
    np.testing.assert_array_equal(codes, patterns.classify(torch.from_numpy(features), fitted).numpy())
    # Refitting under the same name replaces the set; 'default' is the shipped thresholds.
    code, _, err = run(
        monkeypatch, capsys, "patterns", "calibrate", "--name", "mine", "--no-cnn", "--folds", "3", "--db", str(db)
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), max(folds) FROM pattern_thresholds").fetchall() == [(1, 3)]
    code, _, err = run(monkeypatch, capsys, "patterns", "reclassify", "--thresholds", "default", "--db", str(db))
    assert code == 0, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reclassify", "--thresholds", "nope"], "no threshold set 'nope' (stored: default)"),
        (["reclassify", "--thresholds", "default", "--classifier", "cnn"], "do not apply to --classifier cnn"),
        (["calibrate", "--name", "default"], "a threshold set needs a name other than 'default'"),
        (["calibrate"], "calibrating needs at least 10"),
    ],
)
def test_calibration_errors_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    db = tmp_path / "w.duckdb"
    synthetic_maps.write_warehouse(db, synthetic_maps.generate(2, 0))
    code, _, err = run(monkeypatch, capsys, "patterns", *args, "--db", str(db))
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
