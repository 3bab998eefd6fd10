"""One example's attention, on demand: the maps behind a row of the warehouse, token by token.

The warehouse keeps per-example statistics, not maps (n² values per head would not fit at
dataset scale). To see the evidence behind a finding, :func:`example_maps` runs one example of a
run again through the run's own model — found from any folder (where the run loaded it, the
name it was given beside the warehouse or from here, or the hub: :func:`model_places`), its
weights checked against the hash the run stored — and returns every head's maps with the
tokens, through each lens the warehouse stores for a head (docs/metrics.md):

- ``weights``: the attention weights A^h[i, j] (what ``output_attentions`` gives);
- ``norm``: the weights scaled by the norm of the key's transformed value, A^h[i, j] ·
  ||f_h(x_j)||, rows renormalised (Kobayashi et al. 2020; head_stats.norm_to_*);
- ``post_ln``: each head's terms after the residual and LayerNorm, A^h[i, j] · ||γ ⊙
  c(f_h(x_j))||, rows renormalised (Kobayashi et al. 2021; head_mixing.rn_to_*), post-LN
  models only;

and per layer ``block``: the whole attention block's contribution of token j to token i,
every head and the residual after the LayerNorm, c_ij / Σ_j c_ij (layer_mixing's shares).
Each row of every map sums to 1.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnwh.errors import ModelError, UsageError
from attnwh.ingest.measures.mixing import ContextMixing
from attnwh.ingest.measures.statistics import value_norm_grams
from attnwh.ingest.model import capture, gguf
from attnwh.ingest.model.encoding import (
    EncodedTask,
    TokenKinds,
    collate,
    encode_task,
    length_buckets,
    readable_tokens,
)
from attnwh.ingest.model.loading import (
    DEFAULT_MODEL_NAME,
    LoadedModel,
    forward_inputs,
    load_model,
)
from attnwh.ingest.runs.map_checks import LENSES
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.sql import warehouse


@dataclass(frozen=True)
class ExampleMaps:
    """One example's maps, (layers, heads, n, n) per head lens and (layers, n, n) for
    ``block``, with its n tokens; row i is query token i, column j key token j."""

    run_id: int
    example_id: int
    model: str
    tokens: list[str]
    kinds: list[str]  # per token: "cls", "sep", "punct" or ""
    layers: tuple[int, ...]  # the model's layers these maps are of, in order
    maps: dict[str, np.ndarray] = field(repr=False)
    text_a: str = ""
    text_b: str | None = None
    label: str | None = None
    # A decoder's maps are triangles (row i sees keys 0..i; the cells above are 0, not part of
    # the map); its first token is the "cls" kind, in [CLS]'s place.
    causal: bool = False
    # Key/value heads per layer: fewer than the heads under grouped-query attention, where
    # head h reads key/value head h // (heads / num_key_value_heads). None: as many as heads.
    num_key_value_heads: int | None = None
    # A hybrid model's layers that are no softmax attention (no maps): layer -> its kind.
    other_layers: dict[int, str] = field(default_factory=dict)
    # The tokens as a reader sees them (`encoding.readable_tokens`: "␣rise", not "Ġrise");
    # `tokens` keeps the vocabulary's spelling.
    labels: list[str] = field(default_factory=list)

    @property
    def lenses(self) -> tuple[str, ...]:
        return tuple(self.maps)


class MapCapture:
    """Computes one input's maps through `lenses` (default every lens the model has) with
    `encoder`; what the lenses need from the model's weights is prepared once, so one capture
    serves many inputs."""

    def __init__(self, encoder: LoadedModel, lenses: Sequence[str] = LENSES) -> None:
        self.encoder = encoder
        self.lenses = tuple(lenses)
        outputs = encoder.outputs
        self._grams = value_norm_grams({m: o.dense for m, o in outputs.items()}, encoder.num_heads)
        wants_mixing = {"post_ln", "block"} & set(self.lenses)
        self._mixing = (
            ContextMixing(outputs, encoder.num_heads) if wants_mixing and ContextMixing.applies(outputs) else None
        )
        self._maps: dict[str, list[torch.Tensor]] = {}

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        a, v = probs.double(), value.float()
        keep = self._maps
        if "weights" in self.lenses:
            keep["weights"].append(a)
        if "norm" in self.lenses:
            gram = self._grams.get(id(module))
            if gram is None:  # heads gated before W_O (`reading.py`): no norm lens on this layer
                keep["norm"].append(torch.full_like(a, float("nan")))
            else:
                norms = torch.einsum("bhsd,hde,bhse->bhs", v, gram, v).clamp_min(0).sqrt()
                keep["norm"].append(_rows(a * norms[:, :, None, :].double()))
        if self._mixing is not None:
            ln_norms, _, block = self._mixing.contributions(module, probs.float(), v)
            if "post_ln" in self.lenses:
                keep["post_ln"].append(_rows(a * ln_norms[:, :, None, :].double()))
            if "block" in self.lenses:
                keep["block"].append(_rows(block.double()))
        return probs

    def compute(
        self, text_a: str, text_b: str | None = None, max_length: int | None = None
    ) -> tuple[list[int], dict[str, np.ndarray]]:
        """The token ids of one input and every layer's maps of it through each lens, in
        float64; tokenized as an ingest does (truncated to `max_length`, default the model's
        limit). A lens the model lacks (post_ln and block on a pre-LN model) is absent."""
        return self.compute_many([(text_a, text_b)], max_length)[0]

    def compute_many(
        self,
        texts: Sequence[tuple[str, str | None]],
        max_length: int | None = None,
        batch_size: int = 32,
        token_ids: Sequence[Sequence[int] | None] | None = None,
    ) -> list[tuple[list[int], dict[str, np.ndarray]]]:
        """:meth:`compute` for many inputs, in batches of similar length (one forward pass
        per batch, each input's maps cropped to its own tokens), in the order given. Where
        `token_ids` gives an input's ids (those a run read: run_examples.token_ids), the maps
        are of exactly them, its text unused: a window cut from a longer text need not
        tokenize back to the ids it was cut as."""
        given = list(token_ids) if token_ids is not None else [None] * len(texts)
        found: list[tuple[list[int], dict[str, np.ndarray]]] = [([], {})] * len(texts)
        for carried in (False, True):
            group = [k for k, ids in enumerate(given) if (ids is not None) == carried]
            if not group:
                continue
            examples = tuple(
                Example(
                    position=k,
                    guid=None,
                    text_a=texts[k][0],
                    text_b=texts[k][1],
                    label=None,
                    token_ids=tuple(int(i) for i in given[k] or ()) if carried else None,
                )
                for k in group
            )
            data = TaskData(dataset="show", task="show", split="show", examples=examples, labels=None, source="show")
            encoded = encode_task(self.encoder.tokenizer, data, max_length or self.encoder.max_length)
            for k, result in zip(group, self._compute(encoded, batch_size), strict=True):
                found[k] = result
        return found

    @torch.inference_mode()
    def _compute(self, encoded: EncodedTask, batch_size: int) -> list[tuple[list[int], dict[str, np.ndarray]]]:
        """Each encoded input's ids and maps, in order."""
        encoder = self.encoder
        lengths = np.array([len(ids) for ids in encoded.input_ids])
        found: list[tuple[list[int], dict[str, np.ndarray]]] = [([], {})] * len(lengths)
        mixing = self._mixing
        for rows in length_buckets(lengths, range(len(lengths)), batch_size):
            batch = collate(encoded, rows, encoder.tokenizer.pad_token_id, encoder.device)
            self._maps = {lens: [] for lens in self.lenses}
            with capture.observing(self), mixing.hooks() if mixing else contextlib.nullcontext():
                encoder.model(**forward_inputs(encoder.model, batch))
            # Per lens (B, layers, H, S, S), or (B, layers, S, S) for block.
            stacked = {lens: torch.stack(maps, dim=1).cpu().numpy() for lens, maps in self._maps.items() if maps}
            for b, k in enumerate(rows):
                n = int(lengths[k])
                found[k] = (encoded.input_ids[k].tolist(), {lens: m[b, ..., :n, :n] for lens, m in stacked.items()})
        return found


def stored_token_ids(con, run_id: int, example_ids: Sequence[int]) -> dict[int, list[int] | None]:
    """The token ids run `run_id` read of each of `example_ids` (run_examples.token_ids; None
    for rows written before migration 18 and for examples of two segments, whose token
    types the ids alone do not give: those are tokenized from their text again, as the
    ingest did). A run read through a prompt (runs.prompt) read one segment, the rendered
    prompt, whatever the example: its stored ids are always used, never the bare text."""
    has_column = warehouse.first_row(
        con,
        "SELECT 1 FROM duckdb_columns() WHERE table_name = 'run_examples' AND column_name = 'token_ids'",
    )
    if has_column is None:  # a read-only warehouse of an older attnwh
        return {int(e): None for e in example_ids}
    rows = con.execute(
        "SELECT x.example_id, CASE WHEN e.text_b IS NULL OR r.prompt IS NOT NULL THEN x.token_ids END "
        "FROM run_examples AS x JOIN examples AS e USING (example_id) JOIN runs AS r USING (run_id) "
        "WHERE x.run_id = ? AND list_contains(?, x.example_id)",
        [run_id, [int(e) for e in example_ids]],
    ).fetchall()
    return {int(e): None for e in example_ids} | {int(e): ids for e, ids in rows}


def _rows(x: torch.Tensor) -> torch.Tensor:
    """Each row of non-negative contributions as shares of the row's total."""
    return x / x.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)


