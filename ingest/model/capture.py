"""attnwh's attention function, registered with transformers' AttentionInterface.

A model loaded with ``attn_implementation=ATTENTION_NAME`` computes every self-attention
layer through :func:`attnwh_attention`. It does what the eager path does (scores, mask,
softmax, weighted sum of values) and hands each layer's probabilities to the active
:class:`AttentionObserver`, which reduces them on the device and may replace them (head
disabling). The full maps are never returned to the model, so no more than one layer's maps
of one batch are alive at a time.

The mask function is registered under the same name: without it transformers passes
``attention_mask=None`` to an unknown implementation and padded batches silently differ
from eager. It returns a :class:`RowMask`, which builds the additive mask for a block of
query rows when asked, so that no n × n mask exists on long inputs either.

Long inputs are observed in tiles (docs/long-inputs.md): when a layer's maps would take
more than the attention memory budget (:func:`attention_memory`), the function computes
attention a block of query rows at a time (the tile's scores, softmax and its rows of the
weighted sum of values) and hands each tile to a :class:`TileObserver`, so no layer's
n × n maps exist at once. An observer that cannot take tiles sees whole maps, as before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask

from attnwh.errors import ModelError
from attnwh.ingest.model.families import facts_of
from attnwh.ingest.model.tiles import ROW_BLOCK, LayerTiles, Tile, whole_tiles

ATTENTION_NAME = "attnwh"


class AttentionObserver(Protocol):
    """Sees each layer's attention probabilities during a forward pass."""

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Called once per layer, in layer order, with probabilities (batch, heads, query, key)
        and the value vectors (batch, heads, key, head_dim); returns the probabilities the
        layer should use (the same tensor when nothing is changed)."""
        ...


@runtime_checkable
class TileObserver(AttentionObserver, Protocol):
    """An observer that can read a layer's maps a tile of query rows at a time. Per layer:
    :meth:`begin_layer`, :meth:`observe_tile` for each tile in row order, then
    :meth:`end_layer`, which may walk the tiles again (recomputed from queries and keys). Its
    `observe` must give the same result as one tile holding every row."""

    # Bytes of working memory per map cell the observer needs on top of the tile itself.
    cell_bytes: int

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None: ...

    def observe_tile(self, module: nn.Module, tile: Tile, value: torch.Tensor) -> torch.Tensor | None:
        """Reads one tile; may return its rows of probs @ value[keys] (batch, heads, rows,
        head_dim) in the value's dtype, when it computed them anyway, to spare the attention
        function the product."""
        ...

    def end_layer(self, module: nn.Module, tiles: LayerTiles) -> None: ...


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


class RowMask:
    """The additive mask of one attention call (what transformers' ``eager_mask`` would
    return for the same arguments), built for a block of query rows when asked. The whole
    mask is built once and kept when asked for, as eager does."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self._whole: torch.Tensor | None = None
        self._built = False
        self._needed: bool | None = None

    @property
    def q_length(self) -> int:
        return int(self.arguments["q_length"])

    def whole(self) -> torch.Tensor | None:
        if not self._built:
            self._whole, self._built = eager_mask(**self.arguments), True
        return self._whole

    def block(self, start: int, stop: int, first: int, last: int) -> torch.Tensor | None:
        """The mask of query rows [start, stop) and keys [first, last): (batch, 1, rows,
        keys) or None."""
        if start == 0 and stop == self.q_length and first == 0 and last == int(self.arguments["kv_length"]):
            return self.whole()
        if self._built:
            return None if self._whole is None else self._whole[:, :, start:stop, first:last]
        if self._needed is None:  # transformers skips the mask of a layer that needs none
            self._needed = eager_mask(**{**self.arguments, "q_length": 1}) is not None
        if not self._needed:
            return None
        q_offset = int(self.arguments.get("q_offset", 0))
        kv_offset = int(self.arguments.get("kv_offset", 0))
        return eager_mask(
            **{
                **self.arguments,
                "q_length": stop - start,
                "q_offset": q_offset + start,
                "kv_length": last - first,
                "kv_offset": kv_offset + first,
                # Whether a mask is needed is decided on the whole layer, not on a block: a
                # block narrower than the window would be let through unmasked.
                "allow_is_bidirectional_skip": False,
            }
        )


