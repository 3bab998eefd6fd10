"""Value zeroing (Mohebbi et al. 2023): how much each token's value vector shapes every
token's output of one layer, the whole layer included (attention, residual, LayerNorm,
feed-forward).

For layer l and token j, token j's value vector is set to zero (in every head, or in one
head h for the per-head variant) while queries and keys stay as they are, the layer is
computed again, and each token's output ŷ_i^{¬j} is compared with the unchanged ŷ_i:
C[i, j] = 1 − cos(ŷ_i^{¬j}, ŷ_i), each row then normalised to sum to 1 over the real keys.

How it is computed here, fast and for every family attnwh reads:

- One reference pass of the model keeps, per layer, what the layer module was called with
  (its input hidden states, the prepared mask, position embeddings, …) and what it returned.
  Zeroing at layer l changes nothing below it, so each layer is then recomputed alone from
  its stored input: n recomputations of one layer per layer instead of n passes of the model.
- All (example, token) variants, (example, head, token) for the per-head variant, are rows of
  one batch, cut into chunks of at most `max_rows` rows. Every batch-shaped tensor among the
  layer's arguments is gathered the same way; tensors shared by the whole batch (DeBERTa's
  relative embeddings, ModernBERT's rotary tables) are passed as they are. Which is which,
  and which dimensions run over the tokens, is learnt once per model from two probe passes
  of different batch sizes and lengths, not guessed from shapes (DeBERTa's relative
  embedding table has as many rows as a batch may have).
- output_i = Σ_k A[i, k] v_k, so a zero v_j is exactly a zero column j of the attention
  weights after the softmax, not renormalised. That is done through attnwh's attention
  observer, which every family passes through (the registered attention function, or
  `inline.py` for DeBERTa and MPNet), so no family's value projection needs to be found.

On a CPU the batched rows cost as many operations as the one-variant-at-a-time procedure;
what makes it cheaper is work left out: each chunk is cut to its longest example (right
padding never changes a real token's output), rows are ordered by length so that chunks
waste little, and the query, key and value projections, unchanged by the zeroing, come
from the reference pass. On a GPU, batching also replaces thousands of small launches.

ALBERT calls one shared layer module at every depth; its calls are told apart by their order,
so it is measured like the others.

Decoders (causal language models) are measured the same way; what differs:

- The reference pass runs without a key/value cache (each recomputation would append its
  keys to it).
- Each layer's own arguments are replayed as the probes found them: the causal mask (a 4-D
  mask, another one on sliding-window layers), the rotary tables (Gemma's local and global
  layers each get their own), GPT-2's positional mask argument, fused projections (Phi-3's
  `qkv_proj`, GPT-2's `c_attn`).
- A key the zeroed row cannot see (a later one, or one outside a sliding window) had weight
  exactly 0 there, so zeroing it changes nothing: C is set to exactly 0 wherever no zeroed
  head gave the key a nonzero weight, not left at the rounding noise of a recomputation in
  another batch shape (true of encoders' padding and ModernBERT's windows too).
- Grouped-query attention: the observer sees maps per query head, so "head" zeroes the value
  as query head h reads it; "layer" zeroes it for every head, which is zeroing the value
  projection's output at token j.
- Left padding: a row's real tokens are moved to the front before anything is computed (and
  its matrix moved back), so a model with absolute positions (GPT-2) gives each row what it
  gives alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attnwh.errors import ModelError
from attnwh.ingest.measures.ablation import encoder_layers, qkv_projections, replaying
from attnwh.ingest.model import capture
from attnwh.ingest.model.loading import LoadedModel, forward_inputs, require_every_layer

VARIANTS = ("layer", "head")
VZ_COLUMNS = ("vz_to_cls", "vz_to_sep", "vz_to_punct", "vz_to_self", "vz_to_prev", "vz_to_next")

# A place in a layer call's (args, kwargs): ("args", 0), ("kwargs", "position_embeddings", 1), …
Place = tuple[object, ...]


def layer_modules(model: nn.Module) -> list[nn.Module] | None:
    """The modules called once per depth, each computing one attention layer: the encoder's
    layer list, or ALBERT's shared layers (called again at every depth); None if not found."""
    layers = encoder_layers(model)
    if layers is not None:
        return list(layers)
    groups = getattr(getattr(model.base_model, "encoder", None), "albert_layer_groups", None)
    if isinstance(groups, nn.ModuleList):
        return [layer for group in groups for layer in getattr(group, "albert_layers", [])]
    return None


