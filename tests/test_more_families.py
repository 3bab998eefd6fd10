"""ModernBERT, DeBERTa-v2/v3 and MPNet: statistics equal those of the eager path's
`output_attentions=True` maps (DistilBERT's, ELECTRA's and ALBERT's too), disabled heads
equal hand-made forward passes, the cached path equals the full one, gradient importance
equals a finite difference, compare, relations and ingest write complete runs, and the
observer-coverage check fails loudly.

ModernBERT goes through attnwh's registered attention function (its local layers see a
sliding window); DeBERTa and MPNet compute softmax and value product inline and are observed
through `inline.py`'s torch function mode. The references below are written per family from
the eager model's own modules (value projection and W_O), not from attnwh's code.
"""

from __future__ import annotations

import inspect
import json
import unicodedata
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import torch
from torch import nn
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
from transformers.masking_utils import create_bidirectional_sliding_window_mask

from attnwh.errors import ModelError
from attnwh.ingest.measures.ablation import (
    AblationSweep,
    HeadGates,
    combination,
    head_importance_batch,
    sweep_configurations,
)
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS, STAT_COLUMNS
from attnwh.ingest.model import capture, inline, reading
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.families import facts_of
from attnwh.ingest.model.loading import forward_inputs, load_model
from attnwh.ingest.runs.loop import StatisticsCapture
from attnwh.ingest.sources.examples import Example, TaskData
from helpers import SENTENCES, counts, ingest_args, run, write_pairs
from test_compare import compare_in_db, eager_maps
from test_relations import CONLLU, EXPECTED_TOTALS
from test_statistics import assert_matches_reference, layer_rows, task
from tiny_models import make_sharp_classifier, make_tiny

FAMILIES = ("modernbert", "deberta-v2", "mpnet")
# Families of BERT's layout (tiny_model_dir's models, also 2 layers of 4 heads), in the
# statistics parity test only: DistilBERT's own module names, ELECTRA's embedding projection,
# ALBERT's one layer shared by every depth.
BERT_LIKE = ("distilbert", "electra", "albert")
LAYERS, HEADS = 2, 4  # the plain models (statistics, compare, relations, ingest)
ABL_LAYERS = 3  # the classifiers: ModernBERT's layers 0 and 2 global, 1 local
STATS_MAX_LENGTH = 40  # DeBERTa's tiny tokenizer is nearly character-level: pairs are cut


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    return {f: make_tiny(f, tmp_path_factory.mktemp(f"more-{f}"), layers=LAYERS, heads=HEADS) for f in FAMILIES}


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory) -> dict[str, Path]:
    return {f: make_sharp_classifier(f, tmp_path_factory.mktemp(f"more-abl-{f}"), ABL_LAYERS, HEADS) for f in FAMILIES}


# ---------------------------------------------------------------- each family's own modules


def value_and_output(model: nn.Module) -> list[tuple[nn.Linear, nn.Linear, bool]]:
    """Per layer of an eager model: the module whose output holds the value vectors, the
    attention output projection W_O, and whether the values are the last third of a fused
    Q, K, V projection (ModernBERT's Wqkv, head-major)."""
    family = model.config.model_type
    base: Any = model.base_model
    if family == "modernbert":
        return [(layer.attn.Wqkv, layer.attn.Wo, True) for layer in base.layers]
    if family == "distilbert":
        return [(layer.attention.v_lin, layer.attention.out_lin, False) for layer in base.transformer.layer]
    if family == "albert":  # one shared layer at every depth
        shared = base.encoder.albert_layer_groups[0].albert_layers[0].attention
        return [(shared.value, shared.dense, False)] * model.config.num_hidden_layers
    if family == "deberta-v2":
        return [(layer.attention.self.value_proj, layer.attention.output.dense, False) for layer in base.encoder.layer]
    if family == "mpnet":
        return [(layer.attention.attn.v, layer.attention.attn.o, False) for layer in base.encoder.layer]
    # BERT, ELECTRA
    return [(layer.attention.self.value, layer.attention.output.dense, False) for layer in base.encoder.layer]


def windows(model: nn.Module) -> list[int | None]:
    """Per layer: the half-width w of a sliding-window layer (it sees |i - j| <= w), else None."""
    config = model.config
    if config.model_type != "modernbert":
        return [None] * config.num_hidden_layers
    return [config.sliding_window if t == "sliding_attention" else None for t in config.layer_types]


