"""Attention change between two models (docs/metrics.md#attention-change): per example, layer and head, the cosine
similarity of the base and the tuned model's attention maps on the same input.

Each map is cropped to the example's n real tokens and flattened (n² values). Cropping is
done by zeroing padding rows and columns in both maps before the dot product and the norms,
which gives exactly the cosine of the cropped maps without slicing per example. (Kovaleva et
al. compared maps padded to length 200: their padding rows are not zero, so they add the
same values to both maps and inflate the similarity; attnwh does not.)

Decoders (causal language models) compare the same way, a base model with its tuned
``...ForSequenceClassification`` or with another checkpoint of the same configuration. The
cells above the diagonal (keys a row cannot see) are 0 in both maps: they add nothing to the
dot product or to either norm, so the cosine of the n × n maps is that of their n(n+1)/2
visible cells. Causal tiles hold only the keys their rows see; the product is taken over the
keys both tiles hold, everything else being 0.

Both models run through attnwh's registered attention function. The base model's pass keeps
each layer as its tiles (`capture.LayerTiles`): the whole maps where every layer's fit the
attention memory budget together, otherwise only what rebuilds any tile of rows (the layer's
queries and keys, n × d instead of n × n). The tuned model's pass reads its own layers a
tile of query rows at a time, rebuilds the base model's tile of the same rows, and adds their
products and squares to the layer's sums; the base layer is dropped once used. So on long
inputs no layer's n × n maps exist at once, and no map leaves the device. (DeBERTa and MPNet
compute their maps inside their modules: they keep them whole, within the budget.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from attnwh.errors import ModelError, UsageError
from attnwh.ingest.model import capture
from attnwh.ingest.model.encoding import encode_task
from attnwh.ingest.model.loading import LoadedModel, forward_inputs
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask, model_identity, prepare_tasks
from attnwh.ingest.sources.examples import TaskData

if TYPE_CHECKING:
    from attnwh.ingest.runs.units import WorkUnit

CHANGE_COLUMNS: tuple[str, ...] = ("cosine",)


class KeepTiles:
    """Observer for the base model's pass: keeps each layer's tiles, in call order."""

    def __init__(self, cell_bytes: int) -> None:
        # Whole maps are kept only when every layer's fit the budget together (with the
        # tuned pass's working memory), so the tile height counts them all per cell.
        self.cell_bytes = cell_bytes
        self.layers: list[capture.LayerTiles | None] = []

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.layers.append(capture.whole_tiles(probs.detach()))
        return probs

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None:
        pass

    def observe_tile(self, module: nn.Module, tile: capture.Tile, value: torch.Tensor) -> torch.Tensor | None:
        return None

    def end_layer(self, module: nn.Module, tiles: capture.LayerTiles) -> None:
        self.layers.append(tiles)


class CosineAgainst:
    """Observer for the tuned model's pass: per layer, the cosine of its maps with the kept
    base layer over the real query × key cells, (batch, heads) per layer, a tile of query
    rows at a time."""

    # The base model's rebuilt tile (scores, probabilities, mask) and the products' temporaries.
    cell_bytes = 24

    def __init__(self, kept: list[capture.LayerTiles | None], key_mask: torch.Tensor) -> None:
        self._kept = kept
        self._real = key_mask.float()
        self._layer = 0
        self._base: capture.LayerTiles | None = None
        self._sums: torch.Tensor | None = None  # (3, B, H): Σ a·b, Σ a², Σ b² so far, float64
        self.cosines: list[torch.Tensor] = []

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        self.begin_layer(module, value, probs.shape[-2])
        self.observe_tile(module, capture.Tile(0, 0, probs), value)
        self.end_layer(module, capture.whole_tiles(probs))
        return probs

    def begin_layer(self, module: nn.Module, value: torch.Tensor, length: int) -> None:
        if self._layer >= len(self._kept):
            raise RuntimeError(f"the tuned model has more attention layers than the base model ({len(self._kept)})")
        self._base = self._kept[self._layer]
        self._kept[self._layer] = None  # dropped once this layer is done
        self._sums = torch.zeros((3, *value.shape[:2]), dtype=torch.float64, device=value.device)

    def observe_tile(self, module: nn.Module, tile: capture.Tile, value: torch.Tensor) -> torch.Tensor | None:
        base, sums = self._base, self._sums
        # Each layer's entry is taken once, in begin_layer: it is still there.
        assert base is not None and sums is not None
        other = base.block(tile.start, tile.start + tile.probs.shape[-2])
        # Padding keys already have probability 0; padding query rows do not (they attend to
        # the real keys), so both tiles' padding rows are zeroed. Reduced in float32 whatever
        # the model dtype, a tile's sums added up in float64.
        rows = self._real[:, None, tile.rows, None]
        a, b = tile.probs.float() * rows, other.probs.float() * rows
        # The tiles may hold different keys (a sliding window, or whole base maps): every
        # weight outside a tile's keys is 0, so the product needs only the keys both hold.
        first, last = max(tile.key_start, other.key_start), min(tile.keys.stop, other.keys.stop)
        if first < last:
            both = (
                a[..., first - tile.key_start : last - tile.key_start]
                * b[..., first - other.key_start : last - other.key_start]
            )
            sums[0] += both.sum((-2, -1))
        sums[1] += torch.linalg.vector_norm(a, dim=(-2, -1)).double() ** 2
        sums[2] += torch.linalg.vector_norm(b, dim=(-2, -1)).double() ** 2
        return None

    def end_layer(self, module: nn.Module, tiles: capture.LayerTiles) -> None:
        sums = self._sums
        assert sums is not None
        self._base, self._sums = None, None
        self._layer += 1
        # Every real row sums to 1, so neither norm is 0; the clamp only guards the division.
        norms = (sums[1] * sums[2]).sqrt().clamp_min(torch.finfo(torch.float32).tiny)
        self.cosines.append((sums[0] / norms).float())


class ChangeCapture:
    """Runs a batch through both models and returns the cosines (batch, layer, head, 1); the
    batch is made with the tuned model's tokenizer, which must agree with the base model's
    (checked by :func:`prepare_comparison`)."""

    kind = "compare"
    table = "attention_change"
    columns = CHANGE_COLUMNS

    def __init__(self, base: LoadedModel, tuned: LoadedModel, attention_memory: int | None = None) -> None:
        check_compatible(base, tuned)
        self.base = base
        self.encoder = tuned
        self.attention_memory = attention_memory
        self.budget = attention_memory or capture.default_budget(tuned.device)

    def models(self) -> dict[str, LoadedModel]:
        return {"model_id": self.encoder, "base_model_id": self.base}

    def settings(self) -> dict[str, Any]:
        return {"attention_memory": self.attention_memory}

    def _keeper(self) -> KeepTiles:
        # Per map cell: every layer's kept base maps, and the tuned pass's tile beside them.
        per_layer = self.base.dtype.itemsize
        return KeepTiles(len(self.base.attention_layers) * per_layer + capture.map_bytes(1, 1, 1, 1, CosineAgainst))

    def max_rows(self, length: int) -> int:
        """With tiles, enough examples for tiles of `capture.TILE_FLOOR` rows; DeBERTa and
        MPNet keep the base model's maps of every layer whole beside the tuned model's."""
        heads = self.base.num_heads
        if self.base.tiles and self.encoder.tiles:
            return capture.batch_rows(self.budget, heads, length, self._keeper(), tiles=True)
        kept = len(self.base.attention_layers) * heads * length * length * self.base.dtype.itemsize
        return self.budget // (kept + capture.map_bytes(1, heads, length, length, CosineAgainst))

    def _forward(self, encoder: LoadedModel, batch: dict[str, torch.Tensor]) -> None:
        encoder.model(**forward_inputs(encoder.model, {k: v.to(encoder.device) for k, v in batch.items()}))

    def begin_unit(self, unit: WorkUnit) -> None:
        """Every unit is read alike: nothing to note."""

    @torch.inference_mode()
    def run(self, batch: dict[str, torch.Tensor], thumbnail_rows: Sequence[int] = ()) -> np.ndarray:
        """Cosines of one collated batch (see `encoding.collate`); a comparison keeps no
        thumbnails."""
        keep = self._keeper()
        with capture.attention_memory(self.budget):
            with capture.observing(keep):
                self._forward(self.base, batch)
            if len(keep.layers) != len(self.base.attention_layers):
                raise RuntimeError(
                    f"saw {len(keep.layers)} attention layers, expected {len(self.base.attention_layers)}"
                )
            cosine = CosineAgainst(keep.layers, batch["attention_mask"].to(self.encoder.device).bool())
            with capture.observing(cosine):
                self._forward(self.encoder, batch)
        if len(cosine.cosines) != len(self.encoder.attention_layers):
            raise RuntimeError(
                f"saw {len(cosine.cosines)} attention layers, expected {len(self.encoder.attention_layers)}"
            )
        return torch.stack(cosine.cosines, dim=1)[..., None].cpu().numpy()  # (B, L, H, 1)

    def extra_rows(self, example_ids: np.ndarray) -> dict[str, pa.Table]:
        return {}


def check_compatible(base: LoadedModel, tuned: LoadedModel) -> None:
    """Refuse a pair of models whose maps cannot be compared head by head."""
    if base.causal != tuned.causal:
        kinds = {True: "a decoder (causal)", False: "an encoder"}
        raise ModelError(
            f"cannot compare {base.name}, {kinds[base.causal]}, with {tuned.name}, {kinds[tuned.causal]}: "
            "their maps are not of one kind"
        )
    shape = (base.num_layers, base.num_heads, base.attention_layers)
    if (tuned.num_layers, tuned.num_heads, tuned.attention_layers) != shape:
        raise ModelError(
            f"cannot compare {base.name} ({base.num_layers} layers × {base.num_heads} heads) with "
            f"{tuned.name} ({tuned.num_layers} layers × {tuned.num_heads} heads): they must have the same layers and heads"
        )


def prepare_comparison(
    base: LoadedModel, tuned: LoadedModel, tasks: Sequence[TaskData], options: IngestOptions
) -> list[PreparedTask]:
    """Sample, tokenize and check every task for a comparison; raises before anything is
    written. The run key names both checkpoints, so a comparison resumes only itself."""
    check_compatible(base, tuned)
    limit = min(base.max_length, tuned.max_length)
    if options.max_length is not None and options.max_length > limit:
        raise UsageError(f"--max-length {options.max_length} exceeds the models' limit of {limit} tokens")
    options = dataclasses.replace(options, max_length=options.max_length or limit)
    identity = {
        **model_identity(tuned, kind="compare"),
        "base_weights": base.weights_hash,
        "base_name": base.name,
    }
    if base.tokenizer.pad_token_id != tuned.tokenizer.pad_token_id:
        # Batches are padded once for both models; RoBERTa-style models derive positions
        # from the padding id, so it has to mean the same to both.
        raise ModelError(f"{base.name} and {tuned.name} use different padding tokens; they tokenize differently")
    prepared = prepare_tasks(tuned, tasks, options, identity)
    for full, task in zip(tasks, prepared, strict=True):
        # A comparison is only meaningful on identical inputs: the same token ids at the same
        # positions. Checked on every example, as the tokenizers could differ only on some.
        # Plain text is cut by each tokenizer in turn (sequences carry their ids, so encoding
        # the tuned model's cut again would compare it with itself).
        data = full.cut(base.tokenizer, task.max_length).sample(options.limit, options.seed)
        theirs = encode_task(base.tokenizer, data, task.max_length)
        ours = task.encoded
        if len(theirs.input_ids) != len(ours.input_ids):
            raise ModelError(
                f"{base.name} and {tuned.name} tokenize differently (their cuts of {task.data.task} differ in "
                "length); attention can only be compared on the same tokens"
            )
        for i, (a, b) in enumerate(zip(ours.input_ids, theirs.input_ids, strict=True)):
            if not np.array_equal(a, b):
                raise ModelError(
                    f"{base.name} and {tuned.name} tokenize differently (first: {task.data.task} row "
                    f"{task.data.examples[i].position}); attention can only be compared on the same tokens"
                )
        our_types, their_types = ours.token_type_ids, theirs.token_type_ids
        if (
            our_types is not None
            and their_types is not None
            and not all(np.array_equal(a, b) for a, b in zip(our_types, their_types, strict=True))
        ):
            raise ModelError(f"{base.name} and {tuned.name} give different segment ids on {task.data.task}")
    return prepared
