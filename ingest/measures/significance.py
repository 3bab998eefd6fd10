"""Is an ablation's effect on the task score more than the noise of a small dev set?

Every configuration is compared with the baseline on the same examples (paired):

- accuracy: the exact McNemar test, i.e. a two-sided binomial test on the discordant
  examples (baseline right and ablated wrong, or the reverse) with p = 1/2;
- F1, MCC, Pearson, Spearman: a paired permutation test (approximate randomization): each
  example's two predictions are swapped between the systems with probability 1/2, and p is
  the share of permutations whose |delta| reaches the observed one, (k + 1) / (R + 1);
- the delta's confidence interval is a paired percentile bootstrap over examples; every
  configuration is scored on the same resamples;
- across a sweep, p-values are adjusted with Benjamini–Hochberg (false discovery rate).

Randomness is seeded, so a rerun stores the same intervals and p-values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from attnwh.ingest.measures.metrics import metric_rows


@dataclass(frozen=True)
class PairedResult:
    """One configuration against the baseline on one metric."""

    metric: str
    value: float
    baseline: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str  # "mcnemar-exact" or "permutation"


def mcnemar_exact(labels: np.ndarray, baseline: np.ndarray, other: np.ndarray) -> float:
    """Two-sided exact McNemar p-value of two classifiers' correctness on the same examples."""
    right_a, right_b = baseline == labels, other == labels
    only_a = int(np.sum(right_a & ~right_b))
    only_b = int(np.sum(~right_a & right_b))
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_b, only_a + only_b, 0.5).pvalue)


def permutation_p(metric: str, labels: np.ndarray, baseline: np.ndarray, other: np.ndarray, swaps: np.ndarray) -> float:
    """Paired permutation p-value of metric(other) - metric(baseline); `swaps` is a boolean
    (R, n) matrix saying which examples trade predictions in each permutation."""
    observed = float(metric_rows(metric, labels, other) - metric_rows(metric, labels, baseline))
    a = np.where(swaps, other, baseline)
    b = np.where(swaps, baseline, other)
    permuted = metric_rows(metric, labels, b) - metric_rows(metric, labels, a)
    # A small tolerance keeps permutations that tie the observed delta from being lost to rounding.
    extreme = np.sum(np.abs(permuted) >= abs(observed) - 1e-12)
    return float((extreme + 1) / (len(swaps) + 1))


def compare_to_baseline(
    metrics: tuple[str, ...],
    labels: np.ndarray,
    baseline: np.ndarray,
    configurations: np.ndarray,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[list[PairedResult]]:
    """Per configuration (rows of `configurations`, shaped (C, n) like `baseline` (n,)), one
    :class:`PairedResult` per metric."""
    labels, baseline = np.asarray(labels), np.asarray(baseline)
    n = len(labels)
    rng = np.random.default_rng(seed)
    resamples = rng.integers(0, n, size=(n_resamples, n))
    swaps = rng.random((n_resamples, n)) < 0.5
    boot_labels = labels[resamples]
    tail = (1 - confidence) / 2 * 100
    results: list[list[PairedResult]] = []
    base_scores = {m: float(metric_rows(m, labels, baseline)) for m in metrics}
    base_boot = {m: metric_rows(m, boot_labels, baseline[resamples]) for m in metrics}
    for other in np.asarray(configurations):
        row = []
        for m in metrics:
            value = float(metric_rows(m, labels, other))
            deltas = metric_rows(m, boot_labels, other[resamples]) - base_boot[m]
            low, high = np.percentile(deltas, [tail, 100 - tail])
            if m == "accuracy":
                p, test = mcnemar_exact(labels, baseline, other), "mcnemar-exact"
            else:
                p, test = permutation_p(m, labels, baseline, other, swaps), "permutation"
            row.append(PairedResult(m, value, base_scores[m], value - base_scores[m], float(low), float(high), p, test))
        results.append(row)
    return results


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (scipy's false_discovery_control); empty in, empty out."""
    p_values = np.asarray(p_values, dtype=np.float64)
    if p_values.size == 0:
        return p_values
    return stats.false_discovery_control(p_values, method="bh")