def band(seq: int, window: int | None) -> torch.Tensor:
    """(seq, seq): the keys each query may see by position alone."""
    if window is None:
        return torch.ones(seq, seq, dtype=torch.bool)
    pos = torch.arange(seq)
    return (pos[:, None] - pos[None, :]).abs() <= window


def take_values(out: torch.Tensor, fused: bool) -> torch.Tensor:
    return out[..., 2 * out.shape[-1] // 3 :] if fused else out


def is_punct(token: str) -> bool:
    """Unicode punctuation only, once the word-piece markers (Ġ, ▁, ##) are removed."""
    text = token.replace("Ġ", "").replace("▁", "").removeprefix("##")
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def reference(model: nn.Module, tokenizer, ids: list[int], types: list[int] | None = None) -> np.ndarray:
    """(layer, head, column) for one unpadded example from the eager model's
    output_attentions maps and its own value projection outputs and W_O; `types`: the
    segment ids, for the models that take them."""
    parts = value_and_output(model)
    values: list[torch.Tensor] = []
    # One hook per module: ALBERT's one value projection runs once per layer.
    unique = {id(v): (v, fused) for v, _, fused in parts}.values()
    hooks = [
        v.register_forward_hook(lambda m, a, out, fused=fused: values.append(take_values(out, fused)))
        for v, fused in unique
    ]
    inputs = {"input_ids": torch.tensor([ids])}
    if types is not None and "token_type_ids" in inspect.signature(model.forward).parameters:
        inputs["token_type_ids"] = torch.tensor([types])
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(out.attentions) == len(parts) == len(values)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special = set(tokenizer.all_special_ids)
    cls = np.array([i == tokenizer.cls_token_id for i in ids], float)
    sep = np.array([i == tokenizer.sep_token_id for i in ids], float)
    punct = np.array([is_punct(t) and i not in special for t, i in zip(tokens, ids)], float)
    result = []
    for maps, v, (_, wo, _) in zip(out.attentions, values, parts):
        a = maps[0].double().numpy()  # (H, n, n)
        v = v[0].double().numpy()  # (n, H * d)
        wo = wo.weight.detach().double().numpy()
        result.append(layer_rows(a, v, wo, cls, sep, punct))
    return np.array(result)


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize("family", FAMILIES + BERT_LIKE)
@pytest.mark.parametrize("pair", [False, True])
def test_statistics_match_eager_output_attentions(tiny, tiny_model_dir, family, pair):
    path = tiny[family] if family in tiny else tiny_model_dir(family)
    encoder = load_model(str(path), device="cpu")
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    data = task(pair)
    encoded = encode_task(encoder.tokenizer, data, STATS_MAX_LENGTH)
    stats = StatisticsCapture(encoder)
    # All examples in one batch: the shorter ones are padded to the longest.
    everything = list(range(len(data.examples)))
    batch = collate(encoded, everything, encoder.tokenizer.pad_token_id, encoder.device)
    assert not batch["attention_mask"].bool().all()
    batched = stats.run(batch)
    assert batched.shape == (len(everything), LAYERS, HEADS, len(OBSERVED_COLUMNS))
    for i in everything:
        types = None if encoded.token_type_ids is None else encoded.token_type_ids[i].tolist()
        expected = reference(eager, encoder.tokenizer, encoded.input_ids[i].tolist(), types)
        assert_matches_reference(batched[i], expected, err_msg=f"example {i}")
        alone = stats.run(collate(encoded, [i], encoder.tokenizer.pad_token_id, encoder.device))
        assert_matches_reference(alone[0], batched[i])
    # The statistics must vary, or the comparison above would prove little.
    assert batched[..., STAT_COLUMNS.index("to_cls")].std() > 1e-3
    assert batched[..., STAT_COLUMNS.index("to_punct")].max() > 0
    assert batched[..., STAT_COLUMNS.index("to_sep")].max() > 0
    assert batched[..., STAT_COLUMNS.index("norm_to_sep")].std() > 1e-3
    for name in ("col_cls", "col_other", "band"):
        assert batched[..., OBSERVED_COLUMNS.index(name)].std() > 1e-3, name
    assert (batched[..., OBSERVED_COLUMNS.index("block")].max() > 0) == pair
    if pair and family in ("electra", "albert"):  # segment ids reach the model and the reference alike
        assert encoded.token_type_ids is not None and max(t.max() for t in encoded.token_type_ids) == 1


def test_modernbert_local_layers_see_only_their_window(tiny):
    """On the local layers every key outside |i - j| <= window has weight exactly 0 in the
    captured maps, the mask handed to observers is the eager model's own mask, and the
    captured maps and the statistics equal the eager model's."""
    path = tiny["modernbert"]
    encoder = load_model(str(path), device="cpu")
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    data = task(True)
    encoded = encode_task(encoder.tokenizer, data, STATS_MAX_LENGTH)
    batch = collate(encoded, list(range(len(data.examples))), encoder.tokenizer.pad_token_id, encoder.device)
    real = batch["attention_mask"].bool()
    rows, seq = real.shape
    assert not real.all() and seq > 8
    layer_windows = windows(eager)
    assert layer_windows == [None, 2] and eager.config.local_attention == 4

    # The window as the eager model builds it: the keys within it, less the padding.
    with torch.no_grad():
        embeds = eager.embeddings(input_ids=batch["input_ids"])
    eager_mask = create_bidirectional_sliding_window_mask(
        config=eager.config, inputs_embeds=embeds, attention_mask=batch["attention_mask"]
    )
    sees = band(seq, 2)[None] & real[:, None, :]  # (B, S, S)
    assert torch.equal(eager_mask[:, 0] > torch.finfo(eager_mask.dtype).min / 2, sees)

    class KeepMasks(capture.KeepMaps):
        def __init__(self) -> None:
            super().__init__()
            self.masks: list[torch.Tensor | None] = []

        def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
            self.masks.append(capture.observed_mask())
            return super().observe(module, probs, value)

    keep = KeepMasks()
    with torch.no_grad(), capture.observing(keep):
        encoder.model(**forward_inputs(encoder.model, batch))
    assert len(keep.maps) == LAYERS
    query_rows = real[:, None, :, None]  # padding query rows may see nothing real
    for layer, window in enumerate(layer_windows):
        probs, mask = keep.maps[layer], keep.masks[layer]
        assert probs is not None and mask is not None
        allowed = (band(seq, window)[None] & real[:, None, :])[:, None]  # (B, 1, S, S)
        assert torch.equal(mask > torch.finfo(mask.dtype).min / 2, allowed)
        outside = torch.where(query_rows & ~band(seq, 2), probs, 0)
        if window is not None:
            assert (outside == 0).all()  # exactly: the window is in the mask, not approximated
        else:
            assert outside.max() > 1e-2  # a global layer looks beyond it (else the test is vacuous)
    # The kept maps are the eager maps, and the statistics the reference's, example by example.
    stats = StatisticsCapture(encoder).run(batch)
    for i in range(rows):
        n = int(real[i].sum())
        with torch.no_grad():
            expected = eager(input_ids=batch["input_ids"][i : i + 1, :n], output_attentions=True).attentions
        for layer in range(LAYERS):
            kept = keep.maps[layer]
            assert kept is not None
            torch.testing.assert_close(kept[i, :, :n, :n], expected[layer][0], atol=1e-6, rtol=0)
        ids = batch["input_ids"][i, :n].tolist()
        assert_matches_reference(stats[i], reference(eager, encoder.tokenizer, ids))


# ---------------------------------------------------------------- disabling heads

SHORT = ("It stayed warm.", "A film!", "Is this the station?", "Two people walk.", "Cheap tickets.", "Why?")


def pair_batch(encoder, n: int = 6) -> dict[str, torch.Tensor]:
    """Padded sentence pairs, as `test_ablation.batch_for` makes them, with short second
    sentences: DeBERTa's nearly character-level pieces would cut every one of its pairs to
    the same length."""
    examples = tuple(Example(i, None, SENTENCES[i % len(SENTENCES)], SHORT[i % len(SHORT)], "0") for i in range(n))
    data = TaskData("test", "toy", "dev", examples, ("0", "1"), "test")
    encoded = encode_task(encoder.tokenizer, data, 48)
    batch = collate(encoded, list(range(n)), encoder.tokenizer.pad_token_id, encoder.device)
    assert not batch["attention_mask"].bool().all()  # padded
    return batch


def hand_disabled_logits(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    disabled: set[tuple[int, int]],
    mode: str,
    layer_windows: list[int | None] | None = None,
) -> np.ndarray:
    """Logits of an eager classifier whose disabled heads are replaced by hand: a pre-hook on
    W_O sets each one's slice of W_O's input to the mean of its value vectors (taken from the
    value projection's output) over the keys its query may see (the real tokens, within the
    window on a sliding-window layer: `layer_windows`, by default the model's), or to 0."""
    real = batch["attention_mask"].bool()
    seq = real.shape[1]
    heads_n = model.config.num_attention_heads
    hooks = []
    for layer_index, ((value, wo, fused), window) in enumerate(
        zip(value_and_output(model), layer_windows or windows(model))
    ):
        heads = sorted(h for l, h in disabled if l == layer_index)
        if not heads:
            continue
        sees = (band(seq, window)[None] & real[:, None, :]).float()  # (B, S, S)
        weights = sees / sees.sum(-1, keepdim=True).clamp_min(1)
        stored: dict[str, torch.Tensor] = {}

        def keep(mod, args, out, fused=fused, stored=stored):
            stored["values"] = take_values(out, fused)

        def replace(mod, args, heads=heads, weights=weights, stored=stored):
            context = args[0].clone()  # (B, S, H * d)
            values = stored.pop("values")
            d = values.shape[-1] // heads_n
            for h in heads:
                part = slice(h * d, (h + 1) * d)
                context[..., part] = weights @ values[..., part] if mode == "uniform" else 0.0
            return (context, *args[1:])

        hooks += [value.register_forward_hook(keep), wo.register_forward_pre_hook(replace)]
    try:
        with torch.no_grad():
            logits = model(**forward_inputs(model, batch)).logits
    finally:
        for hook in hooks:
            hook.remove()
    return logits.numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_disabled_heads_equal_hand_replaced_forward_passes(classifiers, family):
    path = classifiers[family]
    encoder = load_model(str(path), "cpu")
    eager = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    batch = pair_batch(encoder)
    configs = sweep_configurations(encoder.num_layers, encoder.num_heads)
    assert encoder.num_layers == ABL_LAYERS and len(configs) == 1 + ABL_LAYERS * HEADS + ABL_LAYERS
    for mode in ("uniform", "zero"):
        out = AblationSweep(encoder, mode).logits(batch, configs)
        for i, config in enumerate(configs):
            expected = hand_disabled_logits(eager, batch, set(config.heads), mode)
            np.testing.assert_allclose(out[i], expected, atol=1e-5, rtol=0, err_msg=f"{mode} {config}")
        # Every configuration moves the logits far beyond the tolerance (else the test is vacuous;
        # MPNet's least moved logit moves by 3e-3 to 7e-3, whatever its tiny tokenizer's ids).
        assert (np.abs(out[1:] - out[0]).max(axis=(1, 2)) > 1e-4).all(), mode


def test_uniform_disabling_on_a_local_layer_keeps_to_the_window(classifiers):
    """On ModernBERT's local layer, the mean over all real tokens is not what uniform
    disabling does: the hand reference over all keys differs, the one over the window agrees."""
    path = classifiers["modernbert"]
    encoder = load_model(str(path), "cpu")
    eager = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    batch = pair_batch(encoder)
    local = [c for c in sweep_configurations(ABL_LAYERS, HEADS) if c.kind == "layer" and c.layer == 1]
    out = AblationSweep(encoder, "uniform").logits(batch, local)[0]
    np.testing.assert_allclose(out, hand_disabled_logits(eager, batch, set(local[0].heads), "uniform"), atol=1e-5)
    everywhere = hand_disabled_logits(eager, batch, set(local[0].heads), "uniform", [None] * ABL_LAYERS)
    assert np.abs(out - everywhere).max() > 1e-3


def within(cached: np.ndarray, full: np.ndarray, absolute: float, relative: float) -> bool:
    diff = np.abs(cached - full)
    return bool(((diff <= absolute) | (diff <= relative * np.abs(full))).all())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("per_pass", [1, 5])
def test_cached_prefix_path_equals_the_full_path(classifiers, family, per_pass):
    encoder = load_model(str(classifiers[family]), "cpu")
    batch = pair_batch(encoder)
    configs = sweep_configurations(encoder.num_layers, encoder.num_heads) + [
        combination("top_k", [(2, 1), (1, 3)], k=2)
    ]
    for mode in ("uniform", "zero"):
        full = AblationSweep(encoder, mode, prefix_cache=False).logits(batch, configs)
        sweep = AblationSweep(encoder, mode, prefix_cache=True, configs_per_pass=per_pass)
        assert sweep.prefix is not None and sweep.prefix.projections is not None  # the cache is used
        cached = sweep.logits(batch, configs)
        if per_pass == 1:
            assert np.array_equal(cached, full), mode  # the same operations on the same tensors
        else:  # a batch of another size may take other kernels
            assert within(cached, full, 2e-5, 1e-5), (mode, np.abs(cached - full).max())
        assert (np.abs(full[1:] - full[0]).max(axis=(1, 2)) > 5e-5).all()  # every configuration matters


@pytest.mark.parametrize("family", FAMILIES)
def test_importance_is_the_gradient_of_the_loss_with_respect_to_a_head_gate(classifiers, family):
    """Finite differences of the summed loss with one example's gate on one head scaled by
    1 ± eps; the importance is the sum over the (padded) batch's examples of their absolute
    values."""
    encoder = load_model(str(classifiers[family]), "cpu")
    batch = pair_batch(encoder, n=3)
    rows = batch["input_ids"].shape[0]
    targets = torch.tensor([1, 0, 1])
    importance = head_importance_batch(encoder, batch, targets, regression=False)
    assert importance.shape == (ABL_LAYERS, HEADS)

    encoder.model.double()  # finite differences need more precision than float32 gives

    def loss(layer: int, row: int, head: int, scale: float) -> float:
        gates = torch.ones((ABL_LAYERS, rows, HEADS), dtype=torch.float64)
        gates[layer, row, head] = scale
        with torch.no_grad(), capture.observing(HeadGates(gates)):
            logits = encoder.model(**forward_inputs(encoder.model, batch)).logits.double()
        return float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))

    # ModernBERT's rotary embedding rounds queries and keys to float32 even in a float64
    # model: steps of 1e-4 put the quotient's error near the tolerance, 1e-3 well below it.
    eps = 1e-3
    for layer, head in [(0, 0), (1, 2), (2, 3)]:
        numeric = [(loss(layer, r, head, 1 + eps) - loss(layer, r, head, 1 - eps)) / (2 * eps) for r in range(rows)]
        expected = sum(abs(x) for x in numeric)
        assert expected > 1e-5  # the head matters, so the comparison can fail
        assert importance[layer, head] == pytest.approx(expected, rel=1e-3), (layer, head, numeric)