def token_kinds(encoder: LoadedModel, ids: Sequence[int]) -> list[str]:
    """ "cls", "sep", "punct" or "" per token, as the statistics count them."""
    cls, sep, punct = TokenKinds(encoder.tokenizer, causal=encoder.causal).masks(torch.tensor([list(ids)]))
    return ["cls" if c else "sep" if s else "punct" if p else "" for c, s, p in zip(cls[0], sep[0], punct[0])]


def run_model(
    con, run_id: int, db: Path, model: str | None = None, device: str = "auto", can_give_model: bool = True
) -> LoadedModel:
    """The model of run `run_id` (or `model`, when given), its weights checked against the
    hash the run stored. Without `model` it is looked for in each of :func:`model_places` in
    turn and the first holding the run's weights is loaded, whatever the current folder; when
    none does, one ModelError line names every place tried and --model (or, where the caller
    takes no model, `can_give_model` False, says to put it back)."""
    row = warehouse.first_row(
        con,
        "SELECT m.name, m.weights_hash, m.folder FROM runs AS r JOIN models AS m USING (model_id) WHERE r.run_id = ?",
        [run_id],
    )
    if row is None:
        raise UsageError(f"no run {run_id} in {db}; `attnwh query runs` lists them")
    name, stored_hash, folder = row
    tried: list[str] = []
    changed: tuple[str, str] | None = None  # the first place holding other weights
    for place in [model] if model is not None else model_places(name, folder, db):
        encoder = load_model(place, device) if model is not None else _load_from(place, device, tried)
        if encoder is None:
            continue
        if encoder.weights_hash == stored_hash:
            return encoder
        changed = changed or (place or name, encoder.weights_hash)
    if changed is not None:
        shown, found_hash = changed
        raise ModelError(
            f"the weights of {shown} are not those run {run_id} measured (hash {found_hash}, "
            f"stored {stored_hash}): the model changed since; "
            + ("give the run's model with --model" if can_give_model else "put the run's own weights back there")
        )
    remedy = "give its folder with --model" if can_give_model else "put it back in one of them"
    raise ModelError(f"run {run_id}'s model {name} is not found: tried {', '.join(tried)}; {remedy}")


