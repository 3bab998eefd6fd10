"""The per-cell reductions of a tile of attention maps, fused into single passes by
``torch.compile`` on large tiles.

Reading a map cell costs more than the arithmetic done on it: the entropy (a log per cell and a
sum), the largest weight, the counts of cells above the look features' levels (a comparison
and a sum per level) and context mixing's c_ij² (a quadratic form in the heads' weights per
cell) each walk a tile of batch × heads × rows × keys values, and their eager versions write
temporaries of the same size. Compiled, each becomes one loop over the tile that writes only
its per-row results: on long inputs several times faster (`bench/long.py`).

The eager functions are the definition and the fallback. The compiled ones are used on tiles
of at least :data:`COMPILE_MIN_CELLS` cells and :data:`COMPILE_MIN_KEYS` keys (shorter inputs
never pay the compilation, a few seconds once per process), unless ``ATTNWH_COMPILE=0`` is set or compiling fails (no C++
compiler on a CPU, no Triton on a GPU): then attnwh says so once on stderr and stays eager.
Integer counts are equal either way; float results agree within float32 rounding (a few
1e-7, relative), the order of the sums being the only difference.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch

# Tiles smaller than this (batch × heads × rows × keys), or of inputs shorter than
# COMPILE_MIN_KEYS, are reduced eagerly: compiling costs seconds once per process (about 6 s
# with a warm compiler cache, 20 s cold), which only inputs of thousands of tokens repay. At GLUE
# lengths a whole batch's layer is about 10⁶ cells; a batch of 512-token inputs gains less per
# batch than compiling costs in a run of ordinary size.
COMPILE_MIN_CELLS = 1 << 22
COMPILE_MIN_KEYS = 1024


def rows_eager(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of `a` (…, rows, keys): its entropy -Σ a ln a (nats) and its largest weight."""
    # a · ln max(a, tiny) is xlogy(a, a) (0 where a = 0) in vectorised operations: about three
    # times faster on a CPU than xlogy, whose kernel is scalar.
    return -(a * a.clamp_min(torch.finfo(a.dtype).tiny).log()).sum(-1), a.amax(-1)


def counts_eager(a: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Per row of `a` (B, H, rows, keys), how many cells are above each of `levels` (B, H, L):
    (B, H, rows, L) int32."""
    return torch.stack([_count_above(a, level[..., None, None]) for level in levels.unbind(-1)], dim=-1)


def squares_eager(a: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """c_ij² = Σ_h Σ_g a_h,ij K_j[h, g] a_g,ij for a tile `a` (B, H, rows, S) and the keys'
    Gram matrices `gram` (B, S, H, H): (B, rows, S)."""
    # Laid out key-major (B, j, H, i) so one batched product applies every K_j and the sum
    # over heads runs along contiguous rows.
    per_key = a.permute(0, 3, 1, 2).contiguous()
    return torch.matmul(gram, per_key).mul_(per_key).sum(-2).transpose(1, 2)


_COUNT_CHUNK = 255  # keys counted per uint8 partial sum (at most 255 cells above, no overflow)


def _count_above(a: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
    """Per row, how many cells of `a` are above `level` (int32). Summed as uint8 over chunks
    of keys, then as int32: summing the bool mask directly would first copy it to a wider
    integer type, several times slower on long inputs."""
    above = (a > level).view(torch.uint8)
    keys = above.shape[-1]
    whole = keys - keys % _COUNT_CHUNK  # the chunks, then the rest of the keys
    chunks = above[..., :whole].unflatten(-1, (-1, _COUNT_CHUNK)).sum(-1, dtype=torch.uint8)
    return chunks.sum(-1, dtype=torch.int32) + above[..., whole:].sum(-1, dtype=torch.int32)


def _counts_compiled(a: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    return (a[..., None] > levels[:, :, None, None, :]).sum(-2, dtype=torch.int32)


def _squares_compiled(a: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    by_head = gram.permute(0, 2, 3, 1)  # (B, H, G, S)
    return (a[:, :, None] * by_head[:, :, :, None, :] * a[:, None]).sum((1, 2))


class _Compiled:
    """A function compiled on first use, or None for good once compiling is off or failed."""

    def __init__(self, function: Callable[..., object]) -> None:
        self.function = function
        self.compiled: Callable[..., object] | None = None
        self.failed = False

    def __call__(self, *args: torch.Tensor) -> object | None:
        if self.failed or os.environ.get("ATTNWH_COMPILE", "1") == "0":
            return None
        try:
            if self.compiled is None:
                self.compiled = torch.compile(self.function, dynamic=True)
            return self.compiled(*args)
        except Exception as exc:  # no compiler, no Triton, an unsupported device: stay eager
            self.failed = True
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            print(f"attnwh: note: long-input reductions run uncompiled ({first})", file=sys.stderr)
            return None


_rows = _Compiled(rows_eager)
_counts = _Compiled(_counts_compiled)
_squares = _Compiled(_squares_compiled)


def _large(a: torch.Tensor) -> bool:
    return a.numel() >= COMPILE_MIN_CELLS and a.shape[-1] >= COMPILE_MIN_KEYS


def rows(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rows_eager`, compiled on large tiles."""
    out = _rows(a) if _large(a) else None
    return out if out is not None else rows_eager(a)  # type: ignore[return-value]


def counts(a: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """:func:`counts_eager`, compiled on large tiles."""
    out = _counts(a, levels) if _large(a) else None
    return out if out is not None else counts_eager(a, levels)  # type: ignore[return-value]


def squares(a: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """:func:`squares_eager`, compiled on large tiles."""
    out = _squares(a, gram) if _large(a) else None
    return out if out is not None else squares_eager(a, gram)  # type: ignore[return-value]
