"""Massive activations (Sun et al. 2024): the largest magnitudes of each layer's output.

For one example and one layer, take |h[p, d]| over the real tokens p and every hidden
dimension d of the layer's output hidden states (the embeddings are not a layer). The scan
keeps the ``top_k`` largest, with their dimension, position and token kind, and the median of
all of them (docs/metrics.md#massive-activations). Sun et al. call an entry massive when it
exceeds 100 and 1000 × that median; the threshold is applied by the query
(``sql/massive_activations.sql``), so the stored rows stay usable under other thresholds.

Everything is computed on the device, vectorised over the batch and in float32 whatever the
model's dtype. The top entries come from ``torch.topk`` over the flattened S × D magnitudes
with padding set to -inf; among equal magnitudes, which ranks first (and which is kept at
the last place) is up to ``topk`` and may differ between devices. The median is exact, as
``np.median`` gives it: ``torch.nanmedian`` over the magnitudes with padding set to NaN
returns the lower of the two middle values when their count is even, and the upper one is
the smallest value above it unless the lower one is repeated into the upper place; the
median is their mean. Both are selections, linear in the number of entries, unlike a sort
(or ``torch.nanquantile``, which sorts and refuses inputs over 2^24 entries).
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
    padding = (~real)[..., None].expand(batch, seq, width).reshape(batch, seq * width)
    k = min(top_k, seq * width)
    entries = real.sum(-1) * width  # (B,) real magnitudes per row
    # 0-based place of the upper middle value among a row's sorted real entries.
    upper_place = (entries // 2)[:, None]
    tops, flat, medians = [], [], []
    for h in hidden_states:
        if h.shape != (batch, seq, width):
            raise ValueError(f"hidden states of shape {tuple(h.shape)}, expected {(batch, seq, width)}")
        # abs() makes a new tensor, so the fills below leave the model's output alone.
        values = h.detach().float().abs().flatten(1).masked_fill_(padding, torch.nan)
        lower = values.nanmedian(dim=-1).values[:, None]
        # Entries ≤ the lower middle (NaN compares false) fill the places 0 … count - 1; the
        # upper middle is the lower one again if that covers its place, else the next value up.
        repeated = (values <= lower).sum(-1, keepdim=True) > upper_place
        above = torch.where(values > lower, values, torch.inf).amin(-1, keepdim=True)
        medians.append(((lower + torch.where(repeated, lower, above)) / 2)[:, 0])
        top, index = values.masked_fill_(padding, -torch.inf).topk(k, dim=-1)
        tops.append(top)
        flat.append(index)
    layers = len(hidden_states)
    shape = (batch, layers, k)
    # Collected layer by layer: (layer, B, …) → (B, layer, …), rows ordered by batch row first.
    top = torch.cat(tops).view(layers, batch, k).transpose(0, 1)
    index = torch.cat(flat).view(layers, batch, k).transpose(0, 1)
    median = torch.cat(medians).view(layers, batch).transpose(0, 1)[..., None].expand(shape)
    position = index // width
    kinds = token_kind_codes(cls, sep, punct).gather(1, position.reshape(batch, -1)).view(shape)
    row, layer, rank = torch.meshgrid(*(torch.arange(n, device=top.device) for n in shape), indexing="ij")
    keep = rank < entries[:, None, None]  # a row with fewer real entries than k keeps those
    return _columns(
        [t[keep].cpu().numpy() for t in (row, layer, rank + 1, top, index % width, position, kinds, median)]
    )


def _columns(values: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays in the order of :data:`COLUMNS` as the columns :func:`scan` returns."""
    columns = dict(zip(COLUMNS, values, strict=True))
    for name in ("magnitude", "median"):
        columns[name] = columns[name].astype(np.float32)
    for name in ("row", "layer", "rank", "dim", "position"):
        columns[name] = columns[name].astype(np.int64)
    columns["token_kind"] = np.array(TOKEN_KINDS, dtype=object)[columns["token_kind"].astype(np.int64)]
    return columns
