"""What newer language models bring, end to end through the command line on tiny models of
their own families (tiny_language_models.py): learned sinks (gpt-oss), latent attention
(DeepSeek-V3), chunked attention and layers without rotary positions (Llama 4), and a hybrid
whose attention is one layer in four (Qwen3-Next) — stored under the model's own layer numbers,
its other layers recorded by kind, and the analyses that need every layer refused in one line.
The statistics themselves are checked against eager attention by the census (test_census.py).
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface, AutoConfig, AutoModel, AutoModelForCausalLM
from transformers.masking_utils import eager_mask

from attnwh.ingest.measures import roles
from attnwh.ingest.measures.restriction import kv_bytes_saved, kv_cache_bytes
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.sources import probes
from attnwh.ingest.sources.text import load_sample_text
from helpers import run
from test_roles import WINDOW, eager_maps
from test_roles import reference as roles_reference
from tiny_language_models import make_tiny_language_model
from tiny_models import CORPUS


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            made[family] = make_tiny_language_model(family, tmp_path_factory.mktemp(family), head=True)
        return made[family]

    return get


def _rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def _ingest(monkeypatch, capsys, model: Path, db: Path, *extra: str) -> tuple[int, str, str]:
    return run(
        monkeypatch, capsys, "ingest", "--model", str(model), "--db", str(db), "--task", "sentiment", "--limit", "4",
        "--device", "cpu", *extra,
    )  # fmt: skip


def test_a_learned_sink_share_is_stored_beside_the_first_token_share(monkeypatch, capsys, tiny, tmp_path):
    """gpt-oss: every layer has a learned sink; its share is 1 − the row sums of the eager maps."""
    db = tmp_path / "w.duckdb"
    code, _, err = _ingest(monkeypatch, capsys, tiny("gpt_oss"), db)
    assert code == 0, err
    (low, high, nulls) = _rows(
        db,
        "SELECT min(to_learned_sink), max(to_learned_sink), count(*) FILTER (to_learned_sink IS NULL) FROM head_stats",
    )[0]
    assert nulls == 0 and 0 < low <= high < 1
    layers = _rows(db, "SELECT layer, kind, read, learned_sink, sliding_window FROM model_layers ORDER BY layer")
    assert [r[:4] for r in layers] == [(i, layers[i][1], True, True) for i in range(4)]
    assert {r[1] for r in layers} == {"attention", "sliding"} and {r[4] for r in layers} == {None, 5}
    # One example's sink share against eager: the mean over rows and heads of 1 − Σ_j A[i, j].
    eager = AutoModel.from_pretrained(tiny("gpt_oss"), attn_implementation="eager").eval()
    ((example_id, ids),) = _rows(db, "SELECT example_id, token_ids FROM run_examples LIMIT 1")
    with torch.no_grad():
        maps = eager(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    stored = _rows(
        db, f"SELECT layer, head, to_learned_sink FROM head_stats WHERE example_id = {example_id} ORDER BY layer, head"
    )
    for layer, head, share in stored:
        expected = float((1 - maps[layer][0, head].double().sum(-1)).mean())
        assert share == pytest.approx(expected, abs=1e-5)


def test_a_hybrid_is_stored_under_its_own_layer_numbers(monkeypatch, capsys, tiny, tmp_path):
    """Qwen3-Next: layers 0–2 are linear attention, layer 3 softmax attention with a gated
    output (no norm lens: NULL)."""
    db = tmp_path / "w.duckdb"
    code, _, err = _ingest(monkeypatch, capsys, tiny("qwen3_next"), db)
    assert code == 0, err
    assert _rows(db, "SELECT DISTINCT layer FROM head_stats") == [(3,)]
    assert _rows(
        db, "SELECT count(*) FROM head_stats WHERE norm_to_cls IS NOT NULL OR to_learned_sink IS NOT NULL"
    ) == [(0,)]
    assert _rows(db, "SELECT count(*) FROM head_stats WHERE to_cls IS NULL") == [(0,)]
    assert _rows(db, "SELECT DISTINCT layer FROM pattern_thumbnails") == [(3,)]
    layers = _rows(db, "SELECT layer, kind, read, gated, module FROM model_layers ORDER BY layer")
    assert [r[:4] for r in layers[:3]] == [(i, "linear attention", False, None) for i in range(3)]
    assert layers[3][:4] == (3, "attention", True, True)
    # The massive activations are the hidden states' (every layer), not the attention layers'.
    assert {r[0] for r in _rows(db, "SELECT DISTINCT layer FROM massive_activations")} <= set(range(4))
    # Head roles: scores of layer 3 only.
    code, _, err = run(
        monkeypatch, capsys, "ingest", "roles", "--model", str(tiny("qwen3_next")), "--device", "cpu", "--db", str(db),
        "--examples", "2", "--probes", "induction", "--repeat-length", "8",
    )  # fmt: skip
    assert code == 0, err
    assert _rows(db, "SELECT DISTINCT layer FROM head_roles") == [(3,)]
    # show draws layer 3 and says what the others are; a layer without maps is one line.
    ((run_id, example_id),) = _rows(
        db, "SELECT run_id, example_id FROM run_examples JOIN runs USING (run_id) WHERE kind = 'statistics' LIMIT 1"
    )
    page = tmp_path / "show.html"
    code, _, err = run(
        monkeypatch,
        capsys,
        "show",
        "--db",
        str(db),
        "--run",
        str(run_id),
        "--example",
        str(example_id),
        "--out",
        str(page),
    )
    assert code == 0, err
    assert "layers 0, 1, 2 linear attention (no maps)" in page.read_text(encoding="utf-8")
    code, _, err = run(
        monkeypatch,
        capsys,
        "show",
        "--db",
        str(db),
        "--run",
        str(run_id),
        "--example",
        str(example_id),
        "--layer",
        "1",
        "--out",
        str(page),
    )
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "layer 1" in lines[0] and "linear attention" in lines[0], err


@pytest.mark.parametrize(
    "command",
    [
        ["ingest", "--task", "sentiment", "--limit", "2", "--value-zeroing", "layer"],
        ["ingest", "relations", "--conllu", "{conllu}"],
    ],
    ids=["value zeroing", "relations"],
)
def test_analyses_that_need_every_layer_refuse_a_hybrid_in_one_line(monkeypatch, capsys, tiny, tmp_path, command):
    from test_relations import CONLLU

    db, conllu = tmp_path / "w.duckdb", tmp_path / "t.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    command = [part.format(conllu=conllu) for part in command]
    model = tiny("qwen3_next")
    capsys.readouterr()  # what building it printed
    code, _, err = run(monkeypatch, capsys, *command, "--model", str(model), "--device", "cpu", "--db", str(db))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert "needs every layer" in lines[0] and "layers 0, 1, 2 are linear attention" in lines[0], err


def test_chunked_layers_and_layers_without_rotary_positions_are_recorded(monkeypatch, capsys, tiny, tmp_path):
    """Llama 4: every fourth layer has no rotary positions and attends to everything before it;
    the others are chunked (chunks of 8 in the tiny model)."""
    db = tmp_path / "w.duckdb"
    code, _, err = _ingest(monkeypatch, capsys, tiny("llama4_text"), db)
    assert code == 0, err
    config = AutoConfig.from_pretrained(tiny("llama4_text"))
    layers = _rows(db, "SELECT layer, kind, chunk, rotary FROM model_layers ORDER BY layer")
    for layer, kind, chunk, rotary in layers:
        uses_rope = bool(config.no_rope_layers[layer])
        assert rotary == uses_rope
        assert (kind, chunk) == (("chunked", 8) if uses_rope else ("attention", None))
    assert {r[1] for r in layers} == {"chunked", "attention"}


def test_a_latent_attention_cache_is_its_latent():
    """DeepSeek-V3 caches one latent of kv_lora_rank + qk_rope_head_dim values per token and
    layer for all heads: the whole cache, and the bytes a restriction saves only where every
    head of a layer is restricted."""
    config = AutoConfig.for_model("deepseek_v3", num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8)
    latent = config.kv_lora_rank + config.qk_rope_head_dim
    assert kv_cache_bytes(config, 1000, "bfloat16") == 4 * 1000 * latent * 2
    every_head_of_layer_1 = [(1, g) for g in range(8)]
    assert kv_bytes_saved(config, every_head_of_layer_1, 1000, dtype="bfloat16") == (1000 - 68) * latent * 2
    assert kv_bytes_saved(config, every_head_of_layer_1[:7], 1000, dtype="bfloat16") == 0


def test_a_hybrids_cache_is_its_attention_layers():
    """Qwen3-Next keeps a key/value cache per token on its attention layers only (one in four)."""
    config = AutoConfig.for_model("qwen3_next", num_hidden_layers=8)
    per_layer = config.num_key_value_heads * 2 * config.head_dim * 2
    assert kv_cache_bytes(config, 100, "bfloat16") == 2 * 100 * per_layer
    assert np.sum([t == "full_attention" for t in config.layer_types]) == 2


# ---------------------------------------------------------------- roles, loss sweep and restriction

CLOSE = ("gpt_oss", "deepseek_v3", "qwen3_next")  # learned sinks, latent attention, a hybrid
SPY = "newer-attention-reference"
_spied: dict[str, Any] = {}


def _reference_attention(module: nn.Module, query, key, value, attention_mask, **kwargs):
    """The family's own eager attention, with the dropped keys of restricted key/value groups
    masked before it (restriction) and disabled heads' outputs replaced after it (zero: 0;
    uniform: the mean of the values each row sees, per the mask)."""
    eager = importlib.import_module(type(module).__module__).eager_attention_forward
    layer, heads = int(module.layer_idx), query.shape[1]
    per_group = heads // key.shape[1]
    mask = attention_mask
    restricted = _spied.get("restricted", {}).get(layer, set())
    if restricted and mask is not None:
        n = query.shape[2]
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        dropped = (j >= _spied["sinks"]) & (i - j >= _spied["window"])
        mask = mask.expand(mask.shape[0], heads, n, mask.shape[-1]).clone()
        for group in restricted:
            rows = slice(group * per_group, (group + 1) * per_group)
            mask[:, rows] = mask[:, rows].masked_fill(dropped, float("-inf"))
    output, weights = eager(module, query, key, value, mask, **kwargs)
    disabled = [h for l, h in _spied.get("disabled", ()) if l == layer]
    if disabled:
        output = output.clone()
        for h in disabled:
            if _spied["mode"] == "zero":
                output[:, :, h] = 0
            else:
                seen = (attention_mask[:, 0] > torch.finfo(attention_mask.dtype).min / 2).to(value.dtype)  # (B, q, k)
                v = value[:, h // per_group]  # (B, k, d)
                output[:, :, h] = (seen @ v) / seen.sum(-1, keepdim=True)
    return output, weights


@functools.cache
def _reference_model(path: Path) -> nn.Module:
    AttentionInterface.register(SPY, _reference_attention)
    AttentionMaskInterface.register(SPY, eager_mask)  # without it an unknown implementation gets no mask
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=SPY).eval()


def _reference_nats(path: Path, ids: list[int], **spied: Any) -> float:
    """Summed next-token loss of one unpadded sequence through the reference attention."""
    _spied.clear()
    _spied.update(spied)
    try:
        with torch.no_grad():
            logits = _reference_model(path)(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
    finally:
        _spied.clear()
    logp = torch.log_softmax(logits[:-1], -1)
    return float(-logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())


@pytest.mark.parametrize("family", CLOSE)
def test_head_roles_match_eager_maps(tiny, family):
    """Every role score recomputed from the family's eager maps (test_roles' reference); a
    hybrid's scores are of its attention layers."""
    encoder = load_model(str(tiny(family)), "cpu")
    text = [e.text_a for e in load_sample_text("prose").examples]
    made = [
        *probes.induction_probes(encoder.tokenizer, 2, 12, seed=1),
        *probes.needle_probes(encoder.tokenizer, text, 1, 200, (0.5,), seed=1),
    ]
    result = roles.measure_roles(encoder, made, local_window=WINDOW, attention_memory=1 << 20, batch_size=2)
    assert result.scores.shape[1] == len(encoder.attention_layers)
    for probe, got in zip(made, result.scores):
        want = roles_reference(probe, eager_maps(tiny(family), probe.token_ids))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", CLOSE)
