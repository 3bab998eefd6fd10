"""GLUE task metrics, computed with numpy (tests check them against scikit-learn and scipy).

Each task is scored with the metrics GLUE reports for it: accuracy for most; F1 of the
positive class and accuracy for MRPC and QQP; Matthews correlation for CoLA; Pearson and
Spearman correlation for STS-B.
"""

from __future__ import annotations

import numpy as np

TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",),
    "mrpc": ("f1", "accuracy"),
    "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
}
REGRESSION_METRICS = ("pearson", "spearman")


def metrics_for(task: str, regression: bool) -> tuple[str, ...]:
    """The metrics of `task`; other tasks get accuracy (or the correlations when regression)."""
    return TASK_METRICS.get(task, REGRESSION_METRICS if regression else ("accuracy",))


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels: np.ndarray, predictions: np.ndarray, positive: int = 1) -> float:
    """F1 of the positive class; 0 when there are no true or predicted positives."""
    labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
    tp = np.sum(labels & predictions)
    denominator = np.sum(labels) + np.sum(predictions)
    return float(2 * tp / denominator) if denominator else 0.0


def mcc(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Matthews correlation of a binary classification; 0 when a margin is empty."""
    y, p = np.asarray(labels) == 1, np.asarray(predictions) == 1
    tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
    fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return float(np.sum(dx * dy) / denominator) if denominator else 0.0


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank (as Spearman's rho needs)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    # Start of each run of equal values, and the average rank of the run.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    average = (starts + ends + 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(average, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(x), _ranks(y))


_FUNCTIONS = {"accuracy": accuracy, "f1": f1, "mcc": mcc, "pearson": pearson, "spearman": spearman}


def score(task: str, labels: np.ndarray, predictions: np.ndarray, regression: bool = False) -> dict[str, float]:
    """Every metric of `task` for gold `labels` (class ids, or scores for regression) and
    `predictions` of the same kind."""
    return {name: _FUNCTIONS[name](labels, predictions) for name in metrics_for(task, regression)}
