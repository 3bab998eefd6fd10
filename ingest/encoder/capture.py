"""attnwh's attention function, registered with transformers' AttentionInterface.

A model loaded with ``attn_implementation=ATTENTION_NAME`` computes every self-attention
layer through :func:`attnwh_attention`. It does what the eager path does (scores, mask,
softmax, weighted sum of values) and hands each layer's probabilities to the active
:class:`AttentionObserver`, which reduces them on the device and may replace them (head
disabling). The full maps are never returned to the model, so no more than one layer's maps
of one batch are alive at a time.

The mask function is registered under the same name: without it transformers passes
``attention_mask=None`` to an unknown implementation and padded batches silently differ
from eager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask

ATTENTION_NAME = "attnwh"


class AttentionObserver(Protocol):
    """Sees each layer's attention probabilities during a forward pass."""

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Called once per layer, in layer order, with probabilities (batch, heads, query, key)
        and the value vectors (batch, heads, key, head_dim); returns the probabilities the
        layer should use (the same tensor when nothing is changed)."""
        ...


class KeepMaps:
    """Observer that keeps every layer's probabilities of one forward pass, in call order
    (the order of calls, not `module.layer_idx`: ALBERT shares one module across layers).
    Holding them costs batch × layers × heads × seq² values on the device: use per batch."""

    def __init__(self) -> None:
        self.maps: list[torch.Tensor | None] = []

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.maps.append(probs.detach())
        return probs


_active: AttentionObserver | None = None


@contextlib.contextmanager
def observing(observer: AttentionObserver) -> Iterator[AttentionObserver]:
    """Route every attnwh attention call to `observer` inside the block, and always undo it."""
    global _active
    if _active is not None:
        raise RuntimeError("an attention observer is already active")
    _active = observer
    try:
        yield observer
    finally:
        _active = None


def active() -> AttentionObserver | None:
    """The observer of the current `observing` block, if any."""
    return _active


_mask: torch.Tensor | None = None


def observed_mask() -> torch.Tensor | None:
    """During an observer's `observe` called from attnwh's attention function: the additive
    mask of that layer (batch, 1, query, key), which holds what the layer may see beyond the
    padding (ModernBERT's sliding window on its local layers); None elsewhere."""
    return _mask


def attnwh_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Eager attention with an observation point between the softmax and the value sum."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = nn.functional.softmax(scores, dim=-1)
    if _active is not None:
        global _mask
        _mask = attention_mask
        try:
            probs = _active.observe(module, probs, value)
        finally:
            _mask = None
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value).transpose(1, 2).contiguous()
    return output, None


def register() -> str:
    """Register the attention and mask functions (idempotent); returns the implementation name."""
    AttentionInterface.register(ATTENTION_NAME, attnwh_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)
    return ATTENTION_NAME