def row_mask(**arguments: Any) -> RowMask | torch.Tensor | None:
    """The mask function registered with transformers: the eager mask, or a :class:`RowMask`
    when the layers will be computed in tiles (only attnwh's attention function reads it)."""
    config = arguments.get("config")
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    queries, keys = int(arguments["q_length"]), int(arguments["kv_length"])
    tiled = tile_rows(int(arguments["batch_size"]), heads, queries, keys, _active) < queries
    # A family whose inline attention adds the mask to its scores itself (MPNet) needs it whole.
    if tiled and not facts_of(str(getattr(config, "model_type", ""))).whole_mask:
        return RowMask(arguments)
    return eager_mask(**arguments)


def _block_of(mask: RowMask | torch.Tensor | None, start: int, stop: int, first: int, last: int) -> torch.Tensor | None:
    """The mask of query rows [start, stop) and keys [first, last)."""
    if isinstance(mask, RowMask):
        return mask.block(start, stop, first, last)
    if mask is None:
        return None
    return mask[:, :, start:stop, first:last] if mask.shape[-2] > 1 else mask[..., first:last]


def _whole_mask(mask: RowMask | torch.Tensor | None) -> torch.Tensor | None:
    return mask.whole() if isinstance(mask, RowMask) else mask


# The attention memory budget in bytes (`attention_memory`), or None before one is set.
_budget: int | None = None
# A fixed tile height in rows, for tests and benchmarks (`tile_rows`); None: from the budget.
_forced_rows: int | None = None
# Bytes per map cell of the attention function itself: scores, probabilities, the mask.
_OWN_CELL_BYTES = 12

# The share of the device's free memory the default budget takes, and its bounds.
DEFAULT_SHARE = 0.125
DEFAULT_CAP = 512 << 20
DEFAULT_FLOOR = 64 << 20


def default_budget(device: torch.device | str) -> int:
    """The default attention memory budget for `device`: an eighth of its free memory (GPU)
    or of the host's available memory (CPU), between 64 MiB and 512 MiB. The budget bounds the
    maps alive at once, not the model or its activations."""
    device = torch.device(device)
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else _available_host_memory()
    return int(min(DEFAULT_CAP, max(DEFAULT_FLOOR, free * DEFAULT_SHARE)))


def _available_host_memory() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


@contextlib.contextmanager
def attention_memory(budget: int | None = None, rows: int | None = None) -> Iterator[None]:
    """Inside the block, layers whose maps (with the observer's working memory) would take
    more than `budget` bytes are computed in tiles of query rows that fit it; `rows` fixes
    the tile height instead (tests, benchmarks). What is not given keeps the outer block's
    setting; leaving the block restores it."""
    global _budget, _forced_rows
    saved = _budget, _forced_rows
    _budget = budget if budget is not None else _budget
    _forced_rows = rows if rows is not None else _forced_rows
    try:
        yield
    finally:
        _budget, _forced_rows = saved


def map_bytes(batch: int, heads: int, queries: int, keys: int, observer: object | None = None) -> int:
    """The bytes one layer's whole maps take in the attention function, with `observer`'s
    working memory (its `cell_bytes`, if it reads tiles)."""
    per_cell = _OWN_CELL_BYTES + int(getattr(observer, "cell_bytes", 0))
    return batch * heads * queries * keys * per_cell


