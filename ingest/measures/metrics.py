"""GLUE task metrics, computed with numpy (tests check them against scikit-learn and scipy).

Each task is scored with the metrics GLUE reports for it: accuracy for most; F1 of the
positive class and accuracy for MRPC and QQP; Matthews correlation for CoLA; Pearson and
Spearman correlation for STS-B.

Every metric is computed row-wise (:func:`metric_rows`): the ablation sweep's bootstrap and
permutation tests score thousands of resampled prediction vectors at once, and a single
score is the one-row case.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",),
    "mrpc": ("f1", "accuracy"),
    "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
}
REGRESSION_METRICS = ("pearson", "spearman")


def metrics_for(task: str, regression: bool) -> tuple[str, ...]:
    """The metrics of `task`; other tasks get accuracy (or the correlations when regression).
    The first is the task's main metric."""
    return TASK_METRICS.get(task, REGRESSION_METRICS if regression else ("accuracy",))


def _accuracy(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    return np.mean(y == p, axis=-1)


def _f1(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """F1 of class 1; 0 when there are no true or predicted positives."""
    y, p = y == 1, p == 1
    tp = np.sum(y & p, axis=-1)
    denominator = np.sum(y, axis=-1) + np.sum(p, axis=-1)
    return np.divide(2.0 * tp, denominator, out=np.zeros(tp.shape), where=denominator > 0)


def _mcc(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Matthews correlation of a binary classification; 0 when a margin is empty."""
    y, p = y == 1, p == 1
    tp, tn = np.sum(y & p, axis=-1, dtype=np.float64), np.sum(~y & ~p, axis=-1, dtype=np.float64)
    fp, fn = np.sum(~y & p, axis=-1, dtype=np.float64), np.sum(y & ~p, axis=-1, dtype=np.float64)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return np.divide(tp * tn - fp * fn, denominator, out=np.zeros(tp.shape), where=denominator > 0)


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x.astype(np.float64), y.astype(np.float64)
    dx, dy = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
    denominator = np.sqrt(np.sum(dx * dx, axis=-1) * np.sum(dy * dy, axis=-1))
    return np.divide(np.sum(dx * dy, axis=-1), denominator, out=np.zeros(denominator.shape), where=denominator > 0)


def _spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # Average ranks for ties, as Spearman's rho needs.
    return _pearson(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


_FUNCTIONS = {"accuracy": _accuracy, "f1": _f1, "mcc": _mcc, "pearson": _pearson, "spearman": _spearman}


def metric_rows(name: str, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """Metric `name` of each row: `labels` and `predictions` shaped (..., n) (broadcast
    against each other); returns shape (...)."""
    labels, predictions = np.broadcast_arrays(np.asarray(labels), np.asarray(predictions))
    return _FUNCTIONS[name](labels, predictions)


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    return float(metric_rows("accuracy", labels, predictions))


def f1(labels: np.ndarray, predictions: np.ndarray) -> float:
    """F1 of the positive class (1); 0 when there are no true or predicted positives."""
    return float(metric_rows("f1", labels, predictions))


def mcc(labels: np.ndarray, predictions: np.ndarray) -> float:
    return float(metric_rows("mcc", labels, predictions))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(metric_rows("pearson", x, y))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return float(metric_rows("spearman", x, y))


def score(task: str, labels: np.ndarray, predictions: np.ndarray, regression: bool = False) -> dict[str, float]:
    """Every metric of `task` for gold `labels` (class ids, or scores for regression) and
    `predictions` of the same kind."""
    return {name: float(metric_rows(name, labels, predictions)) for name in metrics_for(task, regression)}