def model_places(name: str, folder: str | None, db: Path) -> list[str | None]:
    """Where a run's model may load from, in the order tried: None for the bundled MiniLM;
    else the absolute folder recorded when the run was written (models.folder), the stored
    name as a folder beside the warehouse (a warehouse moved along with its models; the study
    keeps its models there) and from the current folder, each made absolute (`..` removed)
    and listed once; last, for a name that can be a hub name and no recorded folder, the
    name itself."""
    if name == DEFAULT_MODEL_NAME:
        return [None]
    given = Path(name).expanduser()
    folders = [Path(folder)] if folder is not None else []
    folders += [given] if given.is_absolute() else [Path(db).parent / given, given]
    places: list[str | None] = list(dict.fromkeys(os.path.abspath(f) for f in folders))
    if folder is None and not name.startswith(("/", ".", "~")) and name.count("/") <= 1:
        places.append(name)  # "org/name" on the hub
    return places


def _load_from(place: str | None, device: str, tried: list[str]) -> LoadedModel | None:
    """The model at `place` (one of :func:`model_places`); where it holds none, None, with
    the place (and why, for the hub) noted in `tried`."""
    if place is None:
        return load_model(None, device)
    if Path(place).is_absolute():
        if (Path(place) / "config.json").is_file() or (gguf.is_gguf(place) and Path(place).is_file()):
            return load_model(place, device)
        tried.append(place)
        return None
    if why := _hub_missing(place):
        tried.append(f"the Hugging Face cache (the hub is {why})")
        return None
    try:
        return load_model(place, device)
    except ModelError as exc:  # the name of a folder, not of a hub model
        tried.append(f"the hub ({exc})")
        return None


