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

:func:`check_coverage` runs one short input through a loaded model and fails loudly when
the observer did not see every layer, for every family, whatever the mechanism.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from attnwh.errors import ModelError
from attnwh.ingest.encoder import capture

# The self-attention modules that compute softmax(scores) @ values in their own forward.
INLINE_ATTENTION = frozenset({"DisentangledSelfAttention", "MPNetSelfAttention"})

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


class _Count:
    """Observer that counts the layers it sees, and the maps that are not one per query head
    with rows summing to 1 (weights going elsewhere than to the tokens, or heads missed)."""

    def __init__(self, num_heads: int | None) -> None:
        self.calls = 0
        self.num_heads = num_heads
        self.wrong: str | None = None

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        heads = probs.shape[1]
        if self.num_heads is not None and heads != self.num_heads and self.wrong is None:
            self.wrong = f"maps of {heads} heads where the model has {self.num_heads}"
        elif value.shape[1] != heads and self.wrong is None:
            self.wrong = f"values of {value.shape[1]} heads beside maps of {heads}"
        # Rounded to a half-precision dtype each weight is off by up to eps/2: allow a few eps.
        elif (
            not torch.allclose(probs.float().sum(-1), probs.new_ones(()).float(), atol=_row_sum_slack(probs.dtype))
            and self.wrong is None
        ):
            self.wrong = "attention rows that do not sum to 1"
        return probs


@torch.inference_mode()
def check_coverage(
    model: nn.Module, inputs: dict[str, torch.Tensor], num_layers: int, name: str, num_heads: int | None = None
) -> None:
    """Run `inputs` (one unpadded input) through `model` with a counting observer: every
    attention layer must be seen once, with one map per query head (`num_heads`, when given)
    whose rows sum to 1, or the model's attention is not reached, or not all of it, and would
    be measured wrongly."""
    counter = _Count(num_heads)
    with capture.observing(counter):
        model(**inputs)
    if counter.calls != num_layers:
        raise ModelError(
            f"attnwh's observer saw {counter.calls} of the {num_layers} attention layers of {name}: its attention "
            "module is not one attnwh can read (neither transformers' attention interface nor a known inline "
            "attention)"
        )
    if counter.wrong is not None:
        raise ModelError(f"attnwh's observer saw {counter.wrong} in {name}: its attention is not one attnwh can read")


def _row_sum_slack(dtype: torch.dtype) -> float:
    """How far a row of attention weights in `dtype` may sum from 1 and still be a softmax:
    1e-3, or four of the dtype's eps where that is larger (bfloat16: 0.031)."""
    return max(1e-3, 4 * torch.finfo(dtype).eps)