def tile_rows(batch: int, heads: int, queries: int, keys: int, observer: object | None) -> int:
    """How many query rows each tile of a layer holds (`queries`: the whole map)."""
    if _forced_rows is not None:
        return max(1, min(queries, _forced_rows))
    if _budget is None:
        return queries
    per_row = map_bytes(batch, heads, 1, keys, observer)
    rows = max(1, min(queries, _budget // max(per_row, 1)))
    # Whole blocks of rows where the budget holds one (see `tiles.ROW_BLOCK`).
    return rows if rows == queries or rows < ROW_BLOCK else rows - rows % ROW_BLOCK


# Batches of long inputs are split so that each piece's layers fit the budget in tiles of
# at least this many rows (per-tile overheads stay small), or whole where they cannot tile.
TILE_FLOOR = 64


def batch_rows(budget_bytes: int, heads: int, length: int, observer: object | None, tiles: bool) -> int:
    """How many examples of `length` tokens one forward pass may hold under `budget_bytes`:
    with tiles, enough for tiles of `TILE_FLOOR` rows (at least 1); without, enough for
    whole maps (0: not even one fits)."""
    rows = length if not tiles else min(length, TILE_FLOOR)
    fit = budget_bytes // max(map_bytes(1, heads, rows, length, observer), 1)
    return max(1, fit) if tiles else fit


_mask: torch.Tensor | None = None


def observed_mask() -> torch.Tensor | None:
    """During an observer's `observe` (or `observe_tile`) called from attnwh's attention
    function: the additive mask of that layer (batch, 1, query, key) (of the tile's rows and
    keys), which holds what the layer may see beyond the padding (ModernBERT's sliding window
    on its local layers); None elsewhere."""
    return _mask


_learned = False


def learned_sink() -> bool:
    """During an observer's `observe` (or `observe_tile`) called from attnwh's attention
    function: whether the layer adds a learned sink logit to each row's softmax, so that its
    weights over the tokens sum to 1 less the sink's share."""
    return _learned


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
    """Eager attention with an observation point between the softmax and the value sum;
    in tiles of query rows where the budget asks for it and the observer can take them."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    # Grouped-query attention: keys and values arrive with H_kv heads; each serves H / H_kv
    # consecutive query heads (transformers' repeat_kv), so query head h reads group
    # h // (H / H_kv), and observers see keys, values and maps per query head.
    key, value = _per_query_head(key, query.shape[1]), _per_query_head(value, query.shape[1])
    softcap = kwargs.get("softcap")
    cap = float(softcap) if isinstance(softcap, (int, float)) and softcap else None
    observer = _active
    if key.shape[2] != query.shape[2]:
        # Keys that are not the input's tokens (DeepSeek-V4's compressed memory): no map over
        # the tokens to read. attnwh runs whole inputs without a cache, so every other layer
        # has one key per query.
        raise ModelError(
            f"{type(module).__name__} attends to {key.shape[2]} keys for {query.shape[2]} tokens (keys that are "
            "not the input's tokens, such as compressed memory), which attnwh does not read"
        )
    for tap in _taps:
        tap.called(module, kwargs)
    batch, heads, queries, _ = query.shape
    keys = key.shape[2]
    # Tile observers read eval-mode passes; with dropout on, an observer sees whole maps.
    training = module.training and dropout > 0
    reader = observer if isinstance(observer, TileObserver) and not training else None
    rows = tile_rows(batch, heads, queries, keys, observer) if observer is None or reader is not None else queries
    window = kwargs.get("sliding_window")
    window = int(window) if isinstance(window, int) and window > 0 else None
    scoring = _Scoring(scaling, cap, _float32_softmax(module), _learned_sink(kwargs, heads), _bias(kwargs))
    global _learned
    _learned = scoring.sink is not None
    if rows < queries:
        tiled = _tiled(module, query, key, value, attention_mask, scoring, dropout, rows, window, reader)
        for tap in _taps:
            tap.returned(module, tiled)
        return tiled, None
    mask = _whole_mask(attention_mask)
    probs = scoring.probabilities(torch.matmul(query, key.transpose(2, 3)), mask, slice(0, queries), slice(0, keys))
    output: torch.Tensor | None = None
    if reader is not None:  # one tile of every row; it may give the output
        reader.begin_layer(module, value, queries)
        rows_out = _read(reader, module, Tile(0, 0, probs, mask, window), value)
        reader.end_layer(module, whole_tiles(probs))
        if rows_out is not None:
            output = rows_out.transpose(1, 2).contiguous()
    elif observer is not None:
        global _mask
        _mask = mask
        try:
            probs = observer.observe(module, probs, value)
        finally:
            _mask = None
    if output is None:
        probs = nn.functional.dropout(probs, p=dropout, training=module.training)
        output = torch.matmul(probs, value).transpose(1, 2).contiguous()
    for tap in _taps:
        tap.returned(module, output)
    return output, None


def _tiled(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: RowMask | torch.Tensor | None,
    scoring: _Scoring,
    dropout: float,
    rows: int,
    window: int | None,
    observer: TileObserver | None,
) -> torch.Tensor:
    """The attention output (batch, query, heads, head_dim), computed `rows` query rows at a
    time; `observer` (never with dropout on) sees each tile, then may walk them again. On a
    sliding-window layer (`window`: transformers' ``sliding_window``, keys at most window - 1
    away) a tile holds only the keys some of its rows can see: the others' weights are exactly 0."""
    queries, keys = query.shape[2], key.shape[2]
    # A causal layer's tile holds only the keys its rows can see (keys before `stop`), so a
    # long input costs about half the cells of its whole maps. Queries and keys are the same
    # positions here (no cache: attnwh reads whole inputs in one pass).
    causal = bool(getattr(module, "is_causal", False)) and queries == keys

    def tile_of(start: int, stop: int) -> Tile:
        first, last = (0, keys) if window is None else (max(0, start - window), min(keys, stop + window))
        if causal:
            last = min(last, stop)
        block = _block_of(mask, start, stop, first, last)
        probs = query.new_zeros((*query.shape[:2], stop - start, last - first))
        # A block of `ROW_BLOCK` rows at a time, over the keys its rows see (`Tile.blocks`): a
        # product's or a softmax's last bits can depend on how many rows and keys it takes and
        # where a row falls among them, so every row is computed the same way in tiles of any
        # height. On a sliding-window layer the keys no row of a block sees stay exactly 0.
        for rows_in, keys_in, seen in Tile(start, first, probs, window=window, causal=causal).blocks(keys):
            scores = torch.matmul(
                query[:, :, start + rows_in.start : start + rows_in.stop], key[:, :, seen].transpose(2, 3)
            )
            part = block
            if block is not None:  # a mask of one row (padding only) serves every row
                part = block[..., keys_in] if block.shape[-2] == 1 else block[:, :, rows_in, keys_in]
            at = slice(start + rows_in.start, start + rows_in.stop)
            probs[:, :, rows_in, keys_in] = scoring.probabilities(scores, part, at, seen)
        return Tile(start, first, probs, block, window, causal)

    tiles = LayerTiles(tile_of, queries, rows)
    output = query.new_empty((query.shape[0], queries, query.shape[1], value.shape[-1]))
    if observer is not None:
        observer.begin_layer(module, value, queries)
    for tile in tiles():
        rows_out = _read(observer, module, tile, value) if observer is not None else None
        if rows_out is None:
            probs = nn.functional.dropout(tile.probs, p=dropout, training=module.training)
            rows_out = torch.matmul(probs, value[:, :, tile.keys])
        output[:, tile.rows] = rows_out.transpose(1, 2)
    if observer is not None:
        observer.end_layer(module, tiles)
    return output


class _Scoring:
    """From raw scores q·k to probabilities as the model's eager attention computes them:
    scaled, soft-capped (Gemma 2: cap · tanh(s / cap), before the mask), plus an additive
    position bias where the family hands one over, masked, softmax; with a learned sink, its
    logit joins each row's softmax and the sink's share is dropped, so the weights over the
    tokens sum to less than 1 (docs/metrics.md#learned-sinks)."""

    def __init__(
        self,
        scaling: float,
        cap: float | None,
        upcast: bool,
        sink: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> None:
        self.scaling, self.cap, self.upcast, self.sink, self.bias = scaling, cap, upcast, sink, bias

    def probabilities(self, scores: torch.Tensor, mask: torch.Tensor | None, rows: slice, keys: slice) -> torch.Tensor:
        """Overwrites `scores` (a fresh product) of query rows `rows` and keys `keys`."""
        scores.mul_(self.scaling)
        if self.cap is not None:
            scores.div_(self.cap).tanh_().mul_(self.cap)
        if self.bias is not None:
            scores.add_(self.bias[..., rows, keys])
        if mask is not None:
            scores.add_(mask)
        if self.sink is not None:
            sink = self.sink[..., rows, :] if self.sink.shape[-2] > 1 else self.sink
            sink = sink.to(scores.dtype).expand(*scores.shape[:-1], 1)
            logits = torch.cat([scores, sink], dim=-1)
            if self.upcast:
                return nn.functional.softmax(logits, dim=-1, dtype=torch.float32)[..., :-1].to(scores.dtype)
            return nn.functional.softmax(logits, dim=-1)[..., :-1]
        if self.upcast:
            return nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
        return nn.functional.softmax(scores, dim=-1)


# The attention classes whose eager softmax does not run in float32 (GPT-2's and BERT's), by
# the family record of the model that holds them (`families.py`, registered when the model
# loads); every other class is taken to upcast, as Llama's eager attention and the families
# that copy it do. Only a half-precision model's last bits depend on it.
_plain_softmax: set[type] = set()


def plain_softmax(classes: Iterable[type]) -> None:
    """Record attention classes whose eager softmax keeps the model's dtype."""
    _plain_softmax.update(classes)


def _float32_softmax(module: nn.Module) -> bool:
    return type(module) not in _plain_softmax


def _learned_sink(kwargs: dict[str, object], heads: int) -> torch.Tensor | None:
    """A learned sink logit as (1 or batch, heads, 1 or rows, 1), from the argument the family
    hands its attention function: gpt-oss and the families that copy it pass one logit per
    head (`s_aux`), others one per head and query row (`sinks`)."""
    sink = kwargs.get("s_aux")
    if sink is None:
        sink = kwargs.get("sinks")
    if not isinstance(sink, torch.Tensor):
        return None
    if sink.dim() == 1:  # one logit per head
        return sink.reshape(1, heads, 1, 1)
    return sink if sink.dim() == 4 else sink.reshape(sink.shape[0], heads, -1, 1)


def _bias(kwargs: dict[str, object]) -> torch.Tensor | None:
    """An additive position bias (batch or 1, heads, query, key) handed to the attention
    function (`position_bias`), added to the scores before the mask as the family's eager
    attention does."""
    bias = kwargs.get("position_bias")
    return bias if isinstance(bias, torch.Tensor) else None


class CallTap(Protocol):
    """Sees every call of attnwh's attention function inside :func:`tapping`: the module and
    its keyword arguments, then what the function returns (batch, query, heads, head_dim).
    The check at load (`reading.py`) reads each layer's window, sink and output projection so."""

    def called(self, module: nn.Module, kwargs: dict[str, object]) -> None: ...

    def returned(self, module: nn.Module, output: torch.Tensor) -> None: ...


_taps: list[CallTap] = []


@contextlib.contextmanager
def tapping(tap: CallTap) -> Iterator[CallTap]:
    """Hand every attention call inside the block to `tap` too; always undone."""
    _taps.append(tap)
    try:
        yield tap
    finally:
        _taps.remove(tap)


def _per_query_head(states: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, H_kv, seq, d) keys or values as (batch, H, seq, d), each key/value head
    repeated for the H / H_kv query heads of its group (transformers' repeat_kv)."""
    groups = heads // states.shape[1]
    if groups == 1:
        return states
    batch, kv_heads, seq, dim = states.shape
    return states[:, :, None].expand(batch, kv_heads, groups, seq, dim).reshape(batch, heads, seq, dim)


def _read(observer: TileObserver, module: nn.Module, tile: Tile, value: torch.Tensor) -> torch.Tensor | None:
    """`observer.observe_tile`, with the tile's mask as `observed_mask()` meanwhile."""
    global _mask
    _mask = tile.mask
    try:
        return observer.observe_tile(module, tile, value)
    finally:
        _mask = None


def register() -> str:
    """Register the attention and mask functions (idempotent); returns the implementation name."""
    AttentionInterface.register(ATTENTION_NAME, attnwh_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, row_mask)
    return ATTENTION_NAME
