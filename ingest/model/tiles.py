"""A tile of one layer's attention maps: what attnwh's attention function hands a tile
observer (`capture.py`) when a layer is computed a block of query rows at a time. Kept apart
from the attention function so that the measures can name it without loading transformers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

# Tiles computed from a budget hold a multiple of this many query rows (all but a map's last
# one), so that sums over rows can be taken in blocks of ROW_BLOCK rows aligned to the map's
# first row: the same blocks, added in the same order, whatever the tile height
# (`patterns.MapFeatures`), and so the same float32 result under any budget — where the
# float32 product of a block does not group its terms by the tile's width, which some CPUs
# do for a decoder's causal tiles (docs/long-inputs.md: a last-bit difference there).
ROW_BLOCK = 16


@dataclass(frozen=True)
class Tile:
    """A block of one layer's maps: query rows from `start`, keys from `key_start`.
    `probs` (batch, heads, rows, keys) holds every weight of those rows that can be non-zero:
    all keys, or on a sliding-window layer (ModernBERT's local layers) the keys within the
    window of some row of the tile; the weights outside it are exactly 0."""

    start: int
    key_start: int
    probs: torch.Tensor
    mask: torch.Tensor | None = None  # the additive mask of these rows and keys, if the layer has one
    # On a sliding-window layer, how far a row's keys reach: row i sees at most keys
    # i - window … i + window (the tile's keys are those of its first and last rows).
    window: int | None = None
    # On a causal layer (decoders) row i sees no key after i: the tile holds only keys
    # before its last row's end, and each block of rows only the keys before its own end.
    causal: bool = False

    @property
    def rows(self) -> slice:
        return slice(self.start, self.start + self.probs.shape[-2])

    @property
    def keys(self) -> slice:
        return slice(self.key_start, self.key_start + self.probs.shape[-1])

    def blocks(self, total: int) -> Iterator[tuple[slice, slice, slice]]:
        """The tile's rows in blocks of :data:`ROW_BLOCK` rows of the map (aligned to its
        first row), each with the keys its rows see: (rows in the tile, those keys in the tile,
        the same keys in the map of `total` keys). A reduction over keys taken per block covers
        the same keys in the same order whatever tile holds the row. Keys are every key unless
        the layer has a sliding window or is causal."""
        for rows in row_blocks(self.start, self.probs.shape[-2]):
            first, last = 0, total
            if self.window is not None:
                first = max(0, self.start + rows.start - self.window)
                last = min(total, self.start + rows.stop + self.window)
            if self.causal:
                last = min(last, self.start + rows.stop)
            yield rows, slice(first - self.key_start, last - self.key_start), slice(first, last)


def row_blocks(start: int, rows: int) -> Iterator[slice]:
    """The `rows` rows of a tile that begins at the map's row `start`, as slices of the tile in
    blocks of :data:`ROW_BLOCK` rows of the map (aligned to its first row; the first and last
    block may be shorter)."""
    lo = 0
    while lo < rows:
        hi = min(rows, (start + lo) // ROW_BLOCK * ROW_BLOCK + ROW_BLOCK - start)
        yield slice(lo, hi)
        lo = hi


class LayerTiles:
    """One layer's maps as tiles of query rows, without the maps: calling it walks the tiles
    in row order, :meth:`block` gives the tile of any rows. Each is computed when asked for
    (from the layer's queries and keys), or cut from the whole maps where they exist."""

    def __init__(self, block: Callable[[int, int], Tile], queries: int, rows: int) -> None:
        self._block, self.queries, self.height = block, queries, rows

    def __call__(self) -> Iterator[Tile]:
        for start in range(0, self.queries, self.height):
            yield self._block(start, min(self.queries, start + self.height))

    def block(self, start: int, stop: int) -> Tile:
        """The tile of query rows [start, stop)."""
        return self._block(start, stop)


def whole_tiles(probs: torch.Tensor) -> LayerTiles:
    """The tiles of maps (…, queries, keys) that exist whole: one tile of every row and key."""
    queries = probs.shape[-2]
    return LayerTiles(lambda start, stop: Tile(start, 0, probs[..., start:stop, :]), queries, queries)
