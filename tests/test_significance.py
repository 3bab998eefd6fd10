"""The ablation sweep's paired statistics against scipy: permutation p-values of F1, MCC,
Pearson and Spearman against an exact enumeration by scipy.stats.permutation_test, and the
delta's percentile bootstrap interval against scipy.stats.bootstrap over the same resamples,
with every metric recomputed outside attnwh (checked against scikit-learn or scipy)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk

from attnwh.ingest.measures.significance import compare_to_baseline


def _f1(y: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    tp = np.sum((y == 1) & (p == 1), axis=axis)
    wrong = np.sum(y != p, axis=axis)
    return np.divide(2.0 * tp, 2 * tp + wrong, out=np.zeros(np.shape(tp)), where=2 * tp + wrong > 0)


def _mcc(y: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    # Matthews' correlation is Pearson's r of the two 0/1 vectors (0 when one is constant).
    y, p = np.broadcast_arrays(y.astype(float), p.astype(float))
    dy, dp = y - y.mean(axis, keepdims=True), p - p.mean(axis, keepdims=True)
    denominator = np.sqrt(np.sum(dy * dy, axis) * np.sum(dp * dp, axis))
    return np.divide(np.sum(dy * dp, axis), denominator, out=np.zeros(denominator.shape), where=denominator > 0)


def _pearson(y: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    y, p = np.broadcast_arrays(y, p)
    return stats.pearsonr(y, p, axis=axis).statistic


def _spearman(y: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    y, p = np.broadcast_arrays(y, p)
    return stats.pearsonr(stats.rankdata(y, axis=axis), stats.rankdata(p, axis=axis), axis=axis).statistic


# The references, vectorised over resamples (thousands of calls to scikit-learn would take
# minutes); each is checked once against scikit-learn or scipy.stats.spearmanr below.
REFERENCE = {"accuracy": lambda y, p, axis=-1: np.mean(y == p, axis), "f1": _f1, "mcc": _mcc}
REFERENCE |= {"pearson": _pearson, "spearman": _spearman}
LIBRARY = {
    "accuracy": sk.accuracy_score,
    "f1": lambda y, p: sk.f1_score(y, p, zero_division=0.0),
    "mcc": sk.matthews_corrcoef,
    "pearson": lambda y, p: stats.pearsonr(y, p).statistic,
    "spearman": lambda y, p: stats.spearmanr(y, p).statistic,
}


def classification(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gold labels and two classifiers that err on different examples."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    baseline = np.where(rng.random(n) < 0.2, 1 - labels, labels)
    other = np.where(rng.random(n) < 0.4, 1 - labels, labels)
    return labels, baseline, other


def regression(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gold scores (with ties, as STS-B's halves have) and two noisy predictors."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 11, n) / 2
    return labels, labels + rng.normal(0, 1.5, n), labels + rng.normal(0, 3.0, n)


CASES = {"f1": classification, "mcc": classification, "pearson": regression, "spearman": regression}


@pytest.mark.parametrize("metric", list(CASES))
def test_permutation_p_value_matches_an_exact_enumeration(metric):
    """Twelve paired examples have 2**12 = 4,096 swap patterns: scipy enumerates them all
    (the exact p of |delta| under random swaps within pairs); the sweep's p from 20,000 random
    swap patterns must lie within four Monte-Carlo standard errors of it."""
    n, resamples = 12, 20_000
    labels, baseline, other = CASES[metric](n, seed=8)
    score = REFERENCE[metric]

    for predictions in (baseline, other):
        assert score(labels, predictions) == pytest.approx(LIBRARY[metric](labels, predictions), abs=1e-12)

    def abs_delta(a, b, axis=-1):  # the sweep's statistic: |metric(other) - metric(baseline)|, two-sided
        return np.abs(score(labels, b, axis) - score(labels, a, axis))

    exact = stats.permutation_test(
        (baseline, other), abs_delta, permutation_type="samples", alternative="greater", vectorized=True
    ).pvalue
    # A p-value in the middle of its range, where a one-sided test (half of it) or a wrong
    # statistic would show beyond the Monte-Carlo error.
    assert 0.05 < exact < 0.7, exact
    ((result,),) = compare_to_baseline((metric,), labels, baseline, other[None], n_resamples=resamples, seed=0)
    assert result.test == "permutation"
    assert result.delta == pytest.approx(score(labels, other) - score(labels, baseline), abs=1e-12)
    error = np.sqrt(exact * (1 - exact) / resamples)
    assert abs(result.p_value - exact) < 4 * error + 1 / resamples, (result.p_value, exact, error)


@pytest.mark.parametrize("metric", list(REFERENCE))
def test_bootstrap_interval_equals_scipy_paired_bootstrap_over_the_same_resamples(metric):
    """scipy.stats.bootstrap with paired=True draws its resamples of the examples as the sweep
    does (one rng.integers(0, n, (R, n)) from the same seed), so with the percentile method
    the bounds agree to rounding; the delta is recomputed on each resample by the references."""
    n, resamples, seed = 40, 999, 5
    labels, baseline, other = (regression if metric in ("pearson", "spearman") else classification)(n, seed=2)
    score = REFERENCE[metric]
    ((result,),) = compare_to_baseline((metric,), labels, baseline, other[None], n_resamples=resamples, seed=seed)
    for predictions in (baseline, other):
        assert score(labels, predictions) == pytest.approx(LIBRARY[metric](labels, predictions), abs=1e-12)
    reference = stats.bootstrap(
        (labels, baseline, other),
        lambda y, a, b, axis=-1: score(y, b, axis) - score(y, a, axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=resamples,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    assert result.ci_low < result.delta < result.ci_high
    assert (result.ci_low, result.ci_high) == pytest.approx((reference.low, reference.high), abs=1e-9)