# ---------------------------------------------------------------- compare, relations, ingest

# The last layer's query and key weights: ModernBERT's are the first two thirds of Wqkv.
QUERY_KEY = {
    "modernbert": ("attn.Wqkv.weight",),
    "deberta-v2": ("attention.self.query_proj.weight", "attention.self.key_proj.weight"),
    "mpnet": ("attention.attn.q.weight", "attention.attn.k.weight"),
}


def perturb_last_layer(family: str, src: Path, out: Path, scale: float = 0.5, seed: int = 1) -> Path:
    """A "tuned" copy of the model at `src`: noise on the last layer's query and key weights
    only, saved with the same tokenizer (tests/test_compare.py's, with each family's names)."""
    model = AutoModel.from_pretrained(src)
    last = model.config.num_hidden_layers - 1
    prefix = f"layers.{last}." if family == "modernbert" else f"encoder.layer.{last}."
    generator = torch.Generator().manual_seed(seed)
    touched = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith(prefix) and name.endswith(QUERY_KEY[family]):
                rows = 2 * model.config.hidden_size if family == "modernbert" else param.shape[0]
                noise = torch.randn(param[:rows].shape, generator=generator)
                param[:rows].add_(scale * param.abs().mean() * noise * 10)
                touched.append(name)
    assert len(touched) == len(QUERY_KEY[family]), touched
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_compare_matches_eager_maps_and_writes_a_complete_run(tiny, tmp_path, family):
    base = tiny[family]
    tuned = perturb_last_layer(family, base, tmp_path / "tuned")
    data = write_pairs(tmp_path / "pairs.tsv", 7)
    db = tmp_path / "w.duckdb"
    # One batch of 7 examples of different lengths: all but the longest are padded.
    prepared, stored = compare_in_db(base, tuned, data, db)
    assert len(set(prepared.encoded.n_tokens.tolist())) > 1
    assert set(stored) == set(prepared.example_ids.tolist())
    for i, eid in enumerate(prepared.example_ids.tolist()):
        ids = prepared.encoded.input_ids[i]
        types = None if prepared.encoded.token_type_ids is None else prepared.encoded.token_type_ids[i]
        expected = np.array(
            [
                [np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(la, lb)]
                for la, lb in zip(eager_maps(base, ids, types), eager_maps(tuned, ids, types))
            ]
        )
        np.testing.assert_allclose(stored[eid], expected, atol=1e-5, rtol=0)
    values = np.array(list(stored.values()))  # (example, layer, head)
    assert values.shape == (7, LAYERS, HEADS)
    np.testing.assert_allclose(values[:, :-1], 1.0, atol=1e-6, rtol=0)  # only the last layer changed
    assert values[:, -1].min() < 0.99
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT kind, status, n_examples FROM runs").fetchall()
        rows = con.execute("SELECT count(*) FROM attention_change").fetchall()[0][0]
        family_rows = con.execute("SELECT DISTINCT family FROM models").fetchall()
    assert runs == [("compare", "complete", 7)]
    assert rows == 7 * LAYERS * HEADS and family_rows == [(family,)]


