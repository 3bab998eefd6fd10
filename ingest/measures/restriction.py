"""Streaming restriction: which key/value groups of a decoder could keep only the attention
sinks and a window of recent tokens, and what that would save in KV-cache memory.

A restricted head attends to the first S real tokens of its sequence (the sinks, Xiao et al.
2023, StreamingLLM) and the last W tokens up to itself (keys i − W + 1 .. i), renormalised
over those keys; every other key is dropped. Under grouped-query attention the key/value
cache is kept per group and shared by the group's H / H_kv query heads, so a restriction is
made per (layer, key/value group) and applies to every query head of the group, as in
DuoAttention (Xiao et al. 2024). docs/metrics.md#streaming-restriction-and-kv-memory.

:class:`StreamingRestriction` does it inside attnwh's attention function (whole maps, or a
tile of query rows at a time under an attention memory budget), for several restriction sets
side by side in one batch; :func:`restricted_lm_loss` reads a causal language model's summed
next-token loss per (set, sequence) through it; :func:`rank_groups` measures each group
restricted alone and :func:`plan` the k least harmed restricted together; :func:`kv_cache_bytes`
and :func:`kv_bytes_saved` give the memory, from a model's config alone.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attnwh.ingest.measures.ablation import PrefixCache, replaying, split_by, sweep_inputs
from attnwh.ingest.model import capture
from attnwh.ingest.model.reading import layer_types

# The defaults of the restriction (DuoAttention keeps a few sinks and a short window).
DEFAULT_SINKS = 4
DEFAULT_WINDOW = 64

Group = tuple[int, int]  # (layer, key/value group)


class StreamingRestriction:
    """Attention observer (a `capture.TileObserver`) that restricts chosen key/value groups to
    the sinks and a window: their query heads' rows keep only keys j with j − first < S (the
    sequence's first S real tokens; `first` is the row's first real position, so left padding
    is respected) or i − j < W, renormalised to sum to 1.

    Renormalising the softmax's probabilities over the kept keys is exactly the softmax of the
    scores with the dropped keys masked (−inf) before it: p_j = e^{s_j} / Z, so
    p_j / Σ_kept p_k = e^{s_j} / Σ_kept e^{s_k} — the Z cancels. It is what the model computes
    when those keys are not in its cache. (In floating point the two agree to rounding while
    the kept keys' weights are representable: a row whose kept keys all fall below float32's
    smallest weight, ~1e-38, would need a score gap of ~87 nats.)

    `restricted` in :meth:`begin` is (layers, rows, kv_groups): which groups are restricted
    for each row of the batch, so one pass can hold several restriction sets (rows =
    set × sequence). A row with nothing dropped (i − first < S + W, or a sliding-window layer
    whose window is no wider than W) is left exactly as it was."""

    # The kept-keys mask, the renormalised tile and its product with the values, per map cell.
    cell_bytes = 12

    def __init__(self, sinks: int = DEFAULT_SINKS, window: int = DEFAULT_WINDOW) -> None:
        if sinks < 0 or window < 1:
            raise ValueError(f"a restriction needs sinks >= 0 and a window >= 1 (got {sinks}, {window})")
        self.sinks, self.window = sinks, window
        self._layer = 0
        self._first: torch.Tensor | None = None
        self._off: torch.Tensor | None = None
        self._active: list[bool] = []

    def begin(self, key_mask: torch.Tensor, restricted: np.ndarray, start: int = 0) -> None:
        """Before a forward pass: `key_mask` (rows, length) the real tokens, `restricted`
        (layers, rows, kv_groups) booleans; layers are counted from `start` in call order."""
        self._first = key_mask.int().argmax(-1)  # (R,): a row's first real position
        # Decided on the host, so layers with nothing restricted cost no device work or sync.
        self._active = [bool(layer.any()) for layer in restricted]
        self._off = torch.from_numpy(np.ascontiguousarray(restricted)).to(key_mask.device)  # (L, R, G)
        self._layer = start - 1  # begin_layer moves to the first layer run

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.begin_layer(module, value, probs.shape[-2])
        window = getattr(module, "sliding_window", None)
        return self._restricted(module, capture.Tile(0, 0, probs, window=window))

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None:
        self._layer += 1

    @property
    def layers_seen(self) -> int:
        """Attention layers seen since :meth:`begin` (from its `start`)."""
        return self._layer + 1

    def observe_tile(self, module: nn.Module, tile: capture.Tile, value: torch.Tensor) -> torch.Tensor | None:
        """The tile's rows of the attention output with the restricted heads' rows replaced;
        None where nothing is restricted in this layer (the attention function's own product)."""
        if not self._changes(module, tile):
            return None
        return torch.matmul(self._restricted(module, tile), value[:, :, tile.keys])

    def end_layer(self, module: nn.Module, tiles: capture.LayerTiles) -> None:
        pass

    def _changes(self, module: nn.Module, tile: capture.Tile) -> bool:
        if not self._active[self._layer]:
            return False
        # A sliding-window layer whose window is no wider than W never sees a dropped key.
        window = tile.window if tile.window is not None else getattr(module, "sliding_window", None)
        return not (isinstance(window, int) and 0 < window <= self.window)

    def _restricted(self, module: nn.Module, tile: capture.Tile) -> torch.Tensor:
        probs = tile.probs
        if not self._changes(module, tile):
            return probs
        first, off = self._first, self._off
        assert first is not None and off is not None  # set by begin(), which _active needs
        rows, heads, queries, keys = probs.shape
        device = probs.device
        i = torch.arange(tile.start, tile.start + queries, device=device)[:, None]  # (q, 1)
        j = torch.arange(tile.key_start, tile.key_start + keys, device=device)[None, :]  # (1, k)
        sink = (j[None] - first[:, None, None]) < self.sinks  # (R, 1, k)
        kept = sink | ((i - j) < self.window)[None]  # (R, q, k)
        # Rows that drop a key: those past the first S + W tokens of their sequence.
        drops = (i[None, :, 0] - first[:, None]) >= self.sinks + self.window  # (R, q)
        # Query head h reads key/value group h // (H / H_kv) (capture._per_query_head).
        groups = off.shape[-1]
        restricted = off[self._layer].repeat_interleave(heads // groups, dim=1)  # (R, H)
        replace = restricted[:, :, None, None] & drops[:, None, :, None]  # (R, H, q, 1)
        masked = probs * kept[:, None].to(probs.dtype)
        total = masked.sum(-1, keepdim=True)
        if capture.learned_sink():
            # The sink's logit stays in the restricted softmax: what the whole row left of 1
            # joins the kept weights' total (docs/metrics.md#learned-sinks).
            total = total + (1 - probs.sum(-1, keepdim=True)).clamp_min(0)
        # A row with no kept weight at all (a padding query of a left-padded row) stays as it was.
        renormalised = masked / torch.where(total > 0, total, torch.ones_like(total))
        return torch.where(replace & (total > 0), renormalised, probs)


def restriction_rows(
    sets: Sequence[Collection[Group]], layers: int | Sequence[int], groups: int, sequences: int
) -> np.ndarray:
    """The (attention layers, sets × sequences, groups) booleans of
    :meth:`StreamingRestriction.begin` for `sets` side by side, set-major (the batch repeated
    once per set). `layers`: how many, or the model's numbers of its attention layers in the
    order they run (a hybrid's: :func:`cache_layers`); a set names layers by those numbers."""
    numbers = list(range(layers) if isinstance(layers, int) else layers)
    place = {layer: i for i, layer in enumerate(numbers)}
    restricted = np.zeros((len(numbers), len(sets), groups), dtype=bool)
    for s, chosen in enumerate(sets):
        for layer, group in chosen:
            if layer not in place or not 0 <= group < groups:
                raise ValueError(
                    f"no key/value group {group} in layer {layer} (attention layers {_spans(numbers)} of {groups} groups)"
                )
            restricted[place[layer], s, group] = True
    return np.repeat(restricted, sequences, axis=1)


def _spans(numbers: Sequence[int]) -> str:
    """ "0 to 29", or the numbers themselves where they have gaps."""
    if list(numbers) == list(range(len(numbers))):
        return f"0 to {len(numbers) - 1}"
    return ", ".join(map(str, numbers))


@dataclass(frozen=True)
class SequenceLoss:
    """Summed next-token cross-entropy per (restriction set, sequence), in nats, the number of
    tokens scored per sequence (its real tokens but the first, or those asked for) and how many
    of them the model ranks first (its greedy prediction is the token)."""

    nats: np.ndarray  # (sets, sequences) float64
    tokens: np.ndarray  # (sequences,) int64
    correct: np.ndarray  # (sets, sequences) int64
    # With `positions` (bucket edges over query positions): the same sums per bucket.
    bucket_nats: np.ndarray | None = None  # (sets, sequences, buckets) float64
    bucket_tokens: np.ndarray | None = None  # (sequences, buckets) int64

    def per_token(self) -> np.ndarray:
        """Each set's mean loss per token over all the sequences (sets,)."""
        return self.nats.sum(1) / max(int(self.tokens.sum()), 1)


def restricted_lm_loss(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    sets: Sequence[Collection[Group]],
    sinks: int = DEFAULT_SINKS,
    window: int = DEFAULT_WINDOW,
    sets_per_pass: int = 1,
    attention_memory: int | None = None,
    scored: torch.Tensor | None = None,
    prefix_cache: bool = True,
    on_pass: Callable[[int, int], None] | None = None,
    positions: Sequence[int] | None = None,
) -> SequenceLoss:
    """The summed next-token loss of each sequence of `batch` (input_ids, attention_mask)
    under each restriction set of `sets` (an empty set: the model as it is), from a causal
    LM loaded with attnwh's attention function, and how many of the scored tokens are the
    model's greedy prediction. `scored` (the batch's shape, boolean) names the tokens scored
    (a needle probe's answer); by default every real token but the first. `sets_per_pass`
    sets run side by side in one forward pass (rows = set × sequence). `attention_memory`
    (bytes) computes long layers in tiles. A left-padded row is read with its real tokens
    moved to the front, so every sequence gives what it gives alone (positions 0..n−1),
    padded on either side. With `prefix_cache`, one unrestricted pass records the hidden
    states, and a set whose first restricted group is in layer l replays those below l and
    runs from l on (the same numbers: nothing below l differs); the unrestricted set is that
    pass. `on_pass(done, of)` is told after each restricted pass how many of the batch's are done.
    `positions` (ascending edges e_0 < e_1 < …) also sums each sequence's loss per bucket
    [e_b, e_{b+1}) of the query position i (0 = the sequence's first real token; query i
    predicts token i + 1): the loss past a window, where a restriction drops keys, apart
    from the loss before it."""
    if getattr(model.config, "_attn_implementation", None) != capture.ATTENTION_NAME:
        raise ValueError("restricted_lm_loss needs a model loaded with attnwh's attention function")
    config: Any = model.config
    numbers, groups = cache_layers(config), _layers_and_groups(config)[1]
    key_mask = batch["attention_mask"].bool()
    start = _first_real(key_mask)
    rolled = {k: _roll(v, start) if v.shape[:2] == key_mask.shape else v for k, v in batch.items()}
    key_mask = rolled["attention_mask"].bool()
    ids = rolled["input_ids"]
    sequences = ids.shape[0]
    # Position t predicts token t + 1 where both are real.
    targets = key_mask[:, 1:] & key_mask[:, :-1]
    if scored is not None:
        targets &= _roll(scored.bool(), start)[:, 1:]
    tokens = targets.sum(-1).cpu().numpy().astype(np.int64)
    observer = StreamingRestriction(sinks, window)
    inputs = sweep_inputs(model, rolled)
    nats = np.zeros((len(sets), sequences), dtype=np.float64)
    correct = np.zeros((len(sets), sequences), dtype=np.int64)
    edges = list(positions) if positions is not None else None
    if edges is not None and (len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])) or edges[0] < 0):
        raise ValueError(f"positions must be ascending edges from 0 up, two or more (got {edges})")
    buckets = len(edges) - 1 if edges is not None else 0
    bucket_nats = np.zeros((len(sets), sequences, buckets), dtype=np.float64)
    bucket_tokens = np.zeros((sequences, buckets), dtype=np.int64)
    if edges is not None:
        for b in range(buckets):
            bucket_tokens[:, b] = targets[:, edges[b] : edges[b + 1]].sum(-1).cpu().numpy()

    def score(logits: torch.Tensor, chunk: Sequence[int]) -> None:
        # A row at a time: on long inputs a row's log-probabilities over the vocabulary
        # are already large (4096 tokens × 49k words: 800 MB in float32).
        for row in range(len(chunk) * sequences):
            sequence, at = row % sequences, chunk[row // sequences]
            predicted, target = logits[row, :-1].float(), ids[sequence, 1:]
            losses = nn.functional.cross_entropy(predicted, target, reduction="none")
            weighted = losses.double() * targets[sequence].double()  # index i: query i predicting i + 1
            nats[at, sequence] = float(weighted.sum())
            correct[at, sequence] = int(((predicted.argmax(-1) == target) & targets[sequence]).sum())
            if edges is not None:
                for b in range(buckets):
                    bucket_nats[at, sequence, b] = float(weighted[edges[b] : edges[b + 1]].sum())

    num_layers = int(config.num_hidden_layers)
    cache = PrefixCache(model, config.model_type, num_layers) if prefix_cache else None
    prefix = cache if cache is not None and cache.layers is not None else None
    # Each set's first restricted layer (the model's number; num_layers for the empty set).
    starts = [min((layer for layer, _ in chosen), default=num_layers) if prefix else 0 for chosen in sets]
    with torch.inference_mode(), capture.attention_memory(attention_memory):
        reference = None
        if prefix is not None:
            unrestricted, reference = prefix.reference(lambda: model(**inputs).logits, sequences)
            empty = [i for i, start in enumerate(starts) if start == num_layers]
            for i in empty:
                score(unrestricted, [i])
            del unrestricted
        todo = [
            i for i in sorted(range(len(sets)), key=lambda i: (starts[i], i)) if starts[i] < num_layers or not prefix
        ]
        # A pass holds sets of one first layer only, so no copy is computed below where it must be.
        step = max(1, sets_per_pass)
        chunks = [c for lo in range(0, len(todo), step) for c in split_by(todo[lo : lo + step], starts)]
        for n, chunk in enumerate(chunks, 1):
            k, layer = len(chunk), starts[chunk[0]]
            first = bisect.bisect_left(numbers, layer)  # the first attention layer the pass runs
            chosen = [sets[i] for i in chunk]
            observer.begin(key_mask.repeat(k, 1), restriction_rows(chosen, numbers, groups, sequences), first)
            repeated = {name: _repeated(t, k) for name, t in inputs.items()}
            stubs = reference.stubs(layer, k) if reference is not None else []
            with capture.observing(observer), replaying(stubs):
                logits = model(**repeated).logits
            if observer.layers_seen != len(numbers):
                raise RuntimeError(f"saw {observer.layers_seen} attention layers, expected {len(numbers)}")
            score(logits, chunk)
            if on_pass:
                on_pass(n, len(chunks))
    if edges is None:
        return SequenceLoss(nats, tokens, correct)
    return SequenceLoss(nats, tokens, correct, bucket_nats, bucket_tokens)


def _layers_and_groups(config: Any) -> tuple[int, int]:
    heads = int(config.num_attention_heads)
    return int(config.num_hidden_layers), int(getattr(config, "num_key_value_heads", None) or heads)


def _repeated(t: Any, k: int) -> Any:
    if isinstance(t, torch.Tensor) and k > 1:
        return t.repeat(k, *[1] * (t.dim() - 1))
    return t


def _first_real(key_mask: torch.Tensor) -> torch.Tensor:
    """(B,) each row's first real position; raises ValueError where a row's real tokens are
    not side by side (padding inside a row cannot be moved out of the way)."""
    start = key_mask.int().argmax(-1)
    offset = torch.arange(key_mask.shape[1], device=key_mask.device) - start[:, None]
    if not torch.equal((offset >= 0) & (offset < key_mask.sum(-1, keepdim=True)), key_mask):
        raise ValueError("each row's real tokens must be side by side (padding before or after them)")
    return start


def _roll(t: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """(B, S, …) with row b's positions moved `start[b]` to the left (cyclically)."""
    index = (torch.arange(t.shape[1], device=t.device) + start[:, None]) % t.shape[1]
    return t.gather(1, index.view(*index.shape, *(1,) * (t.dim() - 2)).expand_as(t))


# ---------------------------------------------------------------- ranking and plans

# Measures the loss of each restriction set given (`restricted_lm_loss` over some data).
Measure = Callable[[Sequence[Collection[Group]]], SequenceLoss]


def loss_measure(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    sinks: int = DEFAULT_SINKS,
    window: int = DEFAULT_WINDOW,
    sets_per_pass: int = 1,
    attention_memory: int | None = None,
    scored: torch.Tensor | None = None,
) -> Measure:
    """:func:`restricted_lm_loss` on `batch` with these settings, as a :data:`Measure`."""

    def measure(sets: Sequence[Collection[Group]]) -> SequenceLoss:
        return restricted_lm_loss(model, batch, sets, sinks, window, sets_per_pass, attention_memory, scored)

    return measure


@dataclass(frozen=True)
class Restricted:
    """The loss with a set of groups restricted together: `loss` in nats per token over all
    sequences, `increase` over the unrestricted loss, `nats` per sequence (for paired tests)."""

    groups: tuple[Group, ...]
    loss: float
    increase: float
    nats: np.ndarray


@dataclass(frozen=True)
class Ranking:
    """Every key/value group restricted alone, least harmed first (ties by layer, group)."""

    baseline: Restricted  # nothing restricted
    groups: list[Restricted]

    def order(self) -> list[Group]:
        return [r.groups[0] for r in self.groups]


def rank_groups(measure: Measure, layers: int | Sequence[int], groups: int) -> Ranking:
    """The loss change of restricting each (layer, group) alone, measured in one call of
    `measure` with the unrestricted model first; `layers`: how many, or which (a hybrid's
    attention layers, :func:`cache_layers`)."""
    numbers = range(layers) if isinstance(layers, int) else layers
    singles: list[Collection[Group]] = [{(layer, group)} for layer in numbers for group in range(groups)]
    loss = measure([set(), *singles])
    baseline = _restricted((), loss, 0, None)
    ranked = [_restricted(tuple(single), loss, s + 1, baseline.loss) for s, single in enumerate(singles)]
    ranked.sort(key=lambda r: (r.increase, r.groups))
    return Ranking(baseline, ranked)


def plan(measure: Measure, ranking: Ranking, ks: Sequence[int]) -> list[Restricted]:
    """For each k of `ks`, the k least harmed groups of `ranking` restricted together, with
    the loss measured with exactly that set (not summed from the single restrictions: heads
    compensate for one another, or fail together); increases are over the ranking's
    unrestricted loss. k = 0 is the unrestricted model, measured like the others."""
    order = ranking.order()
    if any(k < 0 or k > len(order) for k in ks):
        raise ValueError(f"k must be between 0 and {len(order)} (the model's key/value groups)")
    sets = [tuple(sorted(order[:k])) for k in ks]
    loss = measure([set(chosen) for chosen in sets])
    return [_restricted(chosen, loss, s, ranking.baseline.loss) for s, chosen in enumerate(sets)]


def _restricted(groups: tuple[Group, ...], loss: SequenceLoss, row: int, baseline: float | None) -> Restricted:
    per_token = float(loss.per_token()[row])
    return Restricted(groups, per_token, per_token - (per_token if baseline is None else baseline), loss.nats[row])


# ---------------------------------------------------------------- KV-cache memory


def _value_bytes(config: Any, dtype: torch.dtype | str | None) -> int:
    """Bytes per cached value: `dtype`, else the config's (float32 when it names none)."""
    chosen = dtype if dtype is not None else getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if chosen is None:
        chosen = torch.float32
    if isinstance(chosen, str):
        chosen = getattr(torch, chosen.removeprefix("torch."), None)
        if not isinstance(chosen, torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}")
    return torch.empty((), dtype=chosen).element_size()


def _head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


# What a config's layer types call a layer that keeps a key/value cache of every token it sees
# (a hybrid layer: attention beside a state-space block, as Falcon-H1's and Zamba 2's).
_CACHING = ("full_attention", "sliding_attention", "chunked_attention", "attention", "hybrid")


def cache_layers(config: Any) -> list[int]:
    """The layers that keep a key/value cache: every layer, or a hybrid's attention layers
    (the layers a restriction can restrict, in the order their attention runs)."""
    return [layer for layer, tokens in enumerate(_cached_tokens(config, 1)) if tokens > 0]


def _cached_tokens(config: Any, context: int) -> list[int]:
    """Tokens each layer's key/value cache holds at `context`: all of them; a sliding-window
    layer's window; a chunked layer's chunk (Llama 4); none on a hybrid's layers of other kinds
    (linear attention and state-space layers keep a state of fixed size, not a cache per token)."""
    layers = int(config.num_hidden_layers)
    types = layer_types(config, layers)
    window = getattr(config, "sliding_window", None)
    chunk = getattr(config, "attention_chunk_size", None)
    cached = []
    for layer in range(layers):
        kind = types[layer] if types is not None else ("sliding_attention" if window else "full_attention")
        if kind not in _CACHING:
            cached.append(0)
        elif kind == "sliding_attention" and window:
            cached.append(min(context, int(window)))
        elif kind == "chunked_attention" and chunk:
            cached.append(min(context, int(chunk)))
        else:
            cached.append(context)
    return cached


def _latent(config: Any) -> int | None:
    """Values per token of a latent-attention layer's cache (DeepSeek-V2/V3, MiniCPM3: the
    compressed key/value latent and the rotary part of the key, shared by every head), or None
    where keys and values are cached per key/value head."""
    rank = getattr(config, "kv_lora_rank", None)
    return int(rank) + int(getattr(config, "qk_rope_head_dim", 0) or 0) if rank else None


def kv_cache_bytes(config: Any, context: int, dtype: torch.dtype | str | None = None) -> int:
    """Bytes of the key/value cache of one sequence of `context` tokens for a transformers
    config: Σ_layers H_kv · tokens cached · 2 (keys and values) · d_head · bytes per value
    (`dtype`, else the config's). A sliding-window layer caches only its window, a chunked
    layer its chunk, a hybrid's other layers nothing per token; a latent-attention layer caches
    one latent of kv_lora_rank + qk_rope_head_dim values per token for all its heads."""
    _, groups = _layers_and_groups(config)
    latent = _latent(config)
    per_token = (latent if latent is not None else groups * 2 * _head_dim(config)) * _value_bytes(config, dtype)
    return sum(tokens * per_token for tokens in _cached_tokens(config, context))


def kv_bytes_saved(
    config: Any,
    restricted: Iterable[Group],
    context: int,
    sinks: int = DEFAULT_SINKS,
    window: int = DEFAULT_WINDOW,
    dtype: torch.dtype | str | None = None,
) -> int:
    """Bytes of key/value cache one sequence of `context` tokens no longer needs when the
    (layer, kv_group) pairs of `restricted` keep only S sinks and W recent tokens:
    Σ_layers |R_l| · (n − S − W) · 2 · d_head · bytes per value, with n the tokens the layer
    caches (`context`, or a sliding-window layer's window) and nothing saved where n ≤ S + W.
    A latent-attention layer's one latent serves every head: it is saved, (n − S − W) ·
    latent values, only where every group of the layer is restricted."""
    _, groups = _layers_and_groups(config)
    chosen = set(restricted)
    cached = _cached_tokens(config, context)
    attention = set(cache_layers(config))
    for layer, group in chosen:
        if not (layer in attention and 0 <= group < groups):
            raise ValueError(
                f"no key/value group {group} in layer {layer} (attention layers {_spans(cache_layers(config))} "
                f"of {groups} groups)"
            )
    value = _value_bytes(config, dtype)
    latent = _latent(config)
    if latent is not None:
        whole = [layer for layer in sorted(attention) if all((layer, g) in chosen for g in range(groups))]
        return sum(max(0, cached[layer] - sinks - window) * latent * value for layer in whole)
    per_token = 2 * _head_dim(config) * value
    return sum(max(0, cached[layer] - sinks - window) * per_token for layer, _ in chosen)
