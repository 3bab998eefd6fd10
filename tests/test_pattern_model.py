"""The default pattern classifier (pattern_model.py): its torch evaluation equals
scikit-learn's, it survives JSON, the shipped weights load and agree with the synthetic maps
of known type, and `patterns reclassify` switches between it and the rules."""

from __future__ import annotations

import shutil

import duckdb
import numpy as np
import pytest
import torch

from attnwh.ingest.measures import pattern_model, patterns
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS
from fixtures import synthetic_maps
from helpers import run

HELD_OUT_SEED = 20241130  # as test_patterns: never used to make the anchors (seed 5)


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    width = len(pattern_model.INPUT_NAMES)
    x = rng.normal(size=(n, width)).astype(np.float32) * rng.uniform(0.1, 5, width)
    labels = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 5] > 0.3) + (x[:, 7] * x[:, 8] > 1)
    return x, np.minimum(labels, 4)


@pytest.mark.parametrize("candidate", list(pattern_model.CANDIDATES))
def test_torch_evaluation_equals_scikit_learn(candidate):
    """Probabilities from the exported weights equal scikit-learn's predict_proba of the
    same fitted pipeline, directly and through JSON."""
    x, labels = _data()
    fitted = pattern_model.estimator(candidate, seed=3).fit(x, labels)
    model = pattern_model.from_estimator(fitted, candidate)
    test, _ = _data(50, seed=1)
    expected = np.zeros((50, 5))
    expected[:, fitted.classes_] = fitted.predict_proba(test)
    np.testing.assert_allclose(model.probabilities(torch.from_numpy(test)).numpy(), expected, atol=1e-5)
    again = pattern_model.PatternModel.from_json(model.to_json())
    np.testing.assert_allclose(again.probabilities(torch.from_numpy(test)).numpy(), expected, atol=1e-5)


def test_two_classes_and_missing_types_get_zero():
    x, labels = _data()
    model = pattern_model.fit(x, np.where(labels > 1, patterns.DIAGONAL, patterns.VERTICAL), "MLP(32), alpha 0.1")
    p = model.probabilities(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-6)
    assert p[:, [patterns.HETEROGENEOUS, patterns.VERTICAL_DIAGONAL, patterns.BLOCK]].max() == 0


def test_single_sentences_are_never_block():
    """Block attention is defined for pairs: the probabilities of a single sentence's map
    give block 0 and still sum to 1 (the exact values: test_statistics' reference)."""
    inputs, labels = pattern_model.anchors()
    x = torch.from_numpy(inputs[labels == patterns.BLOCK])  # synthetic block maps: pairs
    pair = pattern_model.INPUT_NAMES.index("pair")
    assert (x[:, pair] == 1).all()
    as_pairs = pattern_model.default().probabilities(x)
    assert (as_pairs.argmax(-1) == patterns.BLOCK).float().mean() > 0.9
    x[:, pair] = 0
    as_single = pattern_model.default().probabilities(x)
    assert (as_single[:, patterns.BLOCK] == 0).all()
    np.testing.assert_allclose(as_single.sum(-1).numpy(), 1, atol=1e-6)


def test_margin_is_the_gap_between_the_two_likeliest_types():
    model = pattern_model.default()
    maps = synthetic_maps.generate(20, HELD_OUT_SEED)
    stored = synthetic_maps.features(maps)
    columns = [OBSERVED_COLUMNS.index(c) for c in (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)]
    labels = np.array([m.label for m in maps])
    # Midpoints between maps of different types: some of them borderline.
    order = np.argsort(labels, kind="stable")
    x = torch.from_numpy((stored[order][:, columns] + stored[order[::-1]][:, columns]) / 2)
    k = len(patterns.FEATURE_COLUMNS)
    features, look = x[:, :k], x[:, k:]
    code, margin = model.classify(features, look)
    x = pattern_model.inputs(features, look)
    p = np.sort(model.probabilities(x).numpy(), 1)
    np.testing.assert_allclose(margin.numpy(), p[:, -1] - p[:, -2], atol=1e-6)
    assert (margin >= 0).all() and (margin <= 1).all() and margin.std() > 0.01
    np.testing.assert_array_equal(code.numpy(), model.probabilities(x).argmax(-1).numpy())