@dataclass
class _Call:
    """One layer call of a reference pass: its arguments and its output hidden states."""

    module: nn.Module  # ALBERT's calls share one
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: torch.Tensor  # (B, S, D)
    # The layer's query, key and value projections with their outputs (B, S, ·) in this call;
    # empty where they are not known.
    projections: list[tuple[nn.Module, torch.Tensor]]


@dataclass(frozen=True)
class _Places:
    """What one layer call's tensors are, by their place among its arguments."""

    batch: frozenset[Place]  # one row per example
    sequence: dict[Place, tuple[int, ...]]  # the dimensions that run over the tokens
    known: frozenset[Place]  # every place the probes saw a tensor at


class _ZeroColumns:
    """Attention observer that zeroes, in row r of the batch, key column `token[r]` of every
    head (`head` None) or of head `head[r]` only; the weights are not renormalised, so the
    layer computes exactly as if that token's value vector were zero. Heads are query heads:
    under grouped-query attention the maps arrive per query head (keys and values repeated
    for each head of a group), so the per-head variant zeroes the value as one query head
    reads it, not for the whole key/value group.

    `touched` (rows, queries) says which query rows had a nonzero weight on the zeroed column:
    only those can change. The others (later keys on a causal map, keys outside a sliding
    window) get exactly C = 0, not the rounding noise of a recomputation in another batch
    shape, which the row normalisation would magnify."""

    def __init__(self, token: torch.Tensor, head: torch.Tensor | None) -> None:
        self.token = token
        self.head = head
        self.calls = 0
        self.touched: torch.Tensor | None = None

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        rows, heads, _, keys = probs.shape
        index = torch.arange(rows, device=probs.device)
        column = probs[index, :, :, self.token]  # (rows, H, queries)
        if self.head is not None:
            column = column[index, self.head]  # (rows, queries): head[r]'s only
        self.touched = (column != 0).any(1) if column.dim() == 3 else column != 0
        keep = probs.new_ones((rows, heads if self.head is not None else 1, 1, keys))
        head = self.head if self.head is not None else torch.zeros_like(self.token)
        keep[index, head, 0, self.token] = 0
        return probs * keep


