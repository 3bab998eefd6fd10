"""Massive activations as biases (Sun et al. 2024, "Massive Activations in Large Language
Models", §3): find a decoder's massive activations on a set of sequences, then measure the
next-token loss with them overwritten at the layer where they first appear.

An entry h_ℓ[p, d] of the output of decoder layer ℓ (the layer module's own output, before
any final norm) is *massive* in a sequence when |h_ℓ[p, d]| > `min_magnitude` and >
`ratio` × the median |h_ℓ| over the sequence's n · D entries of that layer (Sun et al.: 100
and 1000). The scan reuses the statistics run's (`massive.scan`): the `SCAN_TOP_K` largest
magnitudes of each sequence and layer, the exact median, the token kind of each position.

A massive activation of the model is an :class:`Entry` (layer, dim, token kind): dimension d
on a token of that kind, at the first layer ℓ where it is massive in at least `min_share` of
the sequences (it then stays in the residual stream through the layers after ℓ, so a later
layer's copy is the same activation, not another). In each sequence, the entry's *sites* are
the positions of that kind where it is massive at ℓ. Sun et al. set them, at ℓ, to zero (the
loss explodes) or to their mean over many sequences (the loss barely moves): they act as
fixed biases. :func:`intervention_losses` measures both, with a forward hook on layer ℓ that
overwrites exactly those positions and dimensions, and the model as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnwh.ingest.measures import massive
from attnwh.ingest.measures.lm_loss import token_losses

INTERVENTIONS = ("none", "zero", "mean")
MIN_MAGNITUDE = 100.0
RATIO = 1000.0
MIN_SHARE = 0.5
# Per sequence and layer, the scan looks at its SCAN_TOP_K largest magnitudes: Sun et al. find
# a handful per layer (at most four in LLaMA2-7B), so a cap far above that loses none of them
# while a threshold set very low cannot turn the scan into a copy of every hidden state.
SCAN_TOP_K = 32
# massive.TOKEN_KINDS with a decoder's first token named as the warehouse's queries name it.
FIRST_TOKEN = "first token"


@dataclass(frozen=True)
class Found:
    """One massive entry of one sequence: where it is, its signed value and its layer's
    median |h| in that sequence."""

    sequence: int
    layer: int
    dim: int
    position: int
    token_kind: str
    value: float
    median: float


@dataclass(frozen=True)
class Entry:
    """A massive activation of the model: `dim` on tokens of `token_kind`, from `layer` (the
    first where it is massive in at least the share of sequences asked for) on; `mean` its
    signed value at `layer` averaged over every site of every sequence (the value the mean
    intervention writes), `sequences` how many sequences have a site."""

    layer: int
    dim: int
    token_kind: str
    mean: float
    mean_magnitude: float
    max_magnitude: float
    mean_median: float
    sequences: int
    sites: int


# One overwritten entry of one sequence: (the entry's index, position, the value found there).
Site = tuple[int, int, float]


@dataclass(frozen=True)
class Largest:
    """The largest ratio |h| / median the scan saw, for the line that says none is massive."""

    magnitude: float
    ratio: float
    layer: int
    dim: int
    token_kind: str


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's layer modules, one per depth (`ablation.encoder_layers`); ValueError where
    they cannot be told apart (no hook could name the layer an entry appears in)."""
    from attnwh.ingest.measures.ablation import encoder_layers

    layers = encoder_layers(model)
    if layers is None:
        raise ValueError(f"the layers of {type(model).__name__} are not one module per depth")
    return list(layers)


def _hidden(output: object) -> torch.Tensor:
    """A layer's hidden states from its output: a tensor, or the first item of a tuple."""
    return output if isinstance(output, torch.Tensor) else output[0]  # type: ignore[index]


def _with_hidden(output: object, hidden: torch.Tensor) -> object:
    return hidden if isinstance(output, torch.Tensor) else (hidden, *output[1:])  # type: ignore[index]


def scan_batch(
    model: nn.Module,
    inputs: Mapping[str, torch.Tensor],
    kinds: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    sequences: Sequence[int],
    min_magnitude: float = MIN_MAGNITUDE,
    ratio: float = RATIO,
) -> tuple[list[Found], Largest | None]:
    """Every entry of every layer's output over both thresholds, for a right-padded batch
    (`inputs` as the model's forward takes them, `kinds` the [CLS]/first-token, [SEP] and
    punctuation masks of `TokenKinds`), batch row r being sequence `sequences[r]`; and the
    largest ratio seen below or above them. Each layer is scanned as it finishes, so no more
    than one layer's output is held besides the model's own."""
    mask = inputs["attention_mask"].bool()
    found: list[Found] = []
    best: list[Largest] = []

    def scan(layer: int, output: object) -> None:
        hidden = _hidden(output)
        top = massive.scan([hidden], mask, *kinds, top_k=SCAN_TOP_K)
        if not len(top["magnitude"]):
            return
        magnitude, median = top["magnitude"].astype(np.float64), top["median"].astype(np.float64)
        rows, dims, positions = (torch.as_tensor(top[c], device=hidden.device) for c in ("row", "dim", "position"))
        values = hidden[rows, positions, dims].double().cpu().numpy()
        kind = [FIRST_TOKEN if k == massive.TOKEN_KINDS[0] else str(k) for k in top["token_kind"]]
        ratios = magnitude / np.maximum(median, np.finfo(np.float64).tiny)
        i = int(np.argmax(ratios))
        best.append(Largest(float(magnitude[i]), float(ratios[i]), layer, int(top["dim"][i]), kind[i]))
        for j in np.flatnonzero((magnitude > min_magnitude) & (magnitude > ratio * median)):
            found.append(
                Found(
                    sequences[int(top["row"][j])],
                    layer,
                    int(top["dim"][j]),
                    int(top["position"][j]),
                    kind[j],
                    float(values[j]),
                    float(median[j]),
                )  # fmt: skip
            )

    layers = decoder_layers(model)
    hooks = [m.register_forward_hook(lambda m, a, out, i=i: scan(i, out)) for i, m in enumerate(layers)]
    try:
        with torch.inference_mode():
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return found, max(best, key=lambda b: b.ratio, default=None)