def _hub_missing(name: str) -> str | None:
    """Why the hub model `name` cannot load here ("offline (HF_HUB_OFFLINE=1)", …), or None
    when the local cache holds it or the hub can be reached."""
    from attnwh.ingest.model.available import hub_offline, in_hub_cache

    return None if in_hub_cache(name) else hub_offline()


def example_maps(
    db: Path,
    run_id: int,
    example_id: int,
    layers: Sequence[int] | None = None,
    model: str | None = None,
    device: str = "auto",
) -> ExampleMaps:
    """The maps of example `example_id` as run `run_id`'s model sees it (module docstring):
    every lens the model has, of `layers` (default all), with the tokens. `model` loads the
    run's model from elsewhere (still checked against the stored weights hash). The input is
    the token ids the run read where it stored them (`stored_token_ids`), else the example's
    text tokenized as the ingest did."""
    db = Path(db)
    con = warehouse.connect(db, read_only=True)
    try:
        row = warehouse.first_row(
            con,
            "SELECT e.text_a, e.text_b, e.label, r.max_length FROM run_examples AS x "
            "JOIN examples AS e USING (example_id) JOIN runs AS r USING (run_id) "
            "WHERE x.run_id = ? AND x.example_id = ?",
            [run_id, example_id],
        )
        if row is None and warehouse.first_row(con, "SELECT 1 FROM runs WHERE run_id = ?", [run_id]) is not None:
            raise UsageError(f"example {example_id} is not one of run {run_id}'s examples")
        encoder = run_model(con, run_id, db, model, device)
        stored = stored_token_ids(con, run_id, [example_id])[example_id]
    finally:
        con.close()
    assert row is not None  # run_model refuses a run that does not exist
    text_a, text_b, label, max_length = row
    read = encoder.attention_layers  # the maps come in this order: a hybrid's attention layers only
    chosen = read if layers is None else tuple(layers)
    if bad := [k for k in chosen if not 0 <= k < encoder.num_layers]:
        raise UsageError(
            f"layer {bad[0]} is not one of the model's {encoder.num_layers} layers (0 to {encoder.num_layers - 1})"
        )
    if other := [f for f in encoder.layers if f.layer in chosen and not f.read]:
        raise UsageError(
            f"layer {other[0].layer} of {encoder.name} is {other[0].kind}, not softmax attention: it has no maps "
            f"(its attention layers: {', '.join(map(str, read))})"
        )
    ids, maps = MapCapture(encoder).compute_many([(text_a, text_b)], max_length, token_ids=[stored])[0]
    return ExampleMaps(
        run_id=run_id,
        example_id=example_id,
        model=encoder.name,
        tokens=list(encoder.tokenizer.convert_ids_to_tokens(ids)),
        kinds=token_kinds(encoder, ids),
        layers=chosen,
        maps={lens: m[[read.index(k) for k in chosen]] for lens, m in maps.items()},
        text_a=text_a,
        text_b=text_b,
        label=label,
        causal=encoder.causal,
        num_key_value_heads=encoder.num_key_value_heads,
        other_layers={f.layer: f.kind for f in encoder.layers if not f.read},
        labels=readable_tokens(encoder.tokenizer, ids),
    )