class ValueZeroing:
    """Value-zeroing context-mixing matrices of a model (encoder or decoder), and their shares
    to the same targets as the attention statistics (:data:`VZ_COLUMNS`), batch by batch.

    `variant` "layer" zeroes a token's value in all heads at once (Mohebbi et al.); "head"
    zeroes it in one head at a time, which gives one matrix per head. `max_rows` bounds how
    many zeroed variants one recomputation holds: memory grows with about
    max_rows × (heads × S² + S × intermediate size) values, besides what the reference pass
    keeps of the batch (each layer's input, output and query, key and value projections).
    `memory` (bytes), when given, lowers that bound for long inputs so that one
    recomputation's attention maps fit it (a decoder's inputs may run to thousands of
    tokens); the results do not depend on it.
    """

    def __init__(self, encoder: LoadedModel, variant: str, max_rows: int = 256, memory: int | None = None) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown value-zeroing variant {variant!r}; choose one of {', '.join(VARIANTS)}")
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        require_every_layer(encoder, "value zeroing")
        modules = layer_modules(encoder.model)
        if not modules:
            raise ModelError(
                f"value zeroing cannot recompute the layers of {encoder.name} one by one: "
                f"no per-depth layer modules found in {type(encoder.model).__name__}"
            )
        self.encoder = encoder
        self.variant = variant
        self.max_rows = max_rows
        self.memory = memory
        self._modules = modules
        found = qkv_projections(nn.ModuleList(modules), encoder.family)
        self._projections = dict(zip(modules, found, strict=True)) if found is not None else {}
        self._places = self._probe_places()

    # ------------------------------------------------------------------ reference pass

    def _reference(self, inputs: dict[str, torch.Tensor]) -> list[_Call]:
        """Run the model once, keeping every layer call's arguments and output in call order."""
        calls: list[tuple[nn.Module, tuple[Any, ...], dict[str, Any]]] = []
        outputs: list[torch.Tensor] = []
        projected: dict[nn.Module, list[torch.Tensor]] = {}

        def keep_inputs(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            # Inside a caller's `capture.attention_memory` block the mask may be a RowMask,
            # built for tiles of the whole batch; the recomputation needs it as a tensor.
            args = tuple(_whole(a) for a in args)
            calls.append((module, args, {k: _whole(v) for k, v in kwargs.items()}))

        def keep_output(module: nn.Module, args: tuple[Any, ...], output: object) -> None:
            outputs.append(_hidden(output))

        def keep_projection(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            projected.setdefault(module, []).append(output)

        hooks = [m.register_forward_pre_hook(keep_inputs, with_kwargs=True) for m in self._modules]
        hooks += [m.register_forward_hook(keep_output) for m in self._modules]
        hooks += [p.register_forward_hook(keep_projection) for ps in self._projections.values() for p in ps]
        try:
            # A decoder without a cache: the recomputations would append to the reference's.
            self.encoder.model(**inputs, **({"use_cache": False} if self.encoder.causal else {}))
        finally:
            for hook in hooks:
                hook.remove()
        if len(calls) != self.encoder.num_layers or len(outputs) != len(calls):
            raise ModelError(
                f"value zeroing saw {len(calls)} layer calls of {self.encoder.name}, "
                f"expected {self.encoder.num_layers}: its layers cannot be recomputed one by one"
            )
        result = []
        occurrence: dict[nn.Module, int] = {}
        counts = {m: sum(c[0] is m for c in calls) for m in self._modules}
        for (module, args, kwargs), out in zip(calls, outputs, strict=True):
            k = occurrence[module] = occurrence.get(module, -1) + 1
            linears = self._projections.get(module, ())
            stored = [(p, projected[p][k]) for p in linears if len(projected.get(p, ())) == counts[module]]
            # A projection called other than once per layer call, or not shaped (B, S, ·),
            # cannot stand for its recomputation: then the layer computes them all itself.
            fits = len(stored) == len(linears) and all(t.shape[:2] == out.shape[:2] for _, t in stored)
            result.append(_Call(module, args, kwargs, out, stored if fits else []))
        return result

    @torch.inference_mode()
    def _probe_places(self) -> list[_Places]:
        """Per layer call, which tensors among its arguments hold one row per example and which
        of their dimensions run over the tokens: those that follow the batch size and the
        sequence length from one padded probe (2 rows) to another (3 rows, longer). A shape
        test on the real batch alone would take a shared table for a batch-shaped tensor
        whenever its first dimension happens to equal the batch size."""
        tokenizer, device = self.encoder.tokenizer, self.encoder.device
        seen: list[list[dict[Place, tuple[int, ...]]]] = []
        lengths = []
        for texts in (["a b c", "a"], ["a b c d e f g", "a", "a b"]):
            encoded = tokenizer(texts, padding=True, return_tensors="pt")
            batch = {k: v.to(device) for k, v in encoded.items()}
            lengths.append(batch["input_ids"].shape[1])
            calls = self._reference(forward_inputs(self.encoder.model, batch))
            seen.append([{p: tuple(t.shape) for p, t in _tensors(c.args, c.kwargs)} for c in calls])
        s2, s3 = lengths
        places = []
        for two, three in zip(*seen, strict=True):
            paired = {p: (shape, three[p]) for p, shape in two.items() if p in three and len(three[p]) == len(shape)}
            batch_paths = frozenset(p for p, (a, b) in paired.items() if a and a[0] == 2 and b[0] == 3)
            sequence = {
                p: tuple(d for d in range(p in batch_paths, len(a)) if a[d] == s2 and b[d] == s3)
                for p, (a, b) in paired.items()
            }
            places.append(
                _Places(
                    batch=batch_paths,
                    # Equal probe lengths would tell no token dimension from any other.
                    sequence={p: dims for p, dims in sequence.items() if dims} if s2 != s3 else {},
                    known=frozenset(two) | frozenset(three),
                )
            )
        return places

    # ------------------------------------------------------------------ the measure

    @torch.inference_mode()
    def matrices(self, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Per layer, the normalised matrix C in float32 on the model's device: (B, S, S) for
        "layer", (B, H, S, S) for "head"; rows are queries i, columns the zeroed tokens j.
        Rows of padding queries and columns of padding keys are 0; on a decoder so is every
        key a row cannot see (j > i, or outside a sliding window).

        Each row's real tokens must be contiguous; padding may come after them (attnwh's
        batches) or before them (left padding, as decoders' tokenizers often pad): a
        left-padded row is computed with its real tokens moved to the front and its matrix
        moved back, so every row gives what it gives alone, whatever the positions a model
        would give padded tokens."""
        key_mask = batch["attention_mask"].bool()
        start = _first_real(key_mask)
        if not bool(start.any()):
            return self._matrices(batch)
        rolled = {k: _roll(v, start) if v.shape[:2] == key_mask.shape else v for k, v in batch.items()}
        return [_roll_matrix(c, start) for c in self._matrices(rolled)]

    def _matrices(self, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """:meth:`matrices` of a batch whose real tokens come first in every row."""
        inputs = forward_inputs(self.encoder.model, batch)
        key_mask = batch["attention_mask"].bool()
        B, S = key_mask.shape
        H = self.encoder.num_heads
        real = key_mask.float()
        lengths = key_mask.sum(-1)
        # One row of the recomputation per zeroed (example, [head,] token).
        if self.variant == "layer":
            example, token = key_mask.nonzero(as_tuple=True)
            head: torch.Tensor | None = None
        else:
            example, head, token = key_mask[:, None, :].expand(B, H, S).nonzero(as_tuple=True)
        # Rows of examples of similar length side by side, so that cutting a chunk to its
        # longest example (below) leaves little padding whatever the batch's order.
        order = torch.argsort(lengths[example], stable=True)
        example, token = example[order], token[order]
        if head is not None:
            head = head[order]
        row_lengths = lengths[example].tolist()  # ascending; read once, not once per chunk and layer
        size = self.max_rows
        if self.memory is not None and row_lengths:
            longest = row_lengths[-1]
            size = max(1, min(size, self.memory // capture.map_bytes(1, H, longest, longest)))
        chunks = _chunks(row_lengths, size)
        result = []
        for depth, call in enumerate(self._reference(inputs)):
            places = self._places[depth]
            # Right padding changes nothing for the real tokens, so a chunk is cut to its
            # longest example: with rows grouped by example, most padding is never computed.
            # Not where a tensor's dimensions are unknown (then nothing may be cut).
            croppable = all(p in places.known for p, _ in _tensors(call.args, call.kwargs))
            shape = (B, S, S) if head is None else (B, H, S, S)
            c = torch.zeros(shape, dtype=torch.float32, device=key_mask.device)
            for rows in chunks:
                ex, tok = example[rows], token[rows]
                hd = head[rows] if head is not None else None
                m = row_lengths[rows.stop - 1] if croppable else S
                zeroing = _ZeroColumns(tok, hd)
                args, kwargs = _gathered(call, places, ex, B, m)
                # Queries, keys and values do not change: their projections come from the
                # reference pass (a quarter of a BERT layer's work), not computed again per row.
                stubs = [(p, stored.index_select(0, ex).narrow(1, 0, m)) for p, stored in call.projections]
                with capture.observing(zeroing), replaying(stubs):
                    changed = _hidden(call.module(*args, **kwargs))
                if zeroing.calls != 1:
                    raise RuntimeError(
                        f"layer {depth}: the attention observer was called {zeroing.calls} times, not once"
                    )
                distance = _cosine_distance(changed, call.output[ex, :m])  # (rows, m): one per query i
                if zeroing.touched is not None:
                    distance = distance * zeroing.touched
                if hd is None:
                    c[ex, :m, tok] = distance
                else:
                    c[ex, hd, :m, tok] = distance
            c = c * (real[:, :, None] if head is None else real[:, None, :, None])
            result.append(c / c.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny))
        return result

    @torch.inference_mode()
    def run(
        self,
        batch: dict[str, torch.Tensor],
        key_mask: torch.Tensor,
        cls: torch.Tensor,
        sep: torch.Tensor,
        punct: torch.Tensor,
    ) -> np.ndarray:
        """The :data:`VZ_COLUMNS` shares, (B, L, 1, 6) for "layer" and (B, L, H, 6) for "head",
        in float32: each the mean over the example's real query rows of a per-row share of C,
        as :class:`statistics.HeadStatistics` reduces attention weights, so the same head can be
        read through its weights and through value zeroing with one query. On a decoder `cls`
        marks the first token and `sep` nothing (vz_to_sep is then 0, as vz_to_next is: the
        warehouse stores both as NULL, `loop.StatisticsCapture`)."""
        layers = [m if m.dim() == 4 else m[:, None] for m in self.matrices(batch)]  # (B, H', S, S)
        return torch.stack([_shares(m, key_mask, cls, sep, punct) for m in layers], dim=1).cpu().numpy()


def _shares(
    c: torch.Tensor, key_mask: torch.Tensor, cls: torch.Tensor, sep: torch.Tensor, punct: torch.Tensor
) -> torch.Tensor:
    """(B, H', 6): :data:`VZ_COLUMNS` from matrices (B, H', S, S), with the conventions of
    `statistics.py`: all [SEP] columns summed, a missing or padding neighbour counts 0, and
    the mean is over the n real rows (weight 1/n, padding rows 0)."""
    real = key_mask.float()
    row_weight = real / real.sum(-1, keepdim=True)
    targets = torch.stack([cls, sep, punct], dim=-1).float()[:, None]  # (B, 1, S, 3)
    shares = c @ targets.expand(-1, c.shape[1], -1, -1)  # (B, H', S, 3)
    prev = c.diagonal(offset=-1, dim1=-2, dim2=-1)
    nxt = c.diagonal(offset=1, dim1=-2, dim2=-1) * real[:, None, 1:]
    per_row = torch.stack(
        [
            *shares.unbind(-1),
            c.diagonal(dim1=-2, dim2=-1),
            nn.functional.pad(prev, (1, 0)),
            nn.functional.pad(nxt, (0, 1)),
        ],
        dim=-1,
    )  # (B, H', S, 6)
    return torch.einsum("bhsk,bs->bhk", per_row, row_weight)


def _whole(arg: object) -> object:
    """A layer argument, a :class:`capture.RowMask` as the whole mask it stands for."""
    return arg.whole() if isinstance(arg, capture.RowMask) else arg


def _first_real(key_mask: torch.Tensor) -> torch.Tensor:
    """(B,) each row's first real position; raises ValueError where a row's real tokens are
    not contiguous (padding inside a row cannot be moved out of the way)."""
    start = key_mask.int().argmax(-1)
    positions = torch.arange(key_mask.shape[1], device=key_mask.device)
    offset = positions - start[:, None]
    contiguous = (offset >= 0) & (offset < key_mask.sum(-1, keepdim=True))
    if not torch.equal(contiguous, key_mask):
        raise ValueError("value zeroing needs each row's real tokens side by side (padding before or after them)")
    return start


def _roll(t: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """(B, S, …) with row b's positions moved `start[b]` to the left (cyclically)."""
    S = t.shape[1]
    index = (torch.arange(S, device=t.device) + start[:, None]) % S  # (B, S)
    return t.gather(1, index.view(*index.shape, *(1,) * (t.dim() - 2)).expand_as(t))


def _roll_matrix(c: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """A matrix (B, [H,] S, S) of rolled rows back in the batch's positions."""
    S = c.shape[-1]
    index = (torch.arange(S, device=c.device) - start[:, None]) % S  # (B, S): rolled place of each position
    b = torch.arange(c.shape[0], device=c.device)
    if c.dim() == 3:
        return c[b[:, None, None], index[:, :, None], index[:, None, :]]
    h = torch.arange(c.shape[1], device=c.device)
    return c[b[:, None, None, None], h[None, :, None, None], index[:, None, :, None], index[:, None, None, :]]


def _hidden(output: object) -> torch.Tensor:
    """A layer's output hidden states: the tensor itself (BERT, ModernBERT in transformers 5)
    or the first item of a tuple (DeBERTa's (hidden, None), MPNet's (hidden,))."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(f"cannot read hidden states from a layer output of type {type(output).__name__}")


def _cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 − cos(a, b) over the last dimension, in float32 (a bfloat16 model's outputs too).

    Computed as ||a/||a|| − b/||b||||² / 2, which is the same number: 1 − (a·b)/(||a|| ||b||)
    loses everything below float32's resolution near 1 (about 1e-7), and a token that moves
    the outputs little gives distances of that order, which the row normalisation then
    magnifies. A zero vector counts as the zero direction rather than NaN."""
    tiny = torch.finfo(torch.float32).tiny
    a, b = a.float(), b.float()
    unit_a = a / a.norm(dim=-1, keepdim=True).clamp_min(tiny)
    unit_b = b / b.norm(dim=-1, keepdim=True).clamp_min(tiny)
    return (unit_a - unit_b).square().sum(-1) / 2


def _chunks(row_lengths: list[int], size: int) -> list[slice]:
    """Consecutive rows (lengths ascending) in chunks of at most `size`. A chunk is computed
    at the length of its longest row, so it also ends where the next row is over 10% longer
    than its first, once it holds a quarter of `size`: plain cuts of 256 rows of an SST-2
    batch compute 25% more tokens than the rows need, these about 3%."""
    chunks, start = [], 0
    for i, n in enumerate(row_lengths):
        full = i - start >= size
        longer = n > 1.1 * row_lengths[start] and i - start >= size / 4
        if i > start and (full or longer):
            chunks.append(slice(start, i))
            start = i
    if start < len(row_lengths):
        chunks.append(slice(start, len(row_lengths)))
    return chunks


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[tuple[Place, torch.Tensor]]:
    """Every tensor among a call's arguments with its place, through tuples, lists and dicts."""

    def walk(obj: object, path: Place) -> Iterator[tuple[Place, torch.Tensor]]:
        if isinstance(obj, torch.Tensor):
            yield path, obj
        elif isinstance(obj, (tuple, list)):
            for i, item in enumerate(obj):
                yield from walk(item, (*path, i))
        elif isinstance(obj, dict):
            for key, item in obj.items():
                yield from walk(item, (*path, key))

    yield from walk(args, ("args",))
    yield from walk(kwargs, ("kwargs",))


def _gathered(
    call: _Call, places: _Places, rows: torch.Tensor, batch_size: int, length: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments for the recomputation's rows, cut to the first `length` tokens:
    each batch-shaped tensor indexed by `rows` (the example each row zeroes a token of),
    everything else as it was. A tensor the probes never saw there is taken as batch-shaped
    when its first dimension is the batch's (and then `length` must be the whole sequence)."""

    def rebuild(obj: Any, path: Place) -> Any:
        if isinstance(obj, torch.Tensor):
            for dim in places.sequence.get(path, ()):
                obj = obj.narrow(dim, 0, length)
            unknown = path not in places.known and obj.dim() > 0 and obj.shape[0] == batch_size
            if path in places.batch or unknown:
                if obj.shape[0] != batch_size:
                    raise RuntimeError(f"layer argument {path} has {obj.shape[0]} rows, the batch {batch_size}")
                return obj.index_select(0, rows)
            return obj
        if isinstance(obj, tuple):
            return tuple(rebuild(item, (*path, i)) for i, item in enumerate(obj))
        if isinstance(obj, list):
            return [rebuild(item, (*path, i)) for i, item in enumerate(obj)]
        if isinstance(obj, dict):
            return {key: rebuild(item, (*path, key)) for key, item in obj.items()}
        return obj

    return rebuild(call.args, ("args",)), rebuild(call.kwargs, ("kwargs",))
