"""Per-head attention statistics, reduced on the device while the model runs.

For one example, A is a head's attention matrix cropped to the real tokens (rows are
queries, [CLS] and [SEP] rows included; n rows, each summing to 1). Every statistic is a
mean over the n rows of a per-row quantity (docs/metrics.md#head-statistics):

- ``to_cls``: A[i, cls]; ``to_sep``: the sum of A[i, j] over *all* [SEP] positions (Clark
  et al.; Kovaleva et al. take the larger of the two [SEP]s instead); ``to_punct``: the sum
  over tokens made only of punctuation;
- ``to_self``, ``to_prev``, ``to_next``: A[i, i], A[i, i-1], A[i, i+1] (0 where the
  neighbour does not exist);
- ``entropy``: -sum_j A[i, j] ln A[i, j], in nats; ``max_weight``: max_j A[i, j];
- ``norm_to_cls``, ``norm_to_sep``, ``norm_to_punct``: the same shares of the head's output
  rather than of its weights (Kobayashi et al.): A[i, j] is scaled by ||f_h(x_j)||, where
  f_h(x) = (x W_V^h + b_V^h) W_O^h is the head's slice of the output projection (output bias
  excluded), and renormalised per row;
- ``to_learned_sink``: 1 - sum_j A[i, j], the share a learned sink logit takes of the row
  (gpt-oss and others: docs/metrics.md#learned-sinks; about 0 elsewhere, stored as NULL).

Padding keys get probability exactly 0 from the mask, so sums over all keys equal sums over
real keys; padding query rows are excluded by weighting each row with 1/n or 0.

After these statistics the observer appends the pattern features, the look features, the
pattern type's code and its margin (:data:`patterns.PATTERN_COLUMNS`, see `patterns.py`),
given by the default classifier (`pattern_model.py`) or by the rules with set thresholds,
and keeps 32 × 32 thumbnails of the maps of the batch rows it is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnwh.ingest.measures import fused, pattern_model, patterns
from attnwh.ingest.measures.mixing import ContextMixing, LayerMixing
from attnwh.ingest.model import capture

STAT_COLUMNS: tuple[str, ...] = (
    "to_cls",
    "to_sep",
    "to_punct",
    "to_self",
    "to_prev",
    "to_next",
    "entropy",
    "max_weight",
    "norm_to_cls",
    "norm_to_sep",
    "norm_to_punct",
    "to_learned_sink",
)
# Everything the observer returns per head: the statistics, then the pattern features and type.
OBSERVED_COLUMNS: tuple[str, ...] = (*STAT_COLUMNS, *patterns.PATTERN_COLUMNS)


def value_norm_grams(output_projections: Mapping[nn.Module, nn.Linear], num_heads: int) -> dict[int, torch.Tensor]:
    """Per attention module, the (heads, d, d) Gram matrices W_O^h W_O^h^T of its output
    projection, so that ||v W_O^h|| = sqrt(v G_h v^T) without materialising head outputs
    of model width."""
    grams: dict[int, torch.Tensor] = {}
    for module, dense in output_projections.items():
        weight = dense.weight.detach().float()  # (hidden, heads * d): y = x @ weight.T
        per_head = weight.view(weight.shape[0], num_heads, -1).permute(1, 0, 2)  # (H, hidden, d)
        grams[id(module)] = per_head.transpose(1, 2) @ per_head  # (H, d, d)
    return grams


@dataclass
class _Layer:
    """What :class:`HeadStatistics` accumulates over the tiles of one layer."""

    right: torch.Tensor  # (B, H, S, K): what a tile is multiplied by (see begin_layer)
    split: list[int]  # the widths of its parts
    stats: torch.Tensor  # (B, H, len(STAT_COLUMNS)) means over rows so far, float64
    sink: bool  # the layer adds a learned sink logit: to_learned_sink is measured (else NaN)
    features: patterns.MapFeatures
    mixing: LayerMixing | None
    thumbs: list[torch.Tensor]  # per thumbnail row, (H, size, size) pooled so far
    maps: list[list[torch.Tensor]]  # per kept row, its (H, rows, n) pieces so far


@dataclass(frozen=True)
class _Batch:
    """What :meth:`HeadStatistics.begin` derives from one batch's token masks."""

    masks: patterns.PatternMasks
    row_weight: torch.Tensor  # (B, S): 1/n on the n real rows, 0 on padding
    columns: torch.Tensor  # (B, 1, S, 4): [CLS], [SEP] and punctuation columns, and ones
    next_ok: torch.Tensor  # (B, S): row i has a real right neighbour (0 on the last position)


