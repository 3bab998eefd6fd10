"""Head roles of a decoder (causal language model), read from its attention on probe inputs
(`attnwh.ingest.sources.probes`), per example, layer and query head (docs/metrics.md#head-roles):

- ``previous_token``: the mean over rows i ≥ 1 of A[i, i−1];
- ``induction`` (Olsson et al. 2022): on an induction probe (m random tokens, then the same
  m again), the mean over the repeat's rows r of A[r, r−m+1], the token that followed the
  earlier occurrence of r's token; ``duplicate``: the mean of A[r, r−m], that occurrence itself;
- ``retrieval`` (Wu et al. 2025): on a needle probe, at each answer step (the row before an
  answer token w, teacher-forced) the head retrieves when the key of its largest weight is a
  position of the needle's payload holding w that no earlier step retrieved; the score is
  the steps retrieved over the payload's length;
- ``sink``: the mean over rows of A[i, 0], the first token;
- ``local_mass``: the mean over rows of the weight on keys i−W+1..i (the last W tokens,
  the row's own included).

A row sees keys 0..i (on a sliding-window layer only its window): every weight it cannot see
is 0. Scores a probe does not define (induction and duplicate on a needle, retrieval on an
induction probe) are NaN (NULL in the warehouse).

:class:`RoleScores` reads a layer's maps whole or a tile of query rows at a time (a
`capture.TileObserver`), so long needle probes are read under the attention memory budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnwh.ingest.model import capture
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.sources.probes import ProbeSequence

ROLE_COLUMNS: tuple[str, ...] = ("previous_token", "induction", "duplicate", "retrieval", "sink", "local_mass")
DEFAULT_LOCAL_WINDOW = 64


@dataclass
class _Layer:
    sums: torch.Tensor  # (B, H, 5) float64: previous, induction, duplicate, sink, local sums over rows
    argmax: torch.Tensor  # (B, H, steps) the key of each answer row's largest weight (-1: not seen yet)


class RoleScores:
    """Attention observer that reduces each layer's maps to :data:`ROLE_COLUMNS` per example
    and head. Call :meth:`begin` with a batch of probes of one kind and one length (no
    padding) before the forward pass and :meth:`collect` after it."""

    # Working memory per map cell while a tile is reduced (bytes): the band of the local window
    # and its product with the tile.
    cell_bytes = 8

    def __init__(self, num_layers: int, local_window: int = DEFAULT_LOCAL_WINDOW) -> None:
        if local_window < 1:
            raise ValueError(f"local window {local_window} must be at least 1 token")
        self.num_layers, self.local_window = num_layers, local_window
        self.tiles_read = 0  # tiles seen since construction: more than layers × batches when reading in tiles
        self._probes: Sequence[ProbeSequence] = ()
        self._layer: _Layer | None = None
        self._layers: list[np.ndarray] = []
        self._n = 0  # the batch's probe length
        self._repeat: list[tuple[int, int]] = []
        self._half: list[int] = []
        self._answer_rows: list[range] = []

    def begin(self, probes: Sequence[ProbeSequence]) -> None:
        lengths = {len(p) for p in probes}
        if len(lengths) != 1 or len({p.kind for p in probes}) != 1:
            raise ValueError("a batch of role probes holds probes of one kind and one length")
        self._probes = probes
        self._layers = []
        n = lengths.pop()
        kind = probes[0].kind
        # Per example, the rows of the repeat and the length m of its halves (induction), and
        # the answer rows: the row before each answer token (needles).
        self._repeat = [p.segments["repeat"] if kind == "induction" else (0, 0) for p in probes]
        self._half = [p.segments["repeat"][0] - p.segments["first"][0] if kind == "induction" else 0 for p in probes]
        self._answer_rows = [
            range(p.segments["answer"][0] - 1, p.segments["answer"][1] - 1) if kind == "needle" else range(0)
            for p in probes
        ]
        self._n = n

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Whole maps: the same as one tile holding every row."""
        self.begin_layer(module, value, probs.shape[-2])
        self.observe_tile(module, capture.Tile(0, 0, probs), value)
        self.end_layer(module, capture.whole_tiles(probs))
        return probs

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None:
        if length != self._n:
            raise RuntimeError("call RoleScores.begin with the batch's probes before the forward pass")
        batch, heads = value.shape[:2]
        steps = max((len(r) for r in self._answer_rows), default=0)
        self._layer = _Layer(
            sums=torch.zeros((batch, heads, 5), dtype=torch.float64, device=value.device),
            argmax=torch.full((batch, heads, steps), -1, dtype=torch.long, device=value.device),
        )

    def observe_tile(self, module: nn.Module, tile: capture.Tile, value: torch.Tensor) -> torch.Tensor | None:
        layer = self._layer
        if layer is None:
            raise RuntimeError("call begin_layer before observe_tile")
        self.tiles_read += 1
        a = tile.probs.float()
        device = a.device
        count, width = a.shape[-2:]
        rows = torch.arange(tile.start, tile.start + count, device=device)
        keys = torch.arange(tile.key_start, tile.key_start + width, device=device)

        def at(offset: torch.Tensor | int) -> torch.Tensor:
            """A[i, i + offset] per row (0 where that key is outside the tile: unseen)."""
            column = rows + offset - tile.key_start
            inside = (column >= 0) & (column < width)
            picked = a.gather(-1, column.clamp(0, width - 1).expand(*a.shape[:2], count)[..., None])[..., 0]
            return picked * inside

        sums = layer.sums
        sums[..., 0] += (at(-1) * (rows >= 1)).double().sum(-1)
        if tile.key_start == 0:
            sums[..., 3] += a[..., 0].double().sum(-1)
        band = (keys[None] <= rows[:, None]) & (keys[None] > rows[:, None] - self.local_window)
        sums[..., 4] += (a * band).sum(-1).double().sum(-1)
        offsets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # per half length m: A[i, i-m+1], A[i, i-m]
        for b, ((lo, hi), m) in enumerate(zip(self._repeat, self._half)):
            if hi > lo:
                if m not in offsets:
                    offsets[m] = (at(1 - m).double(), at(-m).double())
                following, same = offsets[m]
                in_repeat = ((rows >= lo) & (rows < hi)).double()
                sums[b, :, 1] += (following[b] * in_repeat).sum(-1)
                sums[b, :, 2] += (same[b] * in_repeat).sum(-1)
        for b, answer in enumerate(self._answer_rows):
            lo, hi = max(answer.start, tile.start), min(answer.stop, tile.start + count)
            if hi > lo:
                local = a[b, :, lo - tile.start : hi - tile.start]
                layer.argmax[b, :, lo - answer.start : hi - answer.start] = local.argmax(-1) + tile.key_start
        return None

    def end_layer(self, module: nn.Module, tiles: capture.LayerTiles) -> None:
        layer = self._layer
        if layer is None:
            raise RuntimeError("call begin_layer before end_layer")
        self._layer = None
        sums = layer.sums.cpu().numpy()
        argmax = layer.argmax.cpu().numpy()
        batch, heads = sums.shape[:2]
        out = np.full((batch, heads, len(ROLE_COLUMNS)), np.nan)
        n = self._n
        out[..., 0] = sums[..., 0] / max(n - 1, 1) if n > 1 else np.nan
        out[..., 4] = sums[..., 3] / n
        out[..., 5] = sums[..., 4] / n
        for b, probe in enumerate(self._probes):
            if probe.kind == "induction":
                lo, hi = self._repeat[b]
                out[b, :, 1] = sums[b, :, 1] / (hi - lo)
                out[b, :, 2] = sums[b, :, 2] / (hi - lo)
            elif probe.kind == "needle":
                out[b, :, 3] = [retrieval(probe, argmax[b, h]) for h in range(heads)]
        self._layers.append(out)

    def collect(self) -> np.ndarray:
        """The batch's scores as an array (batch, layer, head, len(ROLE_COLUMNS)), float64."""
        if len(self._layers) != self.num_layers:
            raise RuntimeError(f"saw {len(self._layers)} attention layers, expected {self.num_layers}")
        out = np.stack(self._layers, axis=1)
        self._layers = []
        return out


