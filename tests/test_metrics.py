"""Task metrics against scikit-learn and scipy on fixed predictions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk

from attnwh.ingest.measures import metrics


@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 200)
    predictions = np.where(rng.random(200) < 0.7, labels, 1 - labels)
    assert metrics.accuracy(labels, predictions) == pytest.approx(sk.accuracy_score(labels, predictions), abs=1e-12)
    assert metrics.f1(labels, predictions) == pytest.approx(sk.f1_score(labels, predictions), abs=1e-12)
    assert metrics.mcc(labels, predictions) == pytest.approx(sk.matthews_corrcoef(labels, predictions), abs=1e-12)


def test_degenerate_predictions_match_sklearn():
    labels = np.array([0, 1, 1, 0, 1])
    constant = np.zeros(5, dtype=int)
    assert metrics.mcc(labels, constant) == sk.matthews_corrcoef(labels, constant) == 0.0
    assert metrics.f1(labels, constant) == pytest.approx(sk.f1_score(labels, constant, zero_division=0))


@pytest.mark.parametrize("seed", range(5))
def test_correlations_match_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    gold = np.round(rng.uniform(0, 5, 300) * 5) / 5  # STS-B-like scores with many ties
    predicted = np.round(gold + rng.normal(0, 1, 300), 1)
    assert metrics.pearson(gold, predicted) == pytest.approx(stats.pearsonr(gold, predicted)[0], abs=1e-12)
    assert metrics.spearman(gold, predicted) == pytest.approx(stats.spearmanr(gold, predicted)[0], abs=1e-12)


def test_score_picks_each_tasks_metrics():
    y = np.array([1, 0, 1, 1])
    assert set(metrics.score("mrpc", y, y)) == {"f1", "accuracy"}
    assert set(metrics.score("cola", y, y)) == {"mcc"}
    assert set(metrics.score("sst2", y, y)) == {"accuracy"}
    assert set(metrics.score("stsb", y.astype(float), y.astype(float), regression=True)) == {"pearson", "spearman"}
    assert set(metrics.score("sentiment", y, y)) == {"accuracy"}
