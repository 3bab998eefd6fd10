"""Attention pattern types (Kovaleva et al. 2019, Fig. 1): features, rules, look features and thumbnails.

Kovaleva et al. sorted attention maps into five types with a CNN trained on ~400 hand labels
that were never released. attnwh computes features of every (example, layer, head) map on
the device while the model runs (in the statistics observer, `statistics.py`) and stores
them next to the type, so that anyone can see why a map got its type and re-label stored
rows (`attnwh patterns reclassify`) without the model.

Features, for a map A cropped to the n real tokens (rows = queries, each summing to 1). The
*band* is the cells with |i - j| <= 1 (self, previous and next token); *ordinary* tokens are
the real tokens other than [CLS] and [SEP]. Column features leave the band out and band
features leave the special columns out, so that the two structures do not leak into each
other (the token after [CLS] attends to its previous token *and* to [CLS]):

- ``col_cls``, ``col_sep``, ``col_punct``: mean over rows of the mass on the [CLS] column,
  on all [SEP] columns, on all punctuation columns, off the band;
- ``col_other``: the largest mean mass, off the band, of any single other ordinary column
  (a stripe on some content token);
- ``band``: mean over rows of A[i, i-1] + A[i, i] + A[i, i+1], counting keys that are
  neither special nor punctuation (a stripe on the closing "." crosses the band of its
  neighbours; it is a column, not a diagonal);
- ``block``: for sentence pairs, per segment the mean over its ordinary query rows of the
  mass on ordinary keys of the same segment (band included: a diagonal map keeps its mass in
  its segment too, and the rules test for diagonal first); then the smaller of the segments'
  values (a block map keeps attention inside *each* sentence; taking the smaller one stops a
  long sentence beside a short one from looking like a block by chance). 0 for single
  sentences: block attention is defined for pairs. Segments are read from the [SEP]
  positions (the number of [SEP]s before a token), which works for BERT's ``[SEP]`` and
  RoBERTa's ``</s></s>`` alike and needs no token_type_ids.

The rules (:class:`Thresholds`, :func:`classify`) read three scores: vertical
V = col_cls + col_sep + col_punct + col_other ("column mass"), diagonal D = band, block
B = block.

Look features (:data:`LOOK_COLUMNS`, docs/metrics.md#look-features-and-the-default-classifier)
read the map as a person sees it, drawn scaled to its largest weight: column and diagonal
intensities, the background, the shares of cells darker than a few levels, and for pairs the
intensity within and across the sentences. With the features above they are the inputs of
the default classifier (`pattern_model.py`), which gives the stored types; the rules stay,
for explaining a type and for `attnwh patterns reclassify --classifier rules`.

Thumbnails: for a seeded sample of examples, each head's cropped n × n map is resized to
32 × 32 with ``adaptive_avg_pool2d``: each cell is the mean attention weight over the map
cells its bin covers; maps shorter than 32 tokens are upsampled by repeating cells (each bin
covers at least one cell), so a thumbnail never invents structure between tokens.
Thumbnails feed the CNN (`pattern_cnn.py`) and the report's gallery. Reclassifying with the
rules uses the exact stored features, not features re-computed from thumbnails (which would
only approximate them: pooling blurs the band into neighbouring cells).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import torch
from torch import nn

from attnwh.ingest.measures import fused
from attnwh.ingest.model.tiles import Tile, row_blocks

# Codes stored in head_stats.pattern; the names are the lookup table pattern_types
# (sql/schema/0005_patterns.sql), in the same order.
PATTERN_TYPES: tuple[str, ...] = ("heterogeneous", "vertical", "diagonal", "vertical+diagonal", "block")
HETEROGENEOUS, VERTICAL, DIAGONAL, VERTICAL_DIAGONAL, BLOCK = range(5)

# Feature columns the observer appends to the head statistics.
FEATURE_COLUMNS: tuple[str, ...] = ("col_cls", "col_sep", "col_punct", "col_other", "band", "block")
# Then the features read from the map as a person sees it (:func:`map_features`), and the
# type's code and its margin.
LOOK_COLUMNS: tuple[str, ...] = (
    "look_col_1",
    "look_col_2",
    "look_col_3",
    "look_col_median",
    "look_col_mean",
    "look_col_cover",
    "look_cols_dark",
    "look_prev",
    "look_self",
    "look_next",
    "look_cls",
    "look_background",
    "look_dark_02",
    "look_dark_05",
    "look_dark_10",
    "look_dark_25",
    "look_dark_50",
    "look_within",
    "look_across",
)
# Levels of look_dark_*: shares of the map's largest weight.
DARK_LEVELS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.25, 0.5)
COVER_LEVEL = 0.3  # look_col_cover: a cell of the strongest column darker than this
DARK_COLUMN_LEVEL = 0.2  # look_cols_dark: a column darker than this on average
PATTERN_COLUMNS: tuple[str, ...] = (*FEATURE_COLUMNS, *LOOK_COLUMNS, "pattern", "pattern_margin")

THUMBNAIL_SIZE = 32
# Thumbnail-sample examples with at most this many real tokens also keep their whole maps
# (pattern_maps), for labelling by eye, by default (`attnwh ingest --map-tokens N` changes it):
# 64² weights per head is small; a longer map takes n² · 4 bytes per head and needs the label
# page's zoom to be read.
MAP_MAX_TOKENS = 64


@dataclass(frozen=True)
class Thresholds:
    """The rules' thresholds, all in one place. Scores are shares of a map's attention mass
    (0 to 1): V = col_cls + col_sep + col_punct + col_other, D = band, B = block.

    The rules, first match wins:

    1. vertical if V >= vertical and D < mixed_diagonal;
    2. diagonal if D >= diagonal and V < mixed_vertical;
    3. block if B >= block and V < vertical and D < diagonal (a pair whose sentences keep
       their attention to themselves, whatever faint stripes the map also has);
    4. vertical+diagonal if V >= mixed_vertical and D >= mixed_diagonal;
    5. heterogeneous otherwise.

    The values were set on synthetic maps of known type (`synthetic_maps.py`, seed 0) and
    are checked on other seeds by the tests; the generator's ranges say what each type
    means in numbers.
    """

    vertical: float = 0.45
    """V at or above this (with D below mixed_diagonal): most of the mass sits on a few
    columns, the special tokens or one other token."""
    diagonal: float = 0.35
    """D at or above this (with V below mixed_vertical): most of the mass sits on the
    token itself and its neighbours."""
    mixed_vertical: float = 0.2
    """With D >= mixed_diagonal: both stripes are clearly visible, the map is
    vertical+diagonal. Uniform attention puts about 3/n on the special columns."""
    mixed_diagonal: float = 0.2
    """See mixed_vertical. Uniform attention puts about 3/n on the band."""
    block: float = 0.6
    """B at or above this (pairs only; neither vertical nor diagonal): ordinary tokens keep
    their attention inside their own sentence. Uniform attention over a pair puts about
    one half there."""

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


THRESHOLDS = Thresholds()


def scores(features: torch.Tensor) -> torch.Tensor:
    """(…, 3) scores V, D, B from (…, len(FEATURE_COLUMNS)) features."""
    f = features.float()
    vertical = f[..., 0] + f[..., 1] + f[..., 2] + f[..., 3]
    return torch.stack([vertical, f[..., 4], f[..., 5]], dim=-1)


def classify(features: torch.Tensor, thresholds: Thresholds = THRESHOLDS) -> torch.Tensor:
    """Pattern codes (…) from features (…, len(FEATURE_COLUMNS)); a pure function, used on
    the device during ingest and on stored features by `attnwh patterns reclassify`."""
    s = scores(features)
    v, d, b = s[..., 0], s[..., 1], s[..., 2]
    t = thresholds
    # Applied from the last rule to the first, so that the first match wins.
    code = torch.full(v.shape, HETEROGENEOUS, dtype=torch.int64, device=v.device)
    code = torch.where((v >= t.mixed_vertical) & (d >= t.mixed_diagonal), VERTICAL_DIAGONAL, code)
    code = torch.where((b >= t.block) & (v < t.vertical) & (d < t.diagonal), BLOCK, code)
    code = torch.where((d >= t.diagonal) & (v < t.mixed_vertical), DIAGONAL, code)
    return torch.where((v >= t.vertical) & (d < t.mixed_diagonal), VERTICAL, code)


def margins(features: torch.Tensor, thresholds: Thresholds = THRESHOLDS) -> torch.Tensor:
    """How close each map (…) is to getting another type from the rules: the smallest
    distance of its scores to a threshold they are compared with (V to ``vertical`` and
    ``mixed_vertical``, D to ``diagonal`` and ``mixed_diagonal``, B to ``block`` for pairs,
    where B > 0). Near 0 = borderline; a map far from every threshold is a typical one."""
    s = scores(features)
    t = thresholds
    distances = [
        (s[..., 0] - t.vertical).abs(),
        (s[..., 0] - t.mixed_vertical).abs(),
        (s[..., 1] - t.diagonal).abs(),
        (s[..., 1] - t.mixed_diagonal).abs(),
        torch.where(s[..., 2] > 0, (s[..., 2] - t.block).abs(), torch.inf),
    ]
    return torch.stack(distances, dim=-1).amin(-1)


class PatternMasks:
    """Per-batch masks the features need, built once per batch from the token masks."""

    def __init__(self, key_mask: torch.Tensor, cls: torch.Tensor, sep: torch.Tensor, punct: torch.Tensor) -> None:
        real = key_mask.float()
        self.real = real
        self.n = real.sum(-1)  # (B,) real tokens
        self.row_weight = real / self.n[:, None]  # (B, S) mean over the n real rows
        ordinary = key_mask & ~cls & ~sep
        self.cls = cls.float()
        self.sep = sep.float()
        self.ordinary = ordinary.float()
        self.punct = (punct & ordinary).float()
        self.other = (ordinary & ~punct).float()
        # Segment of each token: how many [SEP]s come before it.
        segment = torch.cumsum(sep.long(), dim=-1) - sep.long()
        self.segment = segment
        groups = int(segment.max()) + 1 if segment.numel() else 1
        self.segment_columns = nn.functional.one_hot(segment, groups).float() * self.ordinary[..., None]  # (B, S, G)
        sizes = self.segment_columns.sum(1)  # (B, G) ordinary tokens per segment
        self.segment_size = sizes.clamp_min(1)
        # Segments without ordinary tokens (RoBERTa's empty one between </s></s>) never count.
        self.segment_absent = (sizes == 0).float() * 2.0
        self.pair = ((sizes > 0).sum(-1) >= 2).float()  # (B,)
        # Band keys are the other ordinary tokens: key i-1 / i+1 is one, at row i.
        self.band_prev = nn.functional.pad(self.other[:, :-1], (1, 0))
        self.band_next = nn.functional.pad(self.other[:, 1:], (0, 1))


def column_mass(weight: torch.Tensor, a: torch.Tensor, start: int) -> torch.Tensor:
    """Σ_i weight_i a[…, i, :] over the rows of a tile `a` (B, H, rows, keys) that begins at
    the map's row `start`, with the rows' weights `weight` (B, rows): (B, H, keys) in float64.
    Summed in float32 over blocks of :data:`tiles.ROW_BLOCK` rows of the map (aligned to its first
    row), then the blocks in float64 in row order: tiles whose heights are whole blocks (as
    the budget gives them) sum the same blocks in the same order as whole maps, so the sums
    do not depend on the tile height. One product per block, each a view of the tile (a
    product over the blocks at once would copy a tile whose height is not a whole number of
    them)."""
    total = a.new_zeros((*a.shape[:-2], a.shape[-1]), dtype=torch.float64)
    for rows in row_blocks(start, a.shape[-2]):
        total += (weight[:, None, None, rows] @ a[..., rows, :])[..., 0, :]
    return total


def row_diagonals(a: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a tile `a` (…, rows, keys) holding query rows start … start + rows - 1 of a map:
    A[i, i], A[i, i-1] and A[i, i+1] per row (…, rows), 0 where the neighbour does not exist."""
    rows = a.shape[-2]
    d0 = a.diagonal(offset=start, dim1=-2, dim2=-1)
    prev = a.diagonal(offset=start - 1, dim1=-2, dim2=-1)
    nxt = a.diagonal(offset=start + 1, dim1=-2, dim2=-1)
    prev = nn.functional.pad(prev, (rows - prev.shape[-1], 0))  # row 0 has no previous key
    nxt = nn.functional.pad(nxt, (0, rows - nxt.shape[-1]))  # the last key has no next
    return d0, prev, nxt