def choose_entries(
    found: Sequence[Found], n_sequences: int, min_share: float = MIN_SHARE
) -> tuple[list[Entry], list[list[Site]]]:
    """The model's massive activations from the scan's `found` entries of `n_sequences`
    sequences (module docstring), ordered by layer, dim and token kind, and each sequence's
    sites (entry index, position)."""
    by_place: dict[tuple[int, str], dict[int, set[int]]] = {}  # (dim, kind) -> layer -> sequences
    for f in found:
        by_place.setdefault((f.dim, f.token_kind), {}).setdefault(f.layer, set()).add(f.sequence)
    chosen: list[tuple[int, int, str]] = []
    for (dim, kind), layers in by_place.items():
        enough = [layer for layer, seqs in layers.items() if len(seqs) >= min_share * n_sequences]
        if enough:
            chosen.append((min(enough), dim, kind))
    chosen.sort()
    index = {key: i for i, key in enumerate(chosen)}
    sites: list[list[Site]] = [[] for _ in range(n_sequences)]
    at: dict[int, list[Found]] = {i: [] for i in range(len(chosen))}
    for f in sorted(found, key=lambda f: (f.sequence, f.layer, f.dim, f.position)):
        i = index.get((f.layer, f.dim, f.token_kind))
        if i is not None:
            sites[f.sequence].append((i, f.position, f.value))
            at[i].append(f)
    entries = []
    for (layer, dim, kind), i in index.items():
        values = np.array([f.value for f in at[i]], dtype=np.float64)
        entries.append(
            Entry(
                layer,
                dim,
                kind,
                float(values.mean()),
                float(np.abs(values).mean()),
                float(np.abs(values).max()),
                float(np.mean([f.median for f in at[i]])),
                len({f.sequence for f in at[i]}),
                len(values),
            )  # fmt: skip
        )
    return entries, sites


@contextlib.contextmanager
def overwritten(
    model: nn.Module, entries: Sequence[Entry], sites: Sequence[Sequence[Site]], values: Sequence[float]
) -> Iterator[None]:
    """Inside the block, the output of layer `entries[i].layer` holds `values[i]` at dim
    `entries[i].dim` on batch row r's sites `sites[r]` (a copy of the output is changed,
    nothing the layer keeps); the hooks are removed on the way out, whatever happens."""
    layers = decoder_layers(model)
    by_layer: dict[int, list[tuple[int, int, int, float]]] = {}  # layer -> (row, position, dim, value)
    for row, row_sites in enumerate(sites):
        for i, position, _ in row_sites:
            e = entries[i]
            by_layer.setdefault(e.layer, []).append((row, position, e.dim, float(values[i])))

    def overwrite(where: list[tuple[int, int, int, float]], output: object) -> object:
        hidden = _hidden(output).clone()
        rows, positions, dims, new = zip(*where, strict=True)
        index = [torch.tensor(x, device=hidden.device) for x in (rows, positions, dims)]
        hidden[index[0], index[1], index[2]] = torch.tensor(new, dtype=hidden.dtype, device=hidden.device)
        return _with_hidden(output, hidden)

    hooks = [
        layers[layer].register_forward_hook(lambda m, a, out, where=where: overwrite(where, out))
        for layer, where in by_layer.items()
    ]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def intervention_losses(
    model: nn.Module, inputs: Mapping[str, torch.Tensor], entries: Sequence[Entry], sites: Sequence[Sequence[Site]]
) -> tuple[np.ndarray, np.ndarray]:
    """Each batch row's summed next-token loss (nats, float64) under each of
    :data:`INTERVENTIONS` — the model as it is, its massive activations' sites set to zero,
    set to their entry's mean — shaped (interventions, rows), and the tokens predicted per row
    (its real tokens less the first). Right-padded rows; row r's sites are `sites[r]`."""
    mask = inputs["attention_mask"]
    tokens = (mask.sum(-1) - 1).clamp_min(0).cpu().numpy().astype(np.int64)
    nats = np.zeros((len(INTERVENTIONS), mask.shape[0]), dtype=np.float64)
    written = {"zero": [0.0] * len(entries), "mean": [e.mean for e in entries]}
    for k, name in enumerate(INTERVENTIONS):
        hooked = overwritten(model, entries, sites, written[name]) if name in written else contextlib.nullcontext()
        with torch.inference_mode(), hooked:
            nats[k] = token_losses(model, dict(inputs)).double().sum(-1).cpu().numpy()
    return nats, tokens