@pytest.mark.parametrize("family", FAMILIES)
def test_relations_command_measures_every_dependency(monkeypatch, capsys, tiny, tmp_path, family):
    treebank = tmp_path / "tiny-ud-dev.conllu"
    treebank.write_text(CONLLU, encoding="utf-8")
    db = tmp_path / "w.duckdb"
    args = ["ingest", "relations", "--conllu", str(treebank), "--model", str(tiny[family]), "--db", str(db)]
    code, out, err = run(monkeypatch, capsys, *args, "--batch-size", "2")
    assert code == 0, err
    assert "3 sentences" in out
    with duckdb.connect(str(db), read_only=True) as con:
        totals = dict(con.execute("SELECT relation, max(total) FROM dependency_heads GROUP BY relation").fetchall())
        n_rows = con.execute("SELECT count(*) FROM dependency_heads").fetchall()[0][0]
        baselines = dict(
            con.execute("SELECT relation, total FROM dependency_baselines WHERE direction = 'dep_to_head'").fetchall()
        )
        runs = con.execute("SELECT kind, status, n_examples, n_truncated FROM runs").fetchall()
    assert totals == EXPECTED_TOTALS  # every dependency measured: each word has its pieces
    assert n_rows == len(EXPECTED_TOTALS) * 2 * LAYERS * HEADS
    assert baselines == EXPECTED_TOTALS
    assert runs == [("relations", "complete", 3, 0)]


