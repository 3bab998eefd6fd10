"""Disabling attention heads and whole layers, exactly and fast.

A disabled head is changed inside attnwh's registered attention function
(:mod:`attention`), between the softmax and the value sum:

- ``uniform`` (Kovaleva et al.): its weights become 1/n over the n real keys, for every query
  row, so it outputs the mean of its value vectors (a learned sink, where the head has one,
  gets no share: docs/metrics.md#learned-sinks);
- ``zero`` (Michel et al.): its weights become 0, so its output is zero (the output
  projection's bias, shared by all heads, stays).

Disabling a head in layer l cannot change layers 0..l-1. :class:`AblationSweep` therefore
runs the model once with nothing disabled, keeping every layer's output, and runs each
configuration from its first disabled layer on: the layers below return their stored output
instead of computing it, and the first disabled layer takes its query, key and value
projections (a quarter of a layer's work) from that pass too. The same operations run on the
same tensors as in a full pass, so the logits are bit for bit those of the naive sweep.
Several configurations with the same first layer can share one pass, each on its own copy of
the batch (`configs_per_pass`; worth it on a GPU). ALBERT shares one layer module across
depths, so its configurations always run the whole model.

Gradient importance (Michel et al. 2019) puts a gate ξ_h = 1 on each head's output and
measures E_x |∂L(x)/∂ξ_h|; with one gate per example, a single backward pass gives every
example's gradient.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from attnwh.ingest.model import capture
from attnwh.ingest.model.families import facts_of
from attnwh.ingest.model.loading import LoadedModel, forward_inputs
from attnwh.ingest.model.reading import find_layers

MODES = ("uniform", "zero")


@dataclass(frozen=True)
class Configuration:
    """A set of disabled heads. `kind` is baseline, head, layer, helpful (every head whose
    own disabling helped), top_k (the k heads whose own disabling helped most), sinks
    (every sink head of the model, from a statistics run on the same examples) or set (a set
    the user asked for: the top heads of a role, random heads, a list; `label` names it,
    `draw` numbers a random set's draws, `roles_run` is the head-roles run a top set was
    ranked in)."""

    kind: str
    heads: tuple[tuple[int, int], ...]  # (layer, head) pairs, sorted
    layer: int | None = None
    head: int | None = None
    k: int | None = None
    label: str | None = None
    draw: int | None = None
    roles_run: int | None = None

    def start(self, num_layers: int) -> int:
        """The first layer the configuration changes (num_layers when it changes none)."""
        return min((layer for layer, _ in self.heads), default=num_layers)

    @property
    def disabled(self) -> str:
        """The heads as ablation_configs.disabled writes them: 'layer-head', comma-separated."""
        return ",".join(f"{layer}-{head}" for layer, head in self.heads)


def sweep_configurations(layers: int | Sequence[int], num_heads: int) -> list[Configuration]:
    """The baseline, every single head (layer-major) and every whole layer; `layers`: how
    many, or which (a hybrid model's attention layers, by the model's own numbers)."""
    numbers = range(layers) if isinstance(layers, int) else layers
    configs = [Configuration("baseline", ())]
    configs += [Configuration("head", ((l, h),), l, h) for l in numbers for h in range(num_heads)]
    configs += [Configuration("layer", tuple((l, h) for h in range(num_heads)), l) for l in numbers]
    return configs


def combination(kind: str, heads: Sequence[tuple[int, int]], k: int | None = None) -> Configuration:
    return Configuration(kind, tuple(sorted(heads)), k=k)


class HeadDisabler:
    """Attention observer that replaces the probabilities of disabled heads, on whole maps
    or a tile of query rows at a time (a `capture.TileObserver`: long inputs).

    `disabled` is (layers, rows, heads): which heads are off for each row of the batch, so
    one pass can hold several configurations. Layers are counted from `start` in call order
    (layers below `start` are not run in a cached pass; ALBERT calls one module per depth).
    """

    # The replaced tile and its product with the values, per map cell (bytes).
    cell_bytes = 8

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown ablation mode {mode!r}")
        self.mode = mode
        self._layer = 0
        self._disabled: torch.Tensor | None = None
        self._active: list[bool] = []
        self._uniform: torch.Tensor | None = None

    def begin(self, key_mask: torch.Tensor, disabled: np.ndarray, start: int = 0) -> None:
        real = key_mask.float()
        self._uniform = (real / real.sum(-1, keepdim=True))[:, None, None, :]  # (R, 1, 1, S)
        # Decided on the host, so layers with nothing disabled cost no device work or sync.
        self._active = [bool(layer.any()) for layer in disabled]
        self._disabled = torch.from_numpy(disabled).to(key_mask.device)[..., None, None]  # (L, R, H, 1, 1)
        self._layer = start - 1  # begin_layer moves to the first layer run

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.begin_layer(module, value, probs.shape[-2])
        return self._replaced(module, capture.Tile(0, 0, probs))

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None:
        self._layer += 1

    def observe_tile(self, module: nn.Module, tile: capture.Tile, value: torch.Tensor) -> torch.Tensor | None:
        """The tile's rows of the attention output with the disabled heads replaced; None
        where nothing is disabled in this layer (the attention function's own product)."""
        if not self._active[self._layer]:
            return None
        return torch.matmul(self._replaced(module, tile), value[:, :, tile.keys])

    def end_layer(self, module: nn.Module, tiles: capture.LayerTiles) -> None:
        pass

    def _replaced(self, module: nn.Module, tile: capture.Tile) -> torch.Tensor:
        probs = tile.probs
        if not self._active[self._layer]:
            return probs
        # _active is filled by begin(), which sets both tensors: past the check they are there.
        disabled, uniform = self._disabled, self._uniform
        assert disabled is not None and uniform is not None
        off = disabled[self._layer]
        # The mask of the tile's rows and keys (capture.observed_mask: set while it is read). A
        # causal row (decoders) sees only keys up to itself, and a sliding-window row only its
        # window: the mask says which, padding on either side included.
        limited = getattr(module, "is_causal", False) or getattr(module, "sliding_window", None) is not None
        mask = capture.observed_mask() if limited else None
        if self.mode == "zero":
            replacement = probs.new_zeros(())
        elif mask is not None:
            replacement = _window_uniform(mask, probs.dtype)
        else:
            # Also a sliding-window layer without a mask: transformers leaves it out when
            # nothing is padded and the whole input fits in the window.
            replacement = uniform[..., tile.keys].to(probs.dtype)
        return torch.where(off, replacement, probs)


def _window_uniform(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Uniform weights over the keys each query row may see, read from the layer's additive
    mask: on a causal row i of a decoder the real keys among 0..i (1/(i+1) where nothing is
    padded), on a sliding-window layer (ModernBERT's local layers, Mistral, Gemma) the real
    keys of its window. A row that sees no key (a left-padded row's padding) gets zeros."""
    allowed = (mask > torch.finfo(mask.dtype).min / 2).to(dtype)  # (R, 1, rows, keys)
    return allowed / allowed.sum(-1, keepdim=True).clamp(min=1)


class HeadGates:
    """Attention observer that scales each head's probabilities (hence its output) by a gate
    of shape (layers, rows, heads), for gradients with respect to the gates."""

    def __init__(self, gates: torch.Tensor) -> None:
        self.gates = gates
        self._layer = 0

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        gate = self.gates[self._layer]
        self._layer += 1
        return probs * gate[:, :, None, None].to(probs.dtype)


def encoder_layers(model: nn.Module) -> nn.ModuleList | None:
    """The model's list of layer modules, one per depth, where its family's record puts them
    (or the list of as many modules as the model has layers); None where depths share modules
    (ALBERT). `base_model` is the bare transformer under any head (a classifier's, a
    language model's)."""
    config: Any = model.config
    found = find_layers(model, facts_of(config.model_type), int(config.get_text_config().num_hidden_layers))
    return nn.ModuleList(found) if found is not None else None


# The query, key and value projections of the families that differ from their family's record
# (`families.py`), tried after it: BERT-like, DistilBERT, MPNet, ModernBERT (fused). DeBERTa
# only its values: with shared attention keys (v3) its query and key projections also run on
# the relative position embeddings, twice per forward, so one stored output cannot stand for
# both calls. Decoders: Llama and the families that copy it; Phi-3 (fused); GPT-2 (fused, a
# Conv1D).
_PROJECTIONS: tuple[tuple[str, ...], ...] = (
    ("query", "key", "value"),
    ("q_lin", "k_lin", "v_lin"),
    ("q", "k", "v"),
    ("Wqkv",),
    ("value_proj",),
    ("q_proj", "k_proj", "v_proj"),
    ("qkv_proj",),
    ("c_attn",),
)


def _is_projection(module: object) -> bool:
    # GPT-2's Conv1D is a linear layer with its weight transposed (y = x W + b).
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def qkv_projections(layers: nn.ModuleList, family: str | None = None) -> list[tuple[nn.Module, ...]] | None:
    """Each layer's query, key and value projections (by the names of `family`'s record, then
    the others known), or None where one is not found."""
    names_tried = (*facts_of(family).projections, *_PROJECTIONS) if family else _PROJECTIONS
    found = []
    for layer in layers:
        for module in layer.modules():
            linears = next(
                (
                    tuple(getattr(module, n) for n in names)
                    for names in names_tried
                    if all(_is_projection(getattr(module, n, None)) for n in names)
                ),
                None,
            )
            if linears:
                found.append(linears)
                break
        else:
            return None
    return found


@contextlib.contextmanager
def replaying(outputs: Sequence[tuple[nn.Module, object]]) -> Iterator[None]:
    """Inside the block, each module returns its given output without computing anything;
    always undone."""

    def returning(value: object):
        return lambda *args, **kwargs: value

    for module, value in outputs:
        module.forward = returning(value)  # an instance attribute shadows the class's forward
    try:
        yield
    finally:
        for module, _ in outputs:
            del module.forward


@dataclass
class _Reference:
    """One batch's pass with nothing changed: the layer modules and every layer's output,
    the embeddings' output, and, where found, every layer's query, key and value projections
    with their outputs."""

    layers: nn.ModuleList
    outputs: list[object]  # what each layer returned: a tensor, or a tuple holding it
    projections: list[list[tuple[nn.Module, torch.Tensor]]] | None
    embeddings: list[tuple[nn.Module, torch.Tensor]]  # each embedding module and what it returned

    def stubs(self, start: int, k: int) -> list[tuple[nn.Module, object]]:
        """What a pass of k copies of the batch that changes nothing below layer `start`
        takes from this one instead of computing it (for :func:`replaying`): the embeddings,
        the layers below `start` and the projections of layer `start`, which read the same
        input as here."""
        stubs: list[tuple[nn.Module, object]] = [
            (module, _repeated(embedded, k)) for module, embedded in self.embeddings
        ]
        if start > 0:
            hidden = _repeated(self.outputs[start - 1], k)
            stubs += [(layer, hidden) for layer in self.layers[:start]]
        if self.projections is not None and start < len(self.layers):
            stubs += [(linear, _repeated(stored, k)) for linear, stored in self.projections[start]]
        return stubs


T = TypeVar("T")


class PrefixCache:
    """The exact prefix cache of the sweeps: a configuration that first changes layer l (a
    disabled head, a restricted key/value group) computes the same hidden states below l as
    the unchanged model, so one reference pass per batch records them and each configuration
    replays them and runs from layer l on. `layers` is None where the model's layers cannot
    be found one module per depth (then every pass runs the whole model)."""

    def __init__(self, model: nn.Module, family: str | None, num_layers: int) -> None:
        self.model = model
        layers = encoder_layers(model)
        self.layers = layers if layers is not None and len(layers) == num_layers else None
        self.projections = qkv_projections(self.layers, family) if self.layers is not None else None

    def reference(self, forward: Callable[[], T], rows: int) -> tuple[T, _Reference]:
        """`forward()` (the unchanged model on a batch of `rows`) and what it recorded."""
        layers = self.layers
        if layers is None:
            raise ValueError("no prefix cache: the model's layers were not found")
        outputs: list[object] = []
        hooks = [layer.register_forward_hook(lambda m, a, out: outputs.append(out)) for layer in layers]
        embedded: dict[nn.Module, list[object]] = {}
        base: Any = self.model.base_model  # Any: torch types it as Tensor | Module
        for module in _embedding_modules(base):
            hooks.append(module.register_forward_hook(lambda m, a, out: embedded.setdefault(m, []).append(out)))
        projections: dict[nn.Module, torch.Tensor] = {}
        if self.projections is not None:
            hooks += [
                linear.register_forward_hook(lambda m, a, out: projections.__setitem__(m, out))
                for linears in self.projections
                for linear in linears
            ]
        try:
            result = forward()
        finally:
            for hook in hooks:
                hook.remove()
        # Only where it ran once, with a tensor of the batch's rows out (none of the families
        # calls one twice; a table looked up by one row of positions is left to run).
        kept = [
            (module, out[0])
            for module, out in embedded.items()
            if len(out) == 1 and isinstance(out[0], torch.Tensor) and out[0].shape[0] == rows
        ]
        stored = (
            None
            if self.projections is None
            else [[(linear, projections[linear]) for linear in linears] for linears in self.projections]
        )
        return result, _Reference(layers, outputs, stored, kept)


Scorer = Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]


def classifier_scores(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """A classifier's logits (rows, labels): its `.logits` (a decoder's *ForSequenceClassification
    pools the last real token by the pad token id)."""
    return model(**inputs).logits


def _embedding_modules(base: nn.Module) -> list[nn.Module]:
    """The modules that turn token ids into vectors: an encoder's `embeddings` (words,
    positions, types, its norm); a decoder's token embedding (Llama's `embed_tokens`, GPT-2's
    `wte`; GPT-2's position table `wpe` is looked up by positions of one row, left to run)."""
    found = [getattr(base, name, None) for name in ("embeddings", "embed_tokens", "wte")]
    return [m for m in found if isinstance(m, nn.Module)]


class AblationSweep:
    """Logits of a classifier under many head-disabling configurations, batch by batch."""

    def __init__(
        self,
        encoder: LoadedModel,
        mode: str,
        prefix_cache: bool = True,
        configs_per_pass: int = 1,
        attention_memory: int | None = None,
        scorer: Scorer = classifier_scores,
    ) -> None:
        """`attention_memory` (bytes; default: sized from the device) bounds the maps alive
        at once: long layers are computed in tiles (`capture.attention_memory`). `scorer`
        reads a configuration's scores (rows, classes) from the model and its inputs: a
        classifier's logits by default, a prompted language model's label-word logits
        (`prompting.label_scores`)."""
        self.encoder = encoder
        self.budget = attention_memory or capture.default_budget(encoder.device)
        self.mode = mode
        self.scorer = scorer
        self.disabler = HeadDisabler(mode)
        cache = PrefixCache(encoder.model, encoder.family, encoder.num_layers) if prefix_cache else None
        self.prefix = cache if cache is not None and cache.layers is not None else None
        self.configs_per_pass = max(1, configs_per_pass)
        # Told after each pass of :meth:`logits` how many of its passes are done, of how many:
        # a unit of a long sweep takes minutes, and a status that moves only between units
        # looks stuck.
        self.on_pass: Callable[[int, int], None] | None = None

    def max_rows(self, length: int) -> int:
        """How many examples of `length` tokens one call of :meth:`logits` may hold under the
        budget (each pass holds `configs_per_pass` copies of them); at least 1."""
        fit = capture.batch_rows(self.budget, self.encoder.num_heads, length, self.disabler, self.encoder.tiles)
        return max(1, fit // self.configs_per_pass)

    def logits(self, batch: dict[str, torch.Tensor], configurations: Sequence[Configuration]) -> np.ndarray:
        """Logits (configurations, batch, labels) in float32, in the order given."""
        with capture.attention_memory(self.budget):
            return self._logits(batch, configurations)

    @torch.inference_mode()
    def _logits(self, batch: dict[str, torch.Tensor], configurations: Sequence[Configuration]) -> np.ndarray:
        model, L, H = self.encoder.model, self.encoder.num_layers, self.encoder.num_heads
        # Configurations name layers by the model's numbers; the disabler counts the attention
        # layers in the order they run (a hybrid's others are never called).
        numbers = self.encoder.attention_layers
        place = {layer: i for i, layer in enumerate(numbers)}
        inputs = sweep_inputs(model, batch)
        key_mask = batch["attention_mask"].bool()
        rows = key_mask.shape[0]
        prefix = self.prefix
        reference = prefix.reference(lambda: self.scorer(model, inputs), rows)[1] if prefix is not None else None
        starts = [c.start(L) if reference is not None else 0 for c in configurations]
        out: np.ndarray | None = None
        order = sorted(range(len(configurations)), key=lambda i: (starts[i], i))
        groups = [order[i : i + self.configs_per_pass] for i in range(0, len(order), self.configs_per_pass)]
        # A group holds one first layer only, so no copy is computed below where it must be.
        groups = [g for group in groups for g in split_by(group, starts)]
        for n, group in enumerate(groups, 1):
            k, start = len(group), starts[group[0]]
            disabled = np.zeros((len(numbers), k, H), dtype=bool)
            for j, i in enumerate(group):
                for layer, head in configurations[i].heads:
                    disabled[place[layer], j, head] = True
            stubs = reference.stubs(start, k) if reference is not None else []
            first = bisect.bisect_left(numbers, start)  # the first attention layer the pass runs
            self.disabler.begin(key_mask.repeat(k, 1), np.repeat(disabled, rows, axis=1), first)
            with capture.observing(self.disabler), replaying(stubs):
                logits = self.scorer(model, {name: _repeated(t, k) for name, t in inputs.items()})
            values = logits.float().view(k, rows, -1).cpu().numpy()
            if out is None:
                out = np.empty((len(configurations), rows, values.shape[-1]), dtype=np.float32)
            out[group] = values
            if self.on_pass:
                self.on_pass(n, len(groups))
        if out is None:  # only when no configuration was given
            raise ValueError("logits needs at least one configuration")
        return out


def sweep_inputs(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What the model's forward takes from `batch`; for a decoder, without a key/value cache
    (a pass reads the whole input once, and layers replayed from the reference would leave
    the cache with gaps)."""
    inputs: dict[str, Any] = dict(forward_inputs(model, batch))
    if getattr(model.config, "use_cache", None) is not None and "use_cache" in _parameters(model):
        inputs["use_cache"] = False
    return inputs


def _parameters(model: nn.Module) -> frozenset[str]:
    return frozenset(inspect.signature(type(model).forward).parameters)


def _repeated(output: Any, k: int) -> Any:
    """A layer's output for k copies of the batch, in the same structure: a tensor
    (ModernBERT) or a tuple whose tensors are repeated (DeBERTa's (hidden, None), MPNet's
    (hidden,)); itself for k = 1 (a copy would cost a pass over it for nothing). Flags
    (`use_cache`) pass as they are."""
    if k == 1 or isinstance(output, bool):
        return output
    if isinstance(output, torch.Tensor):
        return output.repeat(k, *[1] * (output.dim() - 1))
    if isinstance(output, tuple):
        return tuple(_repeated(item, k) if item is not None else None for item in output)
    raise TypeError(f"cannot replay a layer output of type {type(output).__name__}")


def split_by(group: list[int], starts: list[int]) -> Iterator[list[int]]:
    """`group` (indices in order of their start) cut where the start changes."""
    current: list[int] = []
    for i in group:
        if current and starts[i] != starts[current[0]]:
            yield current
            current = []
        current.append(i)
    if current:
        yield current


def head_importance_batch(
    encoder: LoadedModel,
    batch: dict[str, torch.Tensor],
    targets: torch.Tensor,
    regression: bool,
    scorer: Scorer = classifier_scores,
) -> np.ndarray:
    """Sum over the batch's examples of |∂L(x)/∂ξ_h| per (layer, head), L being the
    example's cross-entropy over the scores `scorer` reads (a classifier's logits, a prompted
    model's label-word logits; squared error for regression) with all gates at 1."""
    model, L, H = encoder.model, encoder.num_layers, encoder.num_heads
    rows = batch["attention_mask"].shape[0]
    gates = torch.ones((L, rows, H), device=encoder.device, requires_grad=True)
    with _frozen(model), torch.enable_grad(), capture.observing(HeadGates(gates)):
        logits = scorer(model, sweep_inputs(model, batch)).float()
        if regression:
            loss = nn.functional.mse_loss(logits[:, 0], targets.float(), reduction="sum")
        else:
            loss = nn.functional.cross_entropy(logits, targets, reduction="sum")
        (grad,) = torch.autograd.grad(loss, gates)
    # Each example's loss depends only on its own gates: the sum's gradient holds them all.
    return grad.abs().sum(1).cpu().numpy().astype(np.float64)


@contextlib.contextmanager
def _frozen(model: nn.Module) -> Iterator[None]:
    """No gradients for the weights (only the gates need them); restored afterwards."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
