"""The ablation sweep on decoders: fine-tuned classifiers (*ForSequenceClassification) and
causal LMs read through a prompt. The prefix cache gives the naive sweep's logits bit for
bit on every family, padded on either side; a disabled head equals an independent
attention function (its own scores, causal and window masks and softmax) in which that
head's weights are uniform over the row's visible real keys, or zero."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from transformers import AttentionInterface, AutoModelForCausalLM, AutoModelForSequenceClassification

from attnwh.ingest.measures.ablation import AblationSweep, combination, head_importance_batch, sweep_configurations
from attnwh.ingest.measures.prompting import label_scores
from attnwh.ingest.model.loading import load_model
from helpers import SENTENCES
from tiny_models import DECODER_FAMILIES, DECODER_WINDOW, make_tiny_decoder

LAYERS, HEADS = 2, 4


def make_decoder_classifier(family: str, out: Path, seed: int = 0) -> Path:
    """A tiny decoder *ForSequenceClassification with 2 labels, as `attnwh finetune` would
    save one: the tiny base's weights, a seeded score head scaled so that disabling a head
    moves the logits well beyond the tolerances, and the pad token id set."""
    base = make_tiny_decoder(family, out / "base", LAYERS, HEADS, seed=seed)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = model.config.eos_token_id
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith("score"):
                param.mul_(30.0)
    folder = out / "classifier"
    model.save_pretrained(folder)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def make_causal_lm(family: str, out: Path, seed: int = 0, positions: int = 64) -> Path:
    """A tiny decoder with its language-model head (tied for GPT-2, a seeded one otherwise)."""
    base = make_tiny_decoder(family, out / "base", LAYERS, HEADS, seed=seed, positions=positions)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    folder = out / "lm"
    model.save_pretrained(folder)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory) -> dict[str, Path]:
    return {f: make_decoder_classifier(f, tmp_path_factory.mktemp(f"dcls-{f}")) for f in DECODER_FAMILIES}


def padded_batch(tokenizer, side: str, n: int = 5) -> dict[str, torch.Tensor]:
    """Texts of mixed lengths (several longer than the sliding window), padded on `side`."""
    texts = [" ".join(SENTENCES[i : i + 1 + i % 3]) for i in range(n)]
    encoded = [tokenizer(t)["input_ids"][:30] for t in texts]
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id
    ids = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        cols = slice(0, len(seq)) if side == "right" else slice(width - len(seq), width)
        ids[row, cols] = torch.tensor(seq)
        mask[row, cols] = 1
    assert (n == 1 or not mask.bool().all()) and width > 2 * DECODER_WINDOW
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("family", DECODER_FAMILIES)
def test_cached_sweep_equals_the_naive_sweep_bit_for_bit(classifiers, family):
    encoder = load_model(str(classifiers[family]), "cpu")
    assert encoder.causal and encoder.architecture.endswith("ForSequenceClassification")
    configs = sweep_configurations(LAYERS, HEADS) + [combination("top_k", [(1, 2), (0, 1)], k=2)]
    cached = AblationSweep(encoder, "uniform")
    assert cached.prefix is not None and cached.prefix.projections is not None  # the cache is really used
    for side, mode in (("right", "uniform"), ("right", "zero"), ("left", "uniform")):
        batch = padded_batch(encoder.tokenizer, side)
        full = AblationSweep(encoder, mode, prefix_cache=False).logits(batch, configs)
        fast = AblationSweep(encoder, mode).logits(batch, configs)
        assert np.array_equal(fast, full), f"{family} {mode} {side}"
        # Every configuration moves the logits, or the comparison would prove little.
        assert (np.abs(full[1:] - full[0]).max(axis=(1, 2)) > 1e-5).all(), f"{family} {mode} {side}"


# ---------------------------------------------------------------- the independent reference

REFERENCE = "attnwh_test_disabled"
_disabled: dict[int, set[int]] = {}  # layer -> heads, for the reference attention below
_state: dict[str, object] = {}


def reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention written out here, with no mask from transformers: the causal, window
    and padding masks come from the 2-D attention mask; disabled heads get uniform weights
    over the visible real keys (or zero) instead of their softmax."""
    heads, kv = query.shape[1], key.shape[1]
    key = key.repeat_interleave(heads // kv, dim=1)
    value = value.repeat_interleave(heads // kv, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query.double(), key.double().transpose(2, 3)) * scaling
    cap = kwargs.get("softcap")
    if cap:
        scores = torch.tanh(scores / cap) * cap
    n = query.shape[2]
    real = _state["key_mask"].bool()  # (B, n)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    visible = (j <= i)[None] & real[:, None, :]
    window = kwargs.get("sliding_window")
    if window:
        visible &= (i - j < window)[None]
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)  # a row that sees nothing: its output is never read
    off = sorted(_disabled.get(module.layer_idx, ()))
    if off:
        uniform = visible.double() / visible.sum(-1, keepdim=True).clamp(min=1)
        replacement = uniform[:, None] if _state["mode"] == "uniform" else torch.zeros_like(uniform)[:, None]
        probs[:, off] = replacement.expand(-1, len(off), -1, -1)
    out = torch.matmul(probs, value.double()).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


def reference_logits(path: Path, batch, heads: set[tuple[int, int]], mode: str) -> np.ndarray:
    AttentionInterface.register(REFERENCE, reference_attention)
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation=REFERENCE).eval()
    _disabled.clear()
    for layer, head in heads:
        _disabled.setdefault(layer, set()).add(head)
    _state.update(key_mask=batch["attention_mask"], mode=mode)
    with torch.no_grad():
        return model(**batch, use_cache=False).logits.numpy()


