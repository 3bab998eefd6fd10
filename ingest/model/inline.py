"""The observation point for encoders whose attention is computed inline, not through
transformers' AttentionInterface (DeBERTa-v2/v3, MPNet): there attnwh's registered
attention function is never called, so without this the observer would silently see
nothing.

One mechanism for every such module: while an attnwh observer is active, a torch function
mode is pushed for the duration of the module's forward (a forward pre-hook pushes it, a
forward hook that runs even on an exception pops it). Inside, the mode lets the softmax run
and keeps its result P (batch, heads, query, key); at the next matrix product whose first
operand is P (a view of it, or eval-mode dropout, which returns it), it hands P and the
values (the second operand as (batch, heads, key, head_dim)) to the observer and multiplies
what the observer returns instead. Nothing names a family's variables, only which module
classes compute attention inline. A softmax without its product (training-mode dropout
copies P) raises instead of going unobserved.

The check at load (`reading.py`) runs one short input through a loaded model and fails
loudly when the observer did not see every layer, for every family, whatever the mechanism.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from attnwh.ingest.model import capture
from attnwh.ingest.model.families import FAMILIES

# The self-attention modules that compute softmax(scores) @ values in their own forward (the
# families' records say which: `families.py`).
INLINE_ATTENTION = frozenset(f.inline for f in FAMILIES.values() if f.inline)

_SOFTMAX: frozenset[Callable[..., Any]] = frozenset({nn.functional.softmax, torch.softmax, torch.Tensor.softmax})
_PRODUCT: frozenset[Callable[..., Any]] = frozenset(
    {torch.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.bmm}
)


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() == b.numel() and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


class _Tap(TorchFunctionMode):
    """The mode pushed around one inline attention module's forward (see the module's docstring)."""

    def __init__(self, module: nn.Module, observer: capture.AttentionObserver) -> None:
        super().__init__()
        self.module = module
        self.observer = observer
        self.pending: torch.Tensor | None = None
        self.seen = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SOFTMAX:
            out = func(*args, **kwargs)
            if self.pending is not None:
                raise RuntimeError(f"{type(self.module).__name__}: a second softmax before the value product")
            self.pending = out
            return out
        if func in _PRODUCT and self.pending is not None and _same_storage(args[0], self.pending):
            probs, weights, values = self.pending, args[0], args[1]
            self.pending = None
            self.seen += 1
            batch, heads, _, keys = probs.shape
            observed = self.observer.observe(self.module, probs, values.reshape(batch, heads, keys, values.shape[-1]))
            if observed is not probs:
                weights = observed.reshape(weights.shape).to(weights.dtype)
            return func(weights, values, *args[2:], **kwargs)
        return func(*args, **kwargs)


def install(model: nn.Module) -> int:
    """Put the observation point into every inline attention module of `model`; returns how
    many. The hooks do nothing while no observer is active."""
    count = 0
    for module in model.modules():
        if type(module).__name__ not in INLINE_ATTENTION:
            continue
        state: dict[str, _Tap] = {}

        def push(mod: nn.Module, args: object, state: dict[str, _Tap] = state) -> None:
            observer = capture.active()
            if observer is not None:
                state["tap"] = tap = _Tap(mod, observer)
                tap.__enter__()

        def pop(mod: nn.Module, args: object, output: object, state: dict[str, _Tap] = state) -> None:
            tap = state.pop("tap", None)
            if tap is None:
                return
            tap.__exit__(None, None, None)
            if tap.pending is not None or tap.seen != 1:
                raise RuntimeError(
                    f"{type(mod).__name__}: its softmax and value product were not matched "
                    "(dropout in training mode copies the probabilities; observe in eval mode)"
                )

        module.register_forward_pre_hook(push)
        module.register_forward_hook(pop, always_call=True)
        count += 1
    return count
