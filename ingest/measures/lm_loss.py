"""A causal language model's next-token loss, per token, per sequence and per named span, and
the paired comparison of two configurations' losses over the same sequences.

Position t of a sequence of n tokens x_0 … x_{n-1} holds the cross-entropy of its token given
the tokens before it, ``ℓ_t = -log softmax(z_{t-1})[x_t]`` in nats, z_{t-1} being the model's
logits at position t − 1, for t = 1 … n − 1; position 0 (nothing before it) holds no loss. A
span [a, b) of a sequence sums the losses of its positions that have one: its nats
``Σ_{t ∈ [max(a, 1), b)} ℓ_t`` and its token count, so the mean over any union of sequences
and spans is formed from the stored sums (Σ nats / Σ tokens). The span ``all`` is [0, n).

A configuration is compared with the baseline on the same sequences by its mean loss per
token, ``L = Σ_i nats_i / Σ_i tokens_i``, and ``Δ = L_config − L_baseline`` (> 0: the loss
rose when the heads were disabled):

- the p-value is a paired permutation (sign-flip) test of Δ itself: under the null hypothesis
  that disabling changes nothing, each sequence's two losses are exchangeable, so each
  sequence's difference keeps or flips its sign with probability 1/2 (scipy's
  ``permutation_test``, ``permutation_type='samples'``; exact when 2^n is at most the number
  of resamples). It tests the statistic that is stored, weighted by tokens as Δ is, with no
  symmetry assumption (a Wilcoxon signed-rank test would test the median of per-sequence
  differences, each sequence weighing the same whatever its length), and it is the test the
  classifier sweep applies to its non-accuracy metrics;
- the interval is a paired percentile bootstrap over sequences of the same ratio, every
  configuration on the same resamples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from scipy import stats
from torch import nn

from attnwh.ingest.measures.significance import PairedResult

ALL = "all"  # the span of a whole sequence
TEST = "permutation"


def metric_name(span: str) -> str:
    """The `ablations.metric` of a span's loss: ``loss`` for a whole sequence, ``loss:<span>``
    for a named span."""
    return "loss" if span == ALL else f"loss:{span}"


def token_losses(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Next-token cross-entropy (rows, positions) in nats: position t holds the loss of token t
    given the tokens before it; position 0 and padding (right-padded rows) hold 0. An
    `AblationSweep` scorer."""
    logits = model(**inputs).logits
    ids, mask = inputs["input_ids"], inputs["attention_mask"].bool()
    nll = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")
    nll = nll.masked_fill(~mask[:, 1:], 0.0)
    return torch.cat([nll.new_zeros((nll.shape[0], 1)), nll], dim=1)


def token_losses_and_hits(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """:func:`token_losses` and each position's greedy hit side by side, (rows, 2, positions):
    ``[:, 0]`` the loss, ``[:, 1]`` 1.0 where the previous position's largest logit is the
    token (0 at position 0 and on padding). An `AblationSweep` scorer; the sweep flattens all
    but the rows, so a caller reshapes to (…, rows, 2, positions)."""
    logits = model(**inputs).logits
    ids, mask = inputs["input_ids"], inputs["attention_mask"].bool()
    nll = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")
    nll = nll.masked_fill(~mask[:, 1:], 0.0)
    hits = ((logits[:, :-1].argmax(-1) == ids[:, 1:]) & mask[:, 1:]).to(nll.dtype)
    first = nll.new_zeros((nll.shape[0], 1))
    return torch.stack([torch.cat([first, nll], dim=1), torch.cat([first, hits], dim=1)], dim=1)


def span_sums(
    losses: np.ndarray,
    n_tokens: Sequence[int],
    spans: Sequence[Mapping[str, tuple[int, int]]],
    hits: np.ndarray | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Per row of `losses` (…, rows, positions) as :func:`token_losses` gives them: the span
    names and, per span and row, the nats (…, spans, rows) in float64, the token counts
    (spans, rows) and the greedy hits (…, spans, rows; 0 without `hits`, shaped as `losses`).
    Every row has the span ``all``; `spans` (one mapping per row, possibly empty) adds named
    ones, clipped to the row's tokens."""
    names = [ALL, *sorted({name for row in spans for name in row} - {ALL})]
    rows = losses.shape[-2]
    nats = np.zeros((*losses.shape[:-2], len(names), rows), dtype=np.float64)
    correct = np.zeros((*losses.shape[:-2], len(names), rows), dtype=np.int64)
    tokens = np.zeros((len(names), rows), dtype=np.int64)
    for r in range(rows):
        n = int(n_tokens[r])
        bounds = {ALL: (0, n), **spans[r]}
        for s, name in enumerate(names):
            if name not in bounds:
                continue
            start, stop = max(bounds[name][0], 1), min(bounds[name][1], n)
            if stop > start:
                nats[..., s, r] = losses[..., r, start:stop].astype(np.float64).sum(-1)
                tokens[s, r] = stop - start
                if hits is not None:
                    correct[..., s, r] = np.rint(hits[..., r, start:stop]).astype(np.int64).sum(-1)
    return names, nats, tokens, correct


# The fewest sequences whose two-sided paired sign-flip test can reach p < 0.05: n pairs give
# at best p = 2 / 2^n (all differences of one sign), 0.0625 for 5 and 0.03125 for 6. With fewer,
# no result can be told from noise, and a percentile bootstrap of so few pairs gives intervals
# that exclude 0 beside p ≥ 0.5: callers say so instead of showing them.
MIN_TESTED_SEQUENCES = 6


def compare_losses(
    span: str,
    baseline: np.ndarray,
    configurations: np.ndarray,
    tokens: np.ndarray,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[PairedResult]:
    """One :class:`PairedResult` per configuration (rows of `configurations`, nats shaped
    (C, n) like `baseline` (n,)) on the metric of `span`, `tokens` (n,) being each
    sequence's token count in the span (the same under every configuration)."""
    baseline, tokens = np.asarray(baseline, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    total = tokens.sum()
    if total <= 0:
        raise ValueError(f"span {span!r} holds no token with a loss")
    n = len(tokens)
    rng = np.random.default_rng(seed)
    resamples = rng.integers(0, n, size=(n_resamples, n))
    boot_tokens = tokens[resamples].sum(1)
    tail = (1 - confidence) / 2 * 100
    base_value = float(baseline.sum() / total)
    results = []
    for other in np.asarray(configurations, dtype=np.float64):
        value = float(other.sum() / total)
        differences = other - baseline
        boot = differences[resamples].sum(1) / np.where(boot_tokens > 0, boot_tokens, np.nan)
        low, high = np.nanpercentile(boot, [tail, 100 - tail])
        results.append(
            PairedResult(
                metric_name(span),
                value,
                base_value,
                value - base_value,
                float(low),
                float(high),
                paired_permutation_p(other / total, baseline / total, n_resamples, seed),
                TEST,
            )
        )
    return results


def paired_permutation_p(x: np.ndarray, y: np.ndarray, n_resamples: int, seed: int) -> float:
    """Two-sided p-value of Σ (x − y) under sign flips of each pair (scipy's paired
    permutation test); 1 where every pair is equal, and for a single pair: its two sign
    flips give ±d, equally extreme, so p = 1 exactly (scipy refuses a sample of one)."""
    if np.array_equal(x, y) or len(x) < 2:
        return 1.0
    found = stats.permutation_test(
        (x, y),
        _summed_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(found.pvalue)


def _summed_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(x - y, axis=axis)