@pytest.mark.parametrize("family", FAMILIES)
def test_ingest_command_writes_a_complete_run(monkeypatch, capsys, tiny, tmp_path, family):
    db = tmp_path / "w.duckdb"
    pairs = write_pairs(tmp_path / "pairs.tsv")
    code, out, err = run(monkeypatch, capsys, *ingest_args(tiny[family], pairs, db, "--limit", "6"))
    assert code == 0, err
    assert "head-statistics rows" in out
    assert counts(db)["head_stats"] == 6 * LAYERS * HEADS
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT kind, status, n_examples FROM runs").fetchall()
        model = con.execute("SELECT family, num_layers, num_heads FROM models").fetchall()
        missing = con.execute("SELECT count(*) FROM head_stats WHERE to_cls IS NULL OR isnan(to_cls)").fetchall()
    assert runs == [("statistics", "complete", 6)]
    assert model == [(family, LAYERS, HEADS)]
    assert missing == [(0,)]


# ---------------------------------------------------------------- the observer-coverage check


class OwnAttention(nn.Module):
    """BERT self-attention computed in its own forward (scores, its own softmax and matmul):
    neither transformers' attention interface nor a class attnwh taps inline."""

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.query, self.key, self.value = original.query, original.key, original.value
        self.heads = int(original.num_attention_heads)
        self.size = int(original.attention_head_size)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: object):
        shape = (*hidden_states.shape[:-1], self.heads, self.size)
        q, k, v = (p(hidden_states).view(shape).transpose(1, 2) for p in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / self.size**0.5
        if attention_mask is not None:
            scores = scores + attention_mask
        context = torch.softmax(scores, dim=-1) @ v
        return context.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1), None