def right_product(tile: capture.Tile, a: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """a @ right[keys] for a tile's weights `a` (B, H, rows, keys) and `right` (B, H, S, K)
    over every key, one product per block of rows over the keys its rows see (`Tile.blocks`):
    a product's last bits can depend on how many rows it takes, so a row's sums, and the
    attention output (the next layer's input), are the same in tiles of any height. On a
    sliding-window layer the keys no row of a block sees are not multiplied at all."""
    parts = []
    for rows, keys, seen in tile.blocks(right.shape[2]):
        block = a[..., rows, keys]
        # A window's (or causal) block copied out: its rows start at other offsets in tiles of
        # other widths.
        narrowed = tile.window is not None or tile.causal
        parts.append((block.contiguous() if narrowed else block) @ right[:, :, seen])
    return torch.cat(parts, -2)


def row_entropy(tile: capture.Tile, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`fused.rows` of a tile: per block of rows on a sliding-window or causal layer, for the
    same reason as :func:`right_product`."""
    if tile.window is None and not tile.causal:
        return fused.rows(a)
    total = tile.key_start + a.shape[-1]  # the tile's keys reach its last rows' windows
    parts = [fused.rows(a[..., rows, keys]) for rows, keys, _ in tile.blocks(total)]
    return torch.cat([p[0] for p in parts], -1), torch.cat([p[1] for p in parts], -1)


class HeadStatistics:
    """Attention observer that reduces each layer's maps to :data:`OBSERVED_COLUMNS`, whole
    or a tile of query rows at a time (a `capture.TileObserver`): every measure is a mean or
    a maximum over rows, accumulated per tile, and the look features' second pass walks the
    tiles again (`patterns.MapFeatures`).

    Call :meth:`begin` with the batch's token masks before the forward pass and
    :meth:`collect` after it.
    """

    def __init__(
        self,
        grams: dict[int, torch.Tensor],
        num_layers: int,
        classifier: pattern_model.PatternModel | patterns.Thresholds | None = None,
        mixing: ContextMixing | None = None,
        map_tokens: int = patterns.MAP_MAX_TOKENS,
    ) -> None:
        """`classifier`: what gives the pattern types, the shipped classifier by default
        (:func:`pattern_model.default`) or the rules with these thresholds; thumbnail rows of
        at most `map_tokens` real tokens also keep their whole maps."""
        self._grams = grams
        self.map_tokens = map_tokens
        self.mixing = mixing
        self._mixing_heads: list[torch.Tensor] = []
        self._mixing_layers: list[torch.Tensor] = []
        self.classifier = pattern_model.default() if classifier is None else classifier
        self._thumb_rows: list[int] = []
        self._thumb_lengths: list[int] = []
        self._thumbs: list[torch.Tensor] = []
        self._map_rows: list[tuple[int, int]] = []  # (row, length) of thumbnail rows short enough to keep whole
        self._maps: list[list[torch.Tensor]] = []  # per layer, one (H, n, n) map per such row
        self._num_layers = num_layers
        self._layers: list[torch.Tensor] = []
        self._batch: _Batch | None = None  # set by `begin`
        self._layer: _Layer | None = None  # set by `begin_layer`
        self._pooling: dict[int, torch.Tensor] = {}  # thumbnail pooling matrices by length

    def begin(
        self,
        key_mask: torch.Tensor,
        cls: torch.Tensor,
        sep: torch.Tensor,
        punct: torch.Tensor,
        thumbnail_rows: list[int] | tuple[int, ...] = (),
    ) -> None:
        """Masks of shape (batch, seq): real tokens, [CLS], [SEP] and punctuation positions;
        `thumbnail_rows`: the batch rows whose maps to keep as thumbnails."""
        self._thumb_rows = [int(r) for r in thumbnail_rows]
        lengths = key_mask.sum(-1)
        self._thumb_lengths = [int(lengths[r]) for r in self._thumb_rows]
        self._thumbs = []
        self._map_rows = [(r, n) for r, n in zip(self._thumb_rows, self._thumb_lengths) if n <= self.map_tokens]
        self._maps = []
        self._pooling = {n: patterns.pooling_matrix(n, device=key_mask.device) for n in set(self._thumb_lengths)}
        real = key_mask.float()
        self._batch = _Batch(
            masks=patterns.PatternMasks(key_mask, cls, sep, punct),
            row_weight=real / real.sum(-1, keepdim=True),  # mean over the n real rows
            columns=torch.stack([cls, sep, punct, torch.ones_like(cls)], dim=-1).float()[:, None],
            next_ok=nn.functional.pad(real[:, 1:], (0, 1)),  # row i has a real right neighbour
        )
        self._layers = []
        self._mixing_heads, self._mixing_layers = [], []

    # Working memory per map cell while a tile is reduced (bytes): the entropy's and the
    # comparisons' temporaries, and context mixing's key-major copy and products.
    cell_bytes = 16

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Whole maps: the same as one tile holding every row."""
        self.begin_layer(module, value, probs.shape[-2])
        self.observe_tile(module, capture.Tile(0, 0, probs), value)
        self.end_layer(module, capture.whole_tiles(probs))
        return probs

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None:
        batch = self._batch
        if batch is None:
            raise RuntimeError("call HeadStatistics.begin before the forward pass")
        v = value.float()
        heads = v.shape[1]
        # ||f_h(x_j)|| per key, from the Gram matrices: no tensor of model width per head. A
        # layer whose heads are gated before W_O has none (`reading.py`): its norm shares are NaN.
        gram = self._grams.get(id(module))
        if gram is None:
            norms = v.new_full(v.shape[:3], float("nan"))
        else:
            norms = torch.einsum("bhsd,hde,bhse->bhs", v, gram, v).clamp_min(0).sqrt()
        columns = batch.columns.expand(-1, heads, -1, -1)
        mixing = (
            self.mixing.layer(module, value, batch.row_weight, batch.columns, batch.next_ok)
            if self.mixing is not None
            else None
        )
        # Everything a tile is multiplied by on the right, side by side, so that one product
        # reads the tile once: per key the [CLS], [SEP] and punctuation columns; the same and
        # ones scaled by the norms (numerators and the row sum that renormalises them); each
        # segment's ordinary keys (pattern features); context mixing's scaled columns; and the
        # values, whose product is the tile's rows of the attention output.
        segments = batch.masks.segment_columns[:, None].expand(-1, heads, -1, -1)
        # The row sums (ones) only where a learned sink can take a share of them.
        sink = capture.learned_sink()
        parts = [columns if sink else columns[..., :3], norms[..., None] * columns, segments]
        if mixing is not None:
            parts.append(mixing.scaled_columns)
        parts.append(v)
        width = [p.shape[-1] for p in parts]
        self._layer = _Layer(
            right=torch.cat(parts, dim=-1),
            split=width,
            stats=v.new_zeros((v.shape[0], heads, len(STAT_COLUMNS)), dtype=torch.float64),
            sink=sink,
            features=patterns.MapFeatures(batch.masks, heads),
            mixing=mixing,
            thumbs=[v.new_zeros((heads, patterns.THUMBNAIL_SIZE, patterns.THUMBNAIL_SIZE)) for _ in self._thumb_rows],
            maps=[[] for _ in self._map_rows],
        )

    def observe_tile(self, module: nn.Module, tile: capture.Tile, value: torch.Tensor) -> torch.Tensor | None:
        """Reduce one tile; returns its rows of P·V (computed in the same product as the
        shares) for a float32 model, None otherwise."""
        batch, layer = self._batch, self._layer
        if batch is None or layer is None:
            raise RuntimeError("call begin_layer before observe_tile")
        a = tile.probs.float()
        start, first, rows = tile.start, tile.key_start, tile.rows
        count, width = a.shape[-2:]
        diagonals = patterns.row_diagonals(a, start - first)
        products = right_product(tile, a, layer.right).split(layer.split, dim=-1)
        targets, scaled, by_segment, output = products[0], products[1], products[2], products[-1]
        norm_shares = scaled[..., :3] / scaled[..., 3:].clamp_min(torch.finfo(torch.float32).tiny)
        entropy, row_max = row_entropy(tile, a)
        next_ok = batch.next_ok[:, None, rows]
        per_row = torch.stack(
            [
                *targets[..., :3].unbind(-1),
                diagonals[0],
                diagonals[1],
                diagonals[2] * next_ok,
                entropy,
                row_max,
                *norm_shares.unbind(-1),
                # The share of a learned sink: what the row's weights over the tokens leave of 1.
                *([1 - targets[..., 3]] if layer.sink else []),
            ],
            dim=-1,
        )  # (B, H, rows, K)
        # Means over rows accumulate in float64, so that tiles of any height sum the same
        # per-row values to the same float32 result (the rows' count reaches thousands).
        measured = layer.stats if layer.sink else layer.stats[..., : len(STAT_COLUMNS) - 1]
        measured += torch.einsum("bhsk,bs->bhk", per_row.double(), batch.row_weight[:, rows].double())
        layer.features.add(tile, a, diagonals, row_max, by_segment)
        if layer.mixing is not None:
            layer.mixing.add(tile, a, diagonals, (products[3], output))
        for thumb, row, n in zip(layer.thumbs, self._thumb_rows, self._thumb_lengths):
            if start < n and first < n:
                pool = self._pooling[n]
                stop, last = min(n, start + count), min(n, first + width)
                thumb += pool[:, start:stop] @ (a[row, :, : stop - start, : last - first] @ pool[:, first:last].t())
        for kept, (row, n) in zip(layer.maps, self._map_rows):
            if start < n:
                piece = a.new_zeros((a.shape[1], min(n, start + count) - start, n))
                last = min(n, first + width)
                if first < last:
                    piece[..., first:last] = a[row, :, : piece.shape[1], : last - first]
                kept.append(piece.cpu())
        return output if value.dtype == torch.float32 else None

    def end_layer(self, module: nn.Module, tiles: capture.LayerTiles) -> None:
        layer = self._layer
        if layer is None:
            raise RuntimeError("call begin_layer before end_layer")
        self._layer = None
        if not layer.sink:
            layer.stats[..., STAT_COLUMNS.index("to_learned_sink")] = float("nan")
        features, look = layer.features.finish(tiles)
        code, margin = pattern_model.assign(self.classifier, features, look)
        self._layers.append(
            torch.cat([layer.stats.float(), features, look, code[..., None].float(), margin[..., None]], dim=-1)
        )
        if layer.mixing is not None:
            self._mixing_heads.append(layer.mixing.per_head.float())
            self._mixing_layers.append(layer.mixing.per_layer.float())
        if self._thumb_rows:
            self._thumbs.append(torch.stack(layer.thumbs).flatten(2))
        if self._map_rows:
            self._maps.append([torch.cat(pieces, dim=1) for pieces in layer.maps])

    def collect(self) -> np.ndarray:
        """The batch's statistics as an array (batch, layer, head, len(OBSERVED_COLUMNS)) in float32."""
        if len(self._layers) != self._num_layers:
            raise RuntimeError(f"saw {len(self._layers)} attention layers, expected {self._num_layers}")
        out = torch.stack(self._layers, dim=1).cpu().numpy()
        self._layers = []
        return out

    def collect_mixing(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The batch's context mixing (see `mixing.py`): per head (batch, layer, head,
        len(HEAD_COLUMNS)) and per layer (batch, layer, len(LAYER_COLUMNS)); None without it."""
        if self.mixing is None:
            return None
        heads = torch.stack(self._mixing_heads, dim=1).cpu().numpy()
        layers = torch.stack(self._mixing_layers, dim=1).cpu().numpy()
        self._mixing_heads, self._mixing_layers = [], []
        return heads, layers

    def collect_thumbnails(self) -> tuple[list[int], list[int], np.ndarray]:
        """(rows, lengths, thumbnails (rows, layer, head, size²)) of the last batch."""
        if not self._thumb_rows:
            return [], [], np.zeros((0, self._num_layers, 0, patterns.THUMBNAIL_SIZE**2), np.float32)
        out = torch.stack(self._thumbs, dim=1).cpu().numpy()
        self._thumbs = []
        return self._thumb_rows, self._thumb_lengths, out

    @property
    def map_rows(self) -> list[int]:
        """The batch rows (set by `begin`) whose whole maps are kept: the thumbnail rows with
        at most `map_tokens` real tokens."""
        return [r for r, _ in self._map_rows]

    def collect_maps(self) -> tuple[list[int], list[np.ndarray]]:
        """(rows, maps) of the last batch: the thumbnail rows with at most
        `map_tokens` real tokens, and per row its (layer, head, n, n) maps cropped
        to the real tokens."""
        maps = [torch.stack(per_row).numpy() for per_row in zip(*self._maps, strict=True)] if self._maps else []
        self._maps = []
        return self.map_rows if maps else [], maps