def retrieval(probe: ProbeSequence, argmax: np.ndarray) -> float:
    """Wu et al. (2025)'s retrieval score of one head on one needle probe, from the key of its
    largest weight at each answer step (`argmax`, in answer order): the share of the payload's
    tokens it retrieved, each payload position counted once."""
    ids = probe.token_ids
    needle = probe.span("needle")
    retrieved: set[int] = set()
    for step, position in enumerate(probe.span("answer")):
        key = int(argmax[step])
        if key in needle and key not in retrieved and ids[key] == ids[position]:
            retrieved.add(key)
    return len(retrieved) / len(needle)


@dataclass(frozen=True)
class RoleResult:
    """Scores of every probe (probes, layer, head, len(ROLE_COLUMNS)) and what reading them took."""

    probes: list[ProbeSequence]
    scores: np.ndarray
    tiles_read: int
    seconds: float


@torch.inference_mode()
def measure_roles(
    encoder: LoadedModel,
    probes: Sequence[ProbeSequence],
    local_window: int = DEFAULT_LOCAL_WINDOW,
    attention_memory: int | None = None,
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
) -> RoleResult:
    """Run a decoder over `probes` and score every head (:class:`RoleScores`): consecutive
    probes of one kind and length share a batch of at most `batch_size`, fewer where the
    attention memory budget (`attention_memory` bytes; default: sized from the device) holds
    fewer; layers whose maps would take more than the budget are read in tiles."""
    started = time.perf_counter()
    observer = RoleScores(len(encoder.attention_layers), local_window)
    budget = attention_memory or capture.default_budget(encoder.device)
    scores: list[np.ndarray] = []
    groups: list[list[ProbeSequence]] = []
    for probe in probes:
        fit = capture.batch_rows(budget, encoder.num_heads, len(probe), observer, tiles=True)
        last = groups[-1] if groups else None
        if last and len(last) < min(batch_size, fit) and (last[0].kind, len(last[0])) == (probe.kind, len(probe)):
            last.append(probe)
        else:
            groups.append([probe])
    for group in groups:
        ids = torch.tensor([p.token_ids for p in group], dtype=torch.long, device=encoder.device)
        observer.begin(group)
        with capture.attention_memory(budget), capture.observing(observer):
            encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids))
        scores.append(observer.collect())
        if on_batch:
            on_batch(len(group))
    return RoleResult(list(probes), np.concatenate(scores), observer.tiles_read, time.perf_counter() - started)