def test_the_check_at_load_fails_loudly_on_attention_it_cannot_reach(tiny_model_dir):
    encoder = load_model(str(tiny_model_dir("bert")), "cpu")
    model = encoder.model
    assert OwnAttention.__name__ not in inline.INLINE_ATTENTION
    probe = forward_inputs(
        model, dict(encoder.tokenizer(reading.PROBE_TEXT, return_tensors="pt", truncation=True, max_length=40))
    )
    facts = facts_of("bert")
    as_loaded = reading.read(model, model.config, facts, probe, "tiny bert", encoder.num_layers, HEADS, False)
    assert as_loaded.attention_layers == (0, 1)  # as loaded: every layer seen
    with torch.no_grad():
        before = model(**probe).last_hidden_state
    attention: Any = model.encoder.layer[1].attention
    attention.self = OwnAttention(attention.self)
    with torch.no_grad():
        after = model(**probe).last_hidden_state
    # The replacement is a faithful attention (the model computes the same), only unseen.
    torch.testing.assert_close(after, before, atol=1e-5, rtol=0)
    with pytest.raises(ModelError, match=r"layer 1 of tiny bert computes its attention \(OwnAttention\) outside"):
        reading.read(model, model.config, facts, probe, "tiny bert", encoder.num_layers, HEADS, False)