def test_selection_keeps_anchors_out_of_held_out_parts(monkeypatch):
    """Anchors join every training part and are never predicted: the inner folds split the
    real maps only."""
    x, labels = _data(120)
    anchors = (x[:10] + 100, np.zeros(10, np.int64))
    seen: list[int] = []
    real_fit = pattern_model.fit

    def spy(x_, labels_, candidate, seed=0, extra=None):
        assert extra is anchors
        seen.append(len(labels_))
        return real_fit(x_, labels_, candidate, seed, extra)

    monkeypatch.setattr(pattern_model, "fit", spy)
    chosen, scores = pattern_model.select(x, labels, folds=3, extra=anchors)
    assert chosen in pattern_model.CANDIDATES and set(scores) == set(pattern_model.CANDIDATES)
    assert seen and all(n == 80 for n in seen)  # two thirds of 120, anchors added inside fit


def test_shipped_classifier_agrees_with_held_out_synthetic_maps():
    """The sanity check: synthetic maps of known type from a seed the anchors never used.
    The target is the agreement with people (docs/pattern_labels.md); this only guards
    against a classifier that reads clear maps wrongly (0.49 without anchors, 0.94 with)."""
    maps = synthetic_maps.generate(100, HELD_OUT_SEED)
    labels = np.array([m.label for m in maps])
    codes = synthetic_maps.features(maps)[:, OBSERVED_COLUMNS.index("pattern")].astype(int)
    assert (codes == labels).mean() >= 0.9
    for k in range(5):
        assert (codes[labels == k] == k).mean() >= 0.8, patterns.PATTERN_TYPES[k]


def test_reclassify_switches_between_the_classifier_and_the_rules(tmp_path, monkeypatch, capsys):
    db = tmp_path / "w.duckdb"
    maps = synthetic_maps.generate(10, 4)
    synthetic_maps.write_warehouse(db, maps)

    def stored():
        with duckdb.connect(str(db), read_only=True) as con:
            return con.execute(
                "SELECT pattern, pattern_margin FROM head_stats ORDER BY run_id, example_id, layer, head"
            ).fetchall()

    ingested = stored()
    code, out, err = run(monkeypatch, capsys, "patterns", "reclassify", "--classifier", "rules", "--db", str(db))
    assert code == 0 and "labelled by rules" in out, err
    rules = stored()
    np.testing.assert_array_equal([c for c, _ in rules], synthetic_maps.predicted(maps))
    assert rules != ingested
    code, out, err = run(monkeypatch, capsys, "patterns", "reclassify", "--db", str(db))
    assert code == 0 and "labelled by the shipped classifier" in out, err
    np.testing.assert_allclose(np.array(stored()), np.array(ingested), atol=1e-6)
    # Rows written before look features existed keep their types under the classifier.
    old = tmp_path / "old.duckdb"
    shutil.copy(db, old)
    with duckdb.connect(str(old)) as con:
        con.execute("UPDATE head_stats SET look_col_1 = NULL, pattern = 0 WHERE example_id % 2 = 0")
    code, _, err = run(monkeypatch, capsys, "patterns", "reclassify", "--db", str(old))
    assert code == 0, err
    with duckdb.connect(str(old), read_only=True) as con:
        kept = con.execute("SELECT DISTINCT pattern FROM head_stats WHERE look_col_1 IS NULL").fetchall()
    assert kept == [(0,)]
    code, _, err = run(monkeypatch, capsys, "patterns", "reclassify", "--model-id", "1", "--db", str(db))
    assert code == 2 and "applies to --classifier cnn only" in err