class MapFeatures:
    """The features and look features of one layer's maps (B, H, S, S), read a tile of query
    rows at a time (:meth:`add`, rows in order), then :meth:`finish`. Everything but two
    look features is a sum or maximum over rows and accumulates in (B, H, S) vectors; the
    dark-cell shares and the strongest column's cover compare cells with the map's largest
    weight, known only after the last tile, so :meth:`finish` walks the tiles a second time
    for them (two passes, exact; a running rescale cannot count cells above a level that
    is not yet known)."""

    def __init__(self, m: PatternMasks, heads: int) -> None:
        self.m = m
        batch, length = m.real.shape
        zeros = m.real.new_zeros((batch, heads, length))
        # Mean mass per column, Σ_i w_i A[i, j]: over thousands of rows, in float64 and in
        # blocks independent of the tiles (:func:`column_mass`).
        self.column = zeros.double()
        self.d0, self.prev, self.nxt = zeros.clone(), zeros.clone(), zeros.clone()  # per row
        self.own = zeros.clone()  # per ordinary row, its mass on its own segment's ordinary keys
        self.to_ordinary = zeros.clone()  # per row, its mass on every segment's ordinary keys
        self.row_max = zeros  # per row, its largest weight

    def add(
        self,
        tile: Tile,
        a: torch.Tensor,
        diagonals: tuple[torch.Tensor, ...] | None = None,
        row_max: torch.Tensor | None = None,
        by_segment: torch.Tensor | None = None,
    ) -> None:
        """`tile` with its weights `a` in float32 (B, H, rows, keys); `diagonals` (its
        :func:`row_diagonals`), `row_max` (its largest weight per row) and `by_segment` (a @
        the segment columns, (B, H, rows, G)), when the caller has them already."""
        m = self.m
        rows, keys = tile.rows, tile.keys
        if diagonals is None:
            diagonals = row_diagonals(a, tile.start - tile.key_start)
        self.d0[..., rows], self.prev[..., rows], self.nxt[..., rows] = diagonals
        self.column[..., keys] += column_mass(m.row_weight[:, rows], a, tile.start)
        if by_segment is None:  # (B, H, rows, G): each row's mass on each segment's ordinary keys
            by_segment = a @ m.segment_columns[:, None, keys]
        segment = m.segment[:, None, rows, None].expand(-1, a.shape[1], -1, 1)
        self.own[..., rows] = by_segment.gather(-1, segment)[..., 0]
        self.to_ordinary[..., rows] = by_segment.sum(-1)
        self.row_max[..., rows] = a.amax(-1) if row_max is None else row_max

    def finish(self, tiles: Callable[[], Iterator[Tile]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (B, H, len(FEATURE_COLUMNS)) and look features (B, H, len(LOOK_COLUMNS));
        `tiles()` gives the tiles again, in the same order as :meth:`add` had them."""
        m = self.m
        w = m.row_weight[:, None]  # (B, 1, S)
        below = self.prev[..., 1:]  # A[i+1, i], i = 0..S-2
        above = self.nxt[..., :-1]  # A[i, i+1], i = 0..S-2
        # Mean mass per column without its band cells: column j loses w_j A[j, j],
        # w_{j+1} A[j+1, j] and w_{j-1} A[j-1, j].
        band_of_column = (
            w * self.d0 + nn.functional.pad(w[..., 1:] * below, (0, 1)) + nn.functional.pad(w[..., :-1] * above, (1, 0))
        )
        off = self.column - band_of_column
        col_cls = (off * m.cls[:, None]).sum(-1)
        col_sep = (off * m.sep[:, None]).sum(-1)
        col_punct = (off * m.punct[:, None]).sum(-1)
        other = (off * m.other[:, None]).amax(-1)
        # Band mass on ordinary keys, per row, then the mean over rows.
        band_rows = self.d0 * m.other[:, None] + self.prev * m.band_prev[:, None] + self.nxt * m.band_next[:, None]
        band = (band_rows * w).sum(-1)
        # Own-segment mass of each ordinary row (band included: the rules test diagonal first).
        per_segment = (self.own @ m.segment_columns) / m.segment_size[:, None]  # (B, H, G)
        block = (per_segment + m.segment_absent[:, None]).amin(-1) * m.pair[:, None]
        features = torch.stack([col_cls, col_sep, col_punct, other, band, block], dim=-1).clamp_min(0).float()
        return features, self._look(tiles, below, above)

    def _look(self, tiles: Callable[[], Iterator[Tile]], below, above) -> torch.Tensor:
        """The look features (B, H, len(LOOK_COLUMNS)): the map as a person sees it, drawn
        scaled to its largest weight (x = A / max A over the real cells). Weights are
        compared with levels of the largest one (A > level * max A), so no scaled copy of
        the maps is made."""
        m = self.m
        real = m.real[:, None]  # (B, 1, S) real rows (and keys)
        n = m.n[:, None]  # (B, 1)
        top = (self.row_max * real).amax(-1).clamp_min(torch.finfo(torch.float32).tiny)  # (B, H)
        c = self.column / top[..., None]  # mean intensity of each column, 0 on padding keys
        strongest = c.topk(min(3, c.shape[-1]), dim=-1).values
        strongest = nn.functional.pad(strongest, (0, 3 - strongest.shape[-1]))
        # Median column intensity over the real keys (the mean of the two middle ones).
        ordered = c.masked_fill(real == 0, torch.inf).sort(-1).values
        middle = torch.stack([(m.n - 1) // 2, m.n // 2], -1).long()[:, None].expand(-1, c.shape[1], -1)
        median = ordered.gather(-1, middle).mean(-1)
        mean = c.sum(-1) / n
        # The second pass: cells of the strongest column, and cells darker than each level.
        strongest_column = c.argmax(-1)[..., None, None]  # (B, H, 1, 1)
        covered = top.new_zeros(top.shape)
        levels = top[..., None] * torch.tensor(DARK_LEVELS, device=top.device)  # (B, H, levels)
        dark = top.new_zeros((*top.shape, len(DARK_LEVELS)), dtype=torch.float64)  # counts pass 2^24
        for tile in tiles():
            a = tile.probs.float()
            rows_real = m.real[:, None, tile.rows]  # (B, 1, rows)
            # The strongest column's cells in this tile (0 where it lies outside the tile's keys).
            column = strongest_column - tile.key_start
            inside = (column >= 0) & (column < a.shape[-1])
            at = a.gather(-1, column.clamp(0, a.shape[-1] - 1).expand(-1, -1, a.shape[-2], 1))[..., 0] * inside[..., 0]
            covered += ((at > COVER_LEVEL * top[..., None]).float() * rows_real).sum(-1)
            dark += (fused.counts(a, levels) * rows_real[..., None]).sum(-2, dtype=torch.float64)
        cover = covered / n
        dark_shares = (dark / (n * n)[..., None]).float().unbind(-1)
        dark_columns = ((c > DARK_COLUMN_LEVEL).float() * real).sum(-1) / n
        neighbours = (n - 1).clamp_min(1)
        # A[i+1, i] and A[i, i+1] of real tokens i and i + 1 (right-padded: i + 1 < n).
        pair_rows = m.real[:, None, 1:] * m.real[:, None, :-1]
        look_prev = (below * pair_rows).sum(-1) / neighbours / top
        look_self = (self.d0 * real).sum(-1) / n / top
        look_next = (above * pair_rows).sum(-1) / neighbours / top
        look_cls = (c * m.cls[:, None]).sum(-1)
        # Off the band: all real cells less the band. Each real row sums to 1, so n in all,
        # except where a learned sink takes part of every row: then what the rows hold (a sum
        # that differs from 1 by its rounding alone is taken as 1, so other maps keep their value).
        held = (self.column * real).sum(-1)  # the mean row's total
        held = torch.where((held - 1).abs() < 1e-6, torch.ones_like(held), held)
        band_total = look_self * n + (look_prev + look_next) * (n - 1)
        off_cells = (n * n - 3 * n + 2).clamp_min(1)
        background = ((held * n / top - band_total) / off_cells).clamp_min(0)
        # Pairs: the mean intensity between ordinary tokens of the same sentence, and across.
        ordinary = m.ordinary[:, None]
        within = (self.own * ordinary).sum(-1)
        across = (self.to_ordinary * ordinary).sum(-1) - within
        sizes = m.segment_columns.sum(1)  # (B, G)
        same_cells = (sizes * sizes).sum(-1)[:, None]
        cross_cells = (sizes.sum(-1) ** 2)[:, None] - same_cells
        pair = m.pair[:, None]
        look_within = within / top / same_cells.clamp_min(1) * pair
        look_across = across.clamp_min(0) / top / cross_cells.clamp_min(1) * pair
        return torch.stack(
            [
                *strongest.unbind(-1),
                median,
                mean,
                cover,
                dark_columns,
                look_prev,
                look_self,
                look_next,
                look_cls,
                background,
                *dark_shares,
                look_within,
                look_across,
            ],
            dim=-1,
        ).float()


def map_features(a: torch.Tensor, m: PatternMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (B, H, len(FEATURE_COLUMNS)) and look features (B, H, len(LOOK_COLUMNS)) of
    whole maps `a` (B, H, S, S) whose padding keys are 0; padding query rows are ignored."""
    features = MapFeatures(m, a.shape[1])
    whole = Tile(0, 0, a)
    features.add(whole, a)
    return features.finish(lambda: iter([whole]))


def pooling_matrix(length: int, size: int = THUMBNAIL_SIZE, device: torch.device | None = None) -> torch.Tensor:
    """(size, length): row p averages the cells of bin p as ``adaptive_avg_pool`` bins them
    (from floor(p·length/size) to ceil((p+1)·length/size)), so P A Pᵀ is A pooled to
    size × size and a tile of A's rows adds P[:, rows] (A[rows] Pᵀ) to it."""
    bins = torch.arange(size, device=device)
    first = (bins * length) // size
    last = ((bins + 1) * length + size - 1) // size
    keys = torch.arange(length, device=device)
    inside = (keys[None] >= first[:, None]) & (keys[None] < last[:, None])
    return inside.float() / (last - first).float()[:, None]


def thumbnails(a: torch.Tensor, rows: list[int], lengths: list[int], size: int = THUMBNAIL_SIZE) -> torch.Tensor:
    """(len(rows), H, size * size) thumbnails of the maps of batch rows `rows`, each cropped
    to its `lengths` real tokens and resized with adaptive average pooling."""
    out = [nn.functional.adaptive_avg_pool2d(a[r, :, :n, :n], size).flatten(1) for r, n in zip(rows, lengths)]
    return torch.stack(out) if out else a.new_zeros((0, a.shape[1], size * size))