@pytest.mark.parametrize("family", ["gpt2", "mistral", "gemma2"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_disabled_heads_equal_an_independent_attention_function(classifiers, family, side):
    """GPT-2; Mistral (grouped-query, a window of 5 keys on every layer); Gemma 2 (a window on
    layer 0, soft-capping), each in both modes against the reference written out above."""
    path = classifiers[family]
    encoder = load_model(str(path), "cpu")
    batch = padded_batch(encoder.tokenizer, side)
    configs = sweep_configurations(LAYERS, HEADS) + [combination("top_k", [(1, 2), (0, 1)], k=2)]
    for mode in ("uniform", "zero"):
        out = AblationSweep(encoder, mode).logits(batch, configs)
        for i, config in enumerate(configs):
            expected = reference_logits(path, batch, set(config.heads), mode)
            np.testing.assert_allclose(out[i], expected, atol=1e-5, rtol=0, err_msg=f"{family} {mode} {config}")
        assert (np.abs(out[1:] - out[0]).max(axis=(1, 2)) > 1e-3).all()


def test_gradient_importance_on_a_prompted_language_model(tmp_path):
    """Importance per head from the label words' cross-entropy, against finite differences of
    that loss with one head's output scaled by 1 ± eps, taken on a plain eager Hugging Face
    model with a hook on the output projection (the head's slice of its input scaled)."""
    from transformers import AutoModelForCausalLM

    path = make_causal_lm("llama", tmp_path)
    encoder = load_model(str(path), "cpu", language_model=True)
    assert encoder.architecture == "LlamaForCausalLM"
    batch = padded_batch(encoder.tokenizer, "right", n=1)
    words = [encoder.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" the", " dog")]

    def scorer(model: nn.Module, inputs):
        return label_scores(model, inputs, words)

    targets = torch.tensor([1])
    encoder.model.double()  # finite differences need more precision than float32 gives
    importance = head_importance_batch(encoder, batch, targets, regression=False, scorer=scorer)

    plain = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").double().eval()
    width = plain.config.head_dim if getattr(plain.config, "head_dim", None) else plain.config.hidden_size // HEADS

    def loss(layer: int, head: int, scale: float) -> float:
        def scaled(module, args):
            (context,) = args
            context = context.clone()
            context[..., head * width : (head + 1) * width] *= scale
            return (context,)

        hook = plain.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(scaled)
        try:
            with torch.no_grad():
                scores = scorer(plain, {**batch, "use_cache": False}).double()
        finally:
            hook.remove()
        return float(torch.nn.functional.cross_entropy(scores, targets))

    # Decoders take their softmax in float32 whatever the model's dtype: a step of 1e-2 keeps
    # that rounding far below the difference (the central difference's own error is O(eps²)).
    eps = 1e-2
    for layer, head in [(0, 0), (1, 3)]:
        numeric = (loss(layer, head, 1 + eps) - loss(layer, head, 1 - eps)) / (2 * eps)
        assert abs(numeric) > 1e-6
        assert importance[layer, head] == pytest.approx(abs(numeric), rel=1e-3)


# ---------------------------------------------------------------- `attnwh ingest ablation` on decoders

SWEEP = ["--resamples", "100", "--top-k", "2", "--limit", "6", "--batch-size", "4", "--device", "cpu"]


def table(db: Path, sql: str) -> list[tuple]:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_cli_sweeps_a_fine_tuned_decoder_classifier(classifiers, tmp_path, monkeypatch, capsys):
    from helpers import run

    db = tmp_path / "w.duckdb"
    args = ["ingest", "ablation", "--model", str(classifiers["llama"]), "--task", "sentiment", "--db", str(db)]
    code, out, err = run(monkeypatch, capsys, *args, *SWEEP)
    assert code == 0, err
    n_configs = 1 + LAYERS * HEADS + LAYERS
    [(n, configs, examples)] = table(
        db, "SELECT count(*), count(DISTINCT config_id), count(DISTINCT example_id) FROM ablation_predictions"
    )
    assert examples == 6 and configs >= n_configs and n == configs * 6
    assert table(db, "SELECT prompt FROM runs WHERE kind = 'ablation'") == [(None,)]
    assert table(db, "SELECT count(*) FROM head_importance") == [(LAYERS * HEADS,)]


def test_cli_sweeps_a_language_model_through_its_prompt(tmp_path, monkeypatch, capsys):
    """Two shots and the tiny vocabulary's own label words; rerunning finds the run complete,
    and another prompt (other shots) is another run."""
    import json

    from helpers import run

    monkeypatch.setenv("COLUMNS", "200")  # the summary table on one line
    lm = make_causal_lm("llama", tmp_path, positions=256)  # the byte-level tiny vocabulary makes long prompts
    db = tmp_path / "w.duckdb"
    args = ["ingest", "ablation", "--model", str(lm), "--task", "sentiment", "--db", str(db), "--prompt"]
    args += ["--label-words", "the,dog", "--shots", "2", *SWEEP]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    [(prompt,)] = table(db, "SELECT prompt FROM runs WHERE kind = 'ablation'")
    described = json.loads(prompt)
    assert described["task"] == "sst2" and described["label_words"] == [" the", " dog"]
    assert described["shots"] == 2 and described["seed"] == 42 and len(described["label_token_ids"]) == 2
    before = table(db, "SELECT count(*), count(DISTINCT example_id) FROM ablation_predictions")
    assert before[0][1] == 6 and before[0][0] >= 6 * (1 + LAYERS * HEADS + LAYERS)
    assert table(db, "SELECT count(*) FROM head_importance WHERE importance > 0") == [(LAYERS * HEADS,)]

    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "already complete" in out + err
    assert table(db, "SELECT count(*), count(DISTINCT example_id) FROM ablation_predictions") == before

    code, out, err = run(monkeypatch, capsys, *args[: -len(SWEEP)], "--shot-seed", "7", *SWEEP)
    assert code == 0, err
    seeds = table(db, "SELECT prompt->>'seed' FROM runs WHERE kind = 'ablation' ORDER BY run_id")
    assert seeds == [("42",), ("7",)]


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("lm", [], "a language model has no classification head: give --prompt"),
        ("classifier", ["--prompt"], "is a fine-tuned classifier"),
        ("encoder", ["--prompt"], "is an encoder"),
        ("lm", ["--prompt", "--task", "stsb", "--glue-dir", "{glue}"], "stsb is a regression task"),
    ],
)
def test_cli_refuses_what_cannot_be_swept_in_one_line(
    classifiers, tmp_path_factory, monkeypatch, capsys, model, extra, message
):
    from helpers import run
    from tiny_models import make_tiny

    tmp = tmp_path_factory.mktemp("refused")
    folder = {
        "lm": lambda: make_causal_lm("gpt2", tmp),
        "classifier": lambda: classifiers["gpt2"],
        "encoder": lambda: make_tiny("bert", tmp / "bert"),
    }[model]()
    db = tmp / "w.duckdb"
    sts = tmp / "glue" / "STS-B"
    sts.mkdir(parents=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    (sts / "dev.tsv").write_text(header + "0\tg\tf\t2012\t0\tnone\tnone\tA dog.\tThe dog.\t3.800\n")
    extra = [e.format(glue=tmp / "glue") for e in extra]
    task = [] if "--task" in extra else ["--task", "sentiment"]
    capsys.readouterr()  # what building the models printed
    code, out, err = run(
        monkeypatch, capsys, "ingest", "ablation", "--model", str(folder), "--db", str(db), *task, *extra
    )
    assert code != 0
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not db.exists()
