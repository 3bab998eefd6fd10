"""StreamingLLM's experiment (Xiao et al. 2023, "Efficient Streaming Language Models with
Attention Sinks"): every key/value group of every attention layer keeps only the first S
tokens of a sequence (the attention sinks) and the last W up to each query, as a streaming
cache that evicts the rest would. S = 0 is plain window attention, which Xiao et al. found
to fail once the text is longer than the window; a few sinks recover it.

This is :func:`attnwh.ingest.measures.restriction.restricted_lm_loss` with one set, all the
groups, for each S of a list; the loss of the model as it is comes from the first call's
empty set. The losses are summed per bucket of query positions (:func:`position_edges`), so
the loss past the window can be read apart from the loss before it.
docs/whole-context.md#streaming-with-and-without-sinks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attnwh.ingest.measures import restriction as rs


@dataclass(frozen=True)
class StreamingLoss:
    """Summed next-token loss (nats) per setting, sequence and bucket of query positions:
    setting 0 is the model as it is, setting 1 + k every group restricted to `sinks[k]`
    sinks and the window; `tokens` predicted per sequence and bucket (the same under every
    setting); `edges` the buckets' bounds."""

    sinks: tuple[int, ...]
    edges: tuple[int, ...]
    nats: np.ndarray  # (1 + len(sinks), sequences, buckets) float64
    tokens: np.ndarray  # (sequences, buckets) int64


def every_group(config: Any) -> set[rs.Group]:
    """Every (layer, key/value group) of the layers that keep a key/value cache: what a
    streaming cache restricts."""
    _, groups = rs._layers_and_groups(config)
    return {(layer, group) for layer in rs.cache_layers(config) for group in range(groups)}


def position_edges(length: int, window: int) -> tuple[int, ...]:
    """Bucket edges over the query positions 0 .. length − 2 of a sequence of `length` tokens
    (query i predicts token i + 1): [0, W), [W, 2W), [2W, 4W), … doubling, the last bucket
    ending at length − 1. Queries below W see no more than the window under any S, so the
    first bucket is where the restriction changes nothing; the doubling buckets past it show
    how the loss goes as the evicted context grows."""
    if length < 2 or window < 1:
        raise ValueError(f"a sequence of {length} tokens and a window of {window} make no buckets")
    last = length - 1
    edges = [0]
    edge = window
    while edge < last:
        edges.append(edge)
        edge *= 2
    edges.append(last)
    return tuple(edges)


def streaming_loss(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    sinks: Sequence[int],
    window: int,
    edges: Sequence[int],
    sets_per_pass: int = 1,
    attention_memory: int | None = None,
    on_pass: Callable[[int, int], None] | None = None,
) -> StreamingLoss:
    """The summed next-token loss of each sequence of `batch` (input_ids, attention_mask) per
    bucket of `edges`, for the model as it is and with every key/value group restricted to
    each S of `sinks` and the last `window` tokens; a causal LM loaded with attnwh's attention
    function. 1 + len(sinks) forward passes (`sets_per_pass` ≥ 2 puts the model as it is
    beside the first S in one)."""
    if not sinks:
        raise ValueError("give at least one number of sinks")
    every: Collection[rs.Group] = every_group(model.config)
    nats: list[np.ndarray] = []
    tokens = None
    for n, s in enumerate(sinks):
        # The prefix cache saves nothing here (every set restricts layer 0) and would add an
        # unrestricted pass per S: off, the model as it is runs once, in the first call.
        sets: list[Collection[rs.Group]] = [set(), every] if n == 0 else [every]
        loss = rs.restricted_lm_loss(
            model,
            batch,
            sets,
            s,
            window,
            sets_per_pass,
            attention_memory,
            prefix_cache=False,
            on_pass=on_pass,
            positions=edges,
        )
        assert loss.bucket_nats is not None and loss.bucket_tokens is not None  # positions given
        nats.extend(loss.bucket_nats)
        tokens = loss.bucket_tokens
    assert tokens is not None
    return StreamingLoss(tuple(sinks), tuple(edges), np.stack(nats), tokens)
