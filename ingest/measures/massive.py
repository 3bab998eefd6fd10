"""Massive activations (Sun et al. 2024): the largest magnitudes of each layer's output.

For one example and one layer, take |h[p, d]| over the real tokens p and every hidden
dimension d of the layer's output hidden states (the embeddings are not a layer). The scan
keeps the ``top_k`` largest, with their dimension, position and token kind, and the median of
all of them (docs/metrics.md#massive-activations). Sun et al. call an entry massive when it
exceeds 100 and 1000 × that median; the threshold is applied by the query
(``sql/massive_activations.sql``), so the stored rows stay usable under other thresholds.

Everything is computed on the device, vectorised over the batch and in float32 whatever the
model's dtype. The top entries come from ``torch.topk`` over the flattened S × D magnitudes
with padding below every real one; among equal magnitudes, which ranks first (and which is
kept at the last place) is up to ``topk`` and may differ between devices. The median is
exact, as ``np.median`` gives it (the mean of the two middle values), found by a radix
selection (:func:`exact_medians`): linear like ``torch.nanmedian`` (which gives only the
lower middle value) and, on a CPU, about twice as fast as it with a pass for the upper one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

TOP_K = 8
TOKEN_KINDS = ("[CLS]", "[SEP]", "punctuation", "other")
COLUMNS = ("row", "layer", "rank", "magnitude", "dim", "position", "token_kind", "median")


def token_kind_codes(cls: torch.Tensor, sep: torch.Tensor, punct: torch.Tensor) -> torch.Tensor:
    """Index into :data:`TOKEN_KINDS` per position; [CLS] wins over [SEP] over punctuation
    (special tokens are never punctuation, so only a tokenizer whose [CLS] is its [SEP] meets
    the first rule)."""
    other = torch.full(cls.shape, len(TOKEN_KINDS) - 1, dtype=torch.long, device=cls.device)
    kinds = torch.where(punct.bool(), 2, other)
    kinds = torch.where(sep.bool(), 1, kinds)
    return torch.where(cls.bool(), 0, kinds)


def scan(
    hidden_states: Sequence[torch.Tensor],
    key_mask: torch.Tensor,
    cls: torch.Tensor,
    sep: torch.Tensor,
    punct: torch.Tensor,
    top_k: int = TOP_K,
) -> dict[str, np.ndarray]:
    """The ``top_k`` largest |h| of every layer output of every batch row, and the median |h|.

    `hidden_states`: one (B, S, D) tensor per layer output, the embeddings left out; masks
    (B, S) bool: real tokens, [CLS], [SEP] and punctuation. Returns the columns of
    :data:`COLUMNS`, of equal length, ordered by row, layer and rank: ``row`` is the batch
    row, ``rank`` counts from 1 (the largest), ``token_kind`` holds strings of
    :data:`TOKEN_KINDS`; ``top_k`` rows per (row, layer), fewer only where the example has
    fewer real entries than that, none for a row without real tokens."""
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if not hidden_states:
        return _columns([np.zeros(0, np.int64)] * 8)
    real = key_mask.bool()
    batch, seq = real.shape
    width = hidden_states[0].shape[-1]
    for h in hidden_states:
        if h.shape != (batch, seq, width):
            raise ValueError(f"hidden states of shape {tuple(h.shape)}, expected {(batch, seq, width)}")
    layers = len(hidden_states)
    k = min(top_k, seq * width)
    entries = real.sum(-1) * width  # (B,) real magnitudes per row
    # Several layers at once, as rows (layer, batch row): a handful of large operations instead
    # of the same small ones per layer, as many layers as keep the working copy under
    # _CHUNK_ENTRIES (long inputs of a large model go one layer at a time).
    per_chunk = max(1, _CHUNK_ENTRIES // (batch * seq * width))
    found = [
        _top_and_median(hidden_states[first : first + per_chunk], real, entries, k)
        for first in range(0, layers, per_chunk)
    ]
    median, top, index = (torch.cat(parts) for parts in zip(*found, strict=True))
    shape = (batch, layers, k)
    # Rows are (layer, B); the output is ordered by batch row first.
    top = top.view(layers, batch, k).transpose(0, 1)
    index = index.view(layers, batch, k).transpose(0, 1)
    median = median.view(layers, batch).transpose(0, 1)[..., None].expand(shape)
    position = index // width
    kinds = token_kind_codes(cls, sep, punct).gather(1, position.reshape(batch, -1)).view(shape)
    row, layer, rank = torch.meshgrid(*(torch.arange(n, device=top.device) for n in shape), indexing="ij")
    keep = rank < entries[:, None, None]  # a row with fewer real entries than k keeps those
    return _columns(
        [t[keep].cpu().numpy() for t in (row, layer, rank + 1, top, index % width, position, kinds, median)]
    )


# The most entries the scan stacks at once (64 MiB in float32), so it never holds much more
# than one layer's output beyond the model's own where one layer is that large.
_CHUNK_ENTRIES = 2**24


def _top_and_median(
    hidden_states: Sequence[torch.Tensor], real: torch.Tensor, entries: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The median, the top k magnitudes and their flat indices of each row (layer, batch row)
    of these layers' outputs: shapes (L·B,), (L·B, k), (L·B, k)."""
    layers = len(hidden_states)
    batch, seq = real.shape
    # The stacked copy leaves the model's outputs alone; its padding tokens are set to 0, at
    # or below every real magnitude (token by token: a fill through an entry-wise boolean
    # mask is several times slower on a CPU).
    values = torch.stack([h.detach() for h in hidden_states]).float().abs_()
    width = values.shape[-1]
    padded = ~real  # (B, S)
    values.view(layers, batch * seq, width).index_fill_(1, padded.flatten().nonzero().flatten(), 0.0)
    values = values.view(layers * batch, seq * width)
    padded, entries = padded.repeat(layers, 1), entries.repeat(layers)
    # Padding takes the first places of a row; the middle of the real entries is then at
    # these places of the whole row.
    lower_place = seq * width - entries + (entries - 1) // 2
    upper_place = seq * width - entries + entries // 2
    median = exact_medians(values, lower_place, upper_place)
    top, index = values.topk(k, dim=-1)
    # Padding (0 here) can reach a kept place only in a row with fewer than k magnitudes
    # above 0; then those rows are redone with padding below every real entry.
    short = (padded.gather(1, index // width) & (torch.arange(k, device=index.device) < entries[:, None])).any(-1)
    if short.any():
        redo = values[short].view(-1, seq, width)
        redo[padded[short]] = -1.0
        top[short], index[short] = redo.view(redo.shape[0], -1).topk(k, dim=-1)
    return median, top, index


# Radix buckets of exact_medians: the high bits of a float32 read as an integer, here its
# exponent and top four mantissa bits, so one bucket spans a sixteenth of an octave: few
# values share the middle's bucket, and the histogram stays small (4096 counts per row).
_SHIFT = 19
_BUCKETS = (2**31 - 1 >> _SHIFT) + 1


def exact_medians(values: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Per row of `values` (R, T), float32 and non-negative, the mean of its values at the
    0-based places `lower` and `upper` (R,) of the row in ascending order: the median as
    numpy defines it, for the two middle places (equal for an odd count). NaN counts as
    larger than every number.

    Exact and linear: non-negative floats order as their bit patterns read as integers, so
    one histogram of the high bits per row (a single bincount over the batch) gives the
    bucket holding each place and how many values lie below it; only the values in those
    buckets, a small share of the row, are then sorted."""
    rows, _ = values.shape
    device = values.device
    places = torch.stack([lower, upper], dim=-1).clamp(0, values.shape[1] - 1)  # (R, 2)
    bits = values.contiguous().view(torch.int32)
    offsets = torch.arange(0, rows * _BUCKETS, _BUCKETS, dtype=torch.int32, device=device)[:, None]
    keys = (bits >> _SHIFT).add_(offsets)  # bucket numbers, each row in its own range
    counts = torch.bincount(keys.flatten(), minlength=rows * _BUCKETS).view(rows, _BUCKETS).cumsum_(-1)
    bucket = torch.searchsorted(counts, places, right=True)  # (R, 2): counts[bucket] > place
    below = torch.where(bucket[:, :1] > 0, counts.gather(1, (bucket[:, :1] - 1).clamp_min(0)), 0)
    first, last = (bucket + offsets).int().unbind(-1)
    row, column = ((keys >= first[:, None]) & (keys <= last[:, None])).nonzero(as_tuple=True)
    # The candidates sorted by (row, value) in one sort of int64 keys; row r's begin at start[r].
    ordered = torch.sort((row << 32) | bits[row, column].long()).values
    start = torch.searchsorted(ordered, torch.arange(rows, device=device, dtype=torch.long) << 32)
    picked = (ordered[start[:, None] + places - below] & 0xFFFFFFFF).int().view(torch.float32)
    return picked.sum(-1) / 2


def _columns(values: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays in the order of :data:`COLUMNS` as the columns :func:`scan` returns."""
    columns = dict(zip(COLUMNS, values, strict=True))
    for name in ("magnitude", "median"):
        columns[name] = columns[name].astype(np.float32)
    for name in ("row", "layer", "rank", "dim", "position"):
        columns[name] = columns[name].astype(np.int64)
    columns["token_kind"] = np.array(TOKEN_KINDS, dtype=object)[columns["token_kind"].astype(np.int64)]
    return columns