# ---------------------------------------------------------------- a window wider than the input


@pytest.fixture(scope="module")
def wide_window(tmp_path_factory) -> Path:
    """The ModernBERT classifier with a window of |i - j| <= 32 on its local layer (real
    ModernBERT's is 64): most inputs fit inside it."""
    path = make_sharp_classifier("modernbert", tmp_path_factory.mktemp("more-wide-window"), ABL_LAYERS, HEADS)
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config["local_attention"] = 64
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def local_layer_configs() -> list:
    return [c for c in sweep_configurations(ABL_LAYERS, HEADS) if c.layer == 1 and c.kind in ("head", "layer")]


def test_a_wide_window_on_padded_batches_and_in_zero_mode(wide_window):
    encoder = load_model(str(wide_window), "cpu")
    eager = AutoModelForSequenceClassification.from_pretrained(wide_window, attn_implementation="eager").eval()
    assert windows(eager) == [None, 32, None]
    configs = local_layer_configs()
    padded = pair_batch(encoder)
    unpadded = dict(encoder.tokenizer(["The quick brown fox jumps over the lazy dog."], return_tensors="pt"))
    for batch, mode in [(padded, "uniform"), (padded, "zero"), (unpadded, "zero")]:
        out = AblationSweep(encoder, mode).logits(batch, configs)
        for i, config in enumerate(configs):
            expected = hand_disabled_logits(eager, batch, set(config.heads), mode)
            np.testing.assert_allclose(out[i], expected, atol=1e-5, rtol=0, err_msg=f"{mode} {config}")


def test_uniform_disabling_of_a_local_layer_when_the_input_fits_in_the_window(wide_window):
    """Unpadded and shorter than the window, a local layer gets no mask from transformers:
    the disabled head is uniform over every real token, as the eager model computes."""
    encoder = load_model(str(wide_window), "cpu")
    eager = AutoModelForSequenceClassification.from_pretrained(wide_window, attn_implementation="eager").eval()
    configs = local_layer_configs()
    # One sentence, or several of one length: no padding, 12 tokens, all within |i - j| <= 32.
    batch = dict(encoder.tokenizer(["The quick brown fox jumps over the lazy dog."], return_tensors="pt"))
    assert batch["attention_mask"].bool().all() and batch["input_ids"].shape[1] <= 32
    out = AblationSweep(encoder, "uniform").logits(batch, configs)
    for i, config in enumerate(configs):
        expected = hand_disabled_logits(eager, batch, set(config.heads), "uniform")
        np.testing.assert_allclose(out[i], expected, atol=1e-5, rtol=0, err_msg=f"{config}")