def test_the_loss_sweep_is_a_plain_forward_with_the_head_disabled_another_way(
    monkeypatch, capsys, tiny, tmp_path, family
):
    """`attnwh ingest ablation --task prose`, both modes: every stored loss per sequence equals
    the family's own eager attention with the head's output replaced after it."""
    db = tmp_path / "w.duckdb"
    code, _, err = run(
        monkeypatch, capsys, "ingest", "ablation", "--model", str(tiny(family)), "--task", "prose", "--max-length", "24",
        "--limit", "2", "--resamples", "100", "--mode", "zero", "--mode", "uniform", "--device", "cpu", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    encoder = load_model(str(tiny(family)), "cpu")
    layers = {r[0] for r in _rows(db, "SELECT DISTINCT layer FROM ablation_configs WHERE layer IS NOT NULL")}
    assert layers == set(encoder.attention_layers)
    effects = []
    for run_id, mode in _rows(db, "SELECT DISTINCT run_id, mode FROM ablation_configs"):
        configs = _rows(db, f"SELECT config_id, disabled FROM ablation_configs WHERE run_id = {run_id}")
        for example_id, ids in _rows(db, f"SELECT example_id, token_ids FROM run_examples WHERE run_id = {run_id}"):
            stored = dict(
                _rows(
                    db,
                    f"SELECT config_id, nats FROM ablation_losses WHERE run_id = {run_id} AND example_id = {example_id} AND span = 'all'",
                )
            )
            base = _reference_nats(tiny(family), ids)
            for config_id, disabled in configs:
                heads = [tuple(map(int, pair.split("-"))) for pair in disabled.split(",") if pair]
                expected = _reference_nats(tiny(family), ids, disabled=heads, mode=mode)
                assert stored[config_id] == pytest.approx(expected, abs=1e-4), (mode, disabled)
                effects.append(abs(expected - base))
    assert max(effects) > 1e-2  # disabling moves the loss far beyond the tolerance


@pytest.mark.parametrize("family", CLOSE)
def test_restriction_is_the_family_attention_with_the_dropped_keys_masked(tiny, family):
    """Each key/value group restricted alone, and all of a layer's together, against the
    family's own eager attention with the dropped keys masked (a learned sink keeps its
    logit; a latent-attention layer is restricted head by head)."""
    from attnwh.ingest.measures.restriction import cache_layers, restricted_lm_loss

    encoder = load_model(str(tiny(family)), "cpu", language_model=True)
    config = encoder.model.config
    assert cache_layers(config) == list(encoder.attention_layers)
    groups = int(config.num_key_value_heads)
    ids = encoder.tokenizer(" ".join(CORPUS[:3]), return_tensors="pt")["input_ids"][:, :40]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    sets = [set(), *({(layer, g)} for layer in encoder.attention_layers for g in range(groups))]
    sets.append({(encoder.attention_layers[-1], g) for g in range(groups)})
    loss = restricted_lm_loss(encoder.model, batch, sets, 1, 4, sets_per_pass=2)
    sequence = ids[0].tolist()
    changes = []
    for s, chosen in enumerate(sets):
        by_layer: dict[int, set[int]] = {}
        for layer, group in chosen:
            by_layer.setdefault(layer, set()).add(group)
        expected = _reference_nats(tiny(family), sequence, restricted=by_layer, sinks=1, window=4)
        assert loss.nats[s, 0] == pytest.approx(expected, abs=1e-4), chosen
        changes.append(abs(expected - loss.nats[0, 0]))
    assert max(changes) > 1e-2


# ---------------------------------------------------------------- the other analyses


def test_massive_activations_are_read_through_experts(monkeypatch, capsys, tiny, tmp_path):
    """Qwen3-MoE: the residual stream after blocks of routed experts is scanned as any model's:
    each stored example's top magnitudes per layer, their dimensions and positions and the
    layer's median equal a numpy scan of eager output_hidden_states of the example alone."""
    from test_massive import numpy_scan

    db = tmp_path / "w.duckdb"
    code, _, err = _ingest(monkeypatch, capsys, tiny("qwen3_moe"), db)
    assert code == 0, err
    eager = AutoModel.from_pretrained(tiny("qwen3_moe"), attn_implementation="eager").eval()
    assert any("Experts" in type(m).__name__ for m in eager.modules())
    examples = _rows(db, "SELECT example_id, token_ids FROM run_examples ORDER BY example_id")
    assert len({len(ids) for _, ids in examples}) > 1  # the batch was padded
    for example_id, ids in examples:
        with torch.no_grad():
            states = eager(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[1:]
        want = numpy_scan([s[0].numpy() for s in states], ["other"] * len(ids))
        stored = _rows(
            db,
            "SELECT layer, magnitude, dim, position, median FROM massive_activations "
            f"WHERE example_id = {example_id} ORDER BY layer, rank",
        )
        assert {r[0] for r in stored} == set(range(len(want)))
        for layer, expected in enumerate(want):
            got = [r for r in stored if r[0] == layer]
            np.testing.assert_allclose([r[1] for r in got], expected["magnitude"], rtol=1e-5, atol=0)
            assert [r[2] for r in got] == expected["dim"].tolist()
            assert [r[3] for r in got] == expected["position"].tolist()
            assert got[0][4] == pytest.approx(float(expected["median"]), rel=1e-5)


def test_prompts_read_a_model_with_learned_sinks(monkeypatch, capsys, tiny, tmp_path):
    """gpt-oss read through a prompt: the stored answer logits are the eager language model's
    at the prompt's last token, and the prompted sweep stores a prediction for every
    configuration and example."""
    db, model = tmp_path / "w.duckdb", tiny("gpt_oss")
    prompt = ["--prompt", "--label-words", "the,dog", "--shots", "1", "--shot-seed", "3"]
    code, _, err = _ingest(monkeypatch, capsys, model, db, *prompt)
    assert code == 0, err
    eager = AutoModelForCausalLM.from_pretrained(model, attn_implementation="eager").eval()
    ((described,),) = _rows(db, "SELECT prompt FROM runs")
    label_ids = json.loads(described)["label_token_ids"]
    stored = _rows(db, "SELECT token_ids, logits FROM prompt_predictions JOIN run_examples USING (run_id, example_id)")
    assert len(stored) == 4
    for ids, logits in stored:
        with torch.no_grad():
            last = eager(input_ids=torch.tensor([ids])).logits[0, -1]
        np.testing.assert_allclose(logits, last[label_ids].numpy(), atol=1e-4, rtol=0)
    code, _, err = run(
        monkeypatch, capsys, "ingest", "ablation", "--model", str(model), "--db", str(db), "--task", "sentiment",
        *prompt, "--device", "cpu", "--limit", "4", "--resamples", "100", "--top-k", "1", "--no-importance",
    )  # fmt: skip
    assert code == 0, err
    config = AutoConfig.from_pretrained(model)
    configs = 1 + config.num_hidden_layers * config.num_attention_heads + config.num_hidden_layers
    assert _rows(db, "SELECT count(DISTINCT config_id), count(*) FROM ablation_predictions") >= [(configs, 4 * configs)]


def test_finetune_and_compare_a_learned_sink_model(monkeypatch, capsys, tiny, tmp_path):
    """gpt-oss fine-tuned as its sequence classifier and compared with its base: a change
    stored per example, layer and head."""
    base, out, db = tiny("gpt_oss"), tmp_path / "tuned", tmp_path / "w.duckdb"
    code, _, err = run(
        monkeypatch, capsys, "finetune", "--model", str(base), "--out", str(out), "--db", str(db),
        "--max-train-examples", "16", "--epochs", "1", "--batch-size", "8", "--max-length", "32", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run(
        monkeypatch, capsys, "ingest", "compare", "--base", str(base), "--tuned", str(out), "--db", str(db),
        "--task", "sentiment", "--limit", "4", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    config = AutoConfig.from_pretrained(base)
    (count, low, high) = _rows(db, "SELECT count(*), min(cosine), max(cosine) FROM attention_change")[0]
    assert count == 4 * config.num_hidden_layers * config.num_attention_heads and 0 < low <= high <= 1 + 1e-6


def test_a_family_without_a_sequence_classifier_is_not_fine_tuned(monkeypatch, capsys, tiny, tmp_path):
    """Llama 4 (text) has no sequence-classification class in transformers: one line, before
    any weights load, and nothing written."""
    out, model = tmp_path / "tuned", tiny("llama4_text")
    capsys.readouterr()  # what building it printed
    code, _, err = run(
        monkeypatch, capsys, "finetune", "--model", str(model), "--out", str(out),
        "--db", str(tmp_path / "w.duckdb"), "--epochs", "1", "--device", "cpu",
    )  # fmt: skip
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert "llama4_text" in lines[0] and "sequence classification" in lines[0], err
    assert not out.exists()


def test_compare_of_two_hybrids_matches_eager_maps_of_their_attention_layers(monkeypatch, capsys, tiny, tmp_path):
    """Two Qwen3-Next models of different seeds: the change is stored under the attention
    layer's own number (3), equal to the cosine of the eager maps of each example alone."""
    other = make_tiny_language_model("qwen3_next", tmp_path / "other", seed=1, head=True)
    base, db = tiny("qwen3_next"), tmp_path / "w.duckdb"
    code, _, err = run(
        monkeypatch, capsys, "ingest", "compare", "--base", str(base), "--tuned", str(other), "--db", str(db),
        "--task", "sentiment", "--limit", "4", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    rows = _rows(db, "SELECT example_id, layer, head, cosine FROM attention_change ORDER BY ALL")
    assert {r[1] for r in rows} == {3}
    models = [AutoModel.from_pretrained(p, attn_implementation="eager").eval() for p in (base, other)]
    tokens = dict(_rows(db, "SELECT example_id, token_ids FROM run_examples"))
    for example_id, _, head, cosine in rows:
        with torch.no_grad():
            a, b = (m(input_ids=torch.tensor([tokens[example_id]]), output_attentions=True).attentions for m in models)
        (x,), (y,) = a, b  # one map per attention layer: layer 3's
        x, y = x[0, head].double().ravel(), y[0, head].double().ravel()
        assert cosine == pytest.approx(float(x @ y / (x.norm() * y.norm())), abs=1e-5)


@pytest.mark.parametrize(
    ("family", "says"),
    [("llama4_text", "no sequence classification class"), ("qwen3_next", "layers 0, 1, 2 are linear attention")],
)
def test_a_study_refuses_what_a_later_stage_cannot_do_before_the_first(
    monkeypatch, capsys, tiny, tmp_path, family, says
):
    """`attnwh study` fine-tunes and sweeps the tuned classifier: a family without a sequence
    classifier, or a hybrid, is one line before any stage runs, and nothing is written."""
    model, db = tiny(family), tmp_path / "w.duckdb"
    capsys.readouterr()  # what building it printed
    code, _, err = run(
        monkeypatch, capsys, "study", "--model", str(model), "--db", str(db), "--out-dir", str(tmp_path / "models"),
        "--report", str(tmp_path / "r.html"), "--limit", "4", "--device", "cpu",
    )  # fmt: skip
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and says in lines[0], err
    assert not db.exists() and not (tmp_path / "models").exists()
