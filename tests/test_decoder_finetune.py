"""Decoders fine-tuned as classifiers (`attnwh finetune`), and compared with their base
(`attnwh ingest compare`).

A causal language model is trained as its ``...ForSequenceClassification``: the head reads
the last real token. Checked against plain transformers: the training loss falls (seeded),
a right-padded row (attnwh's batches) gives the logits of the row alone, the pooled logits
are the head applied to the last real token's hidden state whatever the padding side, the
tuned folder loads back in attnwh with the body the classifier trained, and the stored
cosines of base and tuned maps equal those recomputed from HF's eager
``output_attentions=True`` maps of both models, one unpadded example at a time.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification

from attnwh.errors import ModelError
from attnwh.ingest.measures.change import ChangeCapture, check_compatible, prepare_comparison
from attnwh.ingest.model import capture
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs.finetune import FinetuneOptions, FinetuneResult, finetune
from attnwh.ingest.runs.loop import IngestOptions, ingest_runs
from attnwh.ingest.sources.examples import TaskData
from attnwh.ingest.sources.files import load_sample
from helpers import run
from tiny_models import make_tiny_decoder

FAMILIES = ("llama", "gpt2")
# A tiny random model needs large steps to move in two epochs of 32 examples.
OPTIONS = FinetuneOptions(epochs=2, learning_rate=1e-3, batch_size=8, max_length=32, seed=3)
MAX_LENGTH = 32


@pytest.fixture(scope="module")
def data() -> tuple[TaskData, TaskData]:
    return load_sample("sentiment", "train").sample(32, 1), load_sample("sentiment", "dev").sample(12, 1)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, data) -> dict[str, tuple[Path, Path, Path, FinetuneResult]]:
    """Per family: the tiny base decoder, its untrained seeded classifier (epochs 0: the
    head the training starts from) and the trained one, with the training's result."""
    train, dev = data
    out = {}
    for family in FAMILIES:
        root = tmp_path_factory.mktemp(f"ft-{family}")
        base = make_tiny_decoder(family, root / "base")
        untrained = root / "untrained"
        finetune(str(base), train, dev, untrained, FinetuneOptions(**{**OPTIONS.__dict__, "epochs": 0}), "cpu")
        result = finetune(str(base), train, dev, root / "tuned", OPTIONS, "cpu")
        out[family] = (base, untrained, root / "tuned", result)
    return out


def classifier(path: Path) -> torch.nn.Module:
    return AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()


def batch_of(path: Path, data: TaskData) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """attnwh's right-padded batch of every example of `data`, with the gold class ids."""
    tokenizer = load_model(str(path), device="cpu").tokenizer
    encoded = encode_task(tokenizer, data, MAX_LENGTH)
    batch = collate(encoded, range(len(data.examples)), tokenizer.pad_token_id, torch.device("cpu"))
    labels = torch.tensor([data.labels.index(e.label) for e in data.examples])  # type: ignore[union-attr]
    return batch, labels


@pytest.mark.parametrize("family", FAMILIES)
def test_finetuning_lowers_the_training_loss(tuned, data, family):
    """Cross-entropy over the train examples, by plain transformers on the saved folders:
    the untrained seeded head against the trained classifier."""
    _, untrained, trained, result = tuned[family]
    batch, labels = batch_of(trained, data[0])
    with torch.no_grad():
        before = classifier(untrained)(**batch, labels=labels).loss.item()
        after = classifier(trained)(**batch, labels=labels).loss.item()
    print(f"\n{family}: training loss {before:.4f} before, {after:.4f} after ({result.train_seconds:.2f} s)")
    assert after < before - 0.05, (before, after)
    assert result.final_loss is not None and np.isfinite(result.final_loss)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_padded_row_gives_the_logits_of_the_row_alone(tuned, data, family):
    """The head reads the last real token of a right-padded row (attnwh's batches), so its
    logits are those of the row alone; and with either padding side, HF's pooled logits are
    the head applied to the hidden state of the row's last real token, found from the mask."""
    model = classifier(tuned[family][2])
    batch, _ = batch_of(tuned[family][2], data[1])
    lengths = batch["attention_mask"].sum(-1)
    assert len(set(lengths.tolist())) > 1  # some rows are padded
    with torch.no_grad():
        together = model(**batch).logits
        for row, n in enumerate(lengths.tolist()):
            alone = model(input_ids=batch["input_ids"][row : row + 1, :n]).logits
            torch.testing.assert_close(together[row : row + 1], alone, atol=1e-5, rtol=0)
        tokenizer = load_model(str(tuned[family][2]), device="cpu").tokenizer
        texts = [e.text_a for e in data[1].examples]
        for side in ("left", "right"):
            inputs = tokenizer(
                texts, padding=True, padding_side=side, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
            )
            hidden = model.base_model(**inputs).last_hidden_state
            mask = inputs["attention_mask"]
            last = (torch.arange(mask.shape[1]) * mask).argmax(-1)  # the rightmost real token
            expected = model.score(hidden[torch.arange(len(texts)), last])
            torch.testing.assert_close(model(**inputs).logits, expected, atol=1e-6, rtol=0)


def test_the_tuned_decoder_loads_back_with_the_body_it_trained(tuned):
    base_dir, _, tuned_dir, result = tuned["llama"]
    loaded = load_model(str(tuned_dir), device="cpu")
    assert (loaded.architecture, loaded.causal) == ("LlamaForSequenceClassification", True)
    assert loaded.weights_hash == result.tuned_weights_hash
    assert loaded.lineage is not None and loaded.lineage["base_weights_hash"] == result.base_weights_hash
    config = loaded.model.config
    assert config.pad_token_id == loaded.tokenizer.pad_token_id is not None
    # The body attnwh reads is the classifier's trained body, not the base's.
    trained = classifier(tuned_dir).base_model.state_dict()
    base = AutoModel.from_pretrained(base_dir).state_dict()
    body = loaded.model.base_model.state_dict()
    assert body.keys() == trained.keys() == base.keys()
    assert all(torch.equal(body[k], trained[k]) for k in body)
    assert any(not torch.equal(body[k], base[k]) for k in body)


def test_a_gpt2_without_a_padding_token_pads_with_its_end_of_sequence_token(tuned):
    loaded = load_model(str(tuned["gpt2"][2]), device="cpu")
    assert loaded.tokenizer.pad_token == loaded.tokenizer.eos_token == "<|endoftext|>"
    assert loaded.model.config.pad_token_id == loaded.tokenizer.eos_token_id


# ---------------------------------------------------------------- compare


def eager_maps(model: torch.nn.Module, ids: np.ndarray) -> list[np.ndarray]:
    """Per layer, the (heads, n, n) maps of one unpadded example on the eager path."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids.tolist()]), output_attentions=True)
    return [a[0].double().numpy() for a in out.attentions]


def test_compare_of_base_and_tuned_decoder_matches_eager_output_attentions(tuned, data, tmp_path):
    """Cosines of the base causal LM's maps and its tuned classifier's, stored for a batch
    of mixed lengths, and computed again in causal tiles of 5 rows, against the cosine of the
    flattened eager maps of each unpadded example (their upper triangles are 0 in both)."""
    base_dir, _, tuned_dir, _ = tuned["llama"]
    base, tuned_model = load_model(str(base_dir), device="cpu"), load_model(str(tuned_dir), device="cpu")
    options = IngestOptions(batch_size=16, max_length=MAX_LENGTH)
    task = prepare_comparison(base, tuned_model, [data[1]], options)[0]
    comparison = ChangeCapture(base, tuned_model)
    ingest_runs(tmp_path / "w.duckdb", comparison, [task], options)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT example_id, layer, head, cosine FROM attention_change").fetchall()
    stored: dict[int, np.ndarray] = {}
    for eid, layer, head, cosine in rows:
        stored.setdefault(eid, np.full((base.num_layers, base.num_heads), np.nan))[layer, head] = cosine
    assert len(set(task.encoded.n_tokens.tolist())) > 1 and set(stored) == set(task.example_ids.tolist())
    batch = collate(task.encoded, range(len(task.example_ids)), base.tokenizer.pad_token_id, torch.device("cpu"))
    with capture.attention_memory(rows=5):
        tiled = comparison.run(batch)[..., 0]
    reference_base = AutoModel.from_pretrained(base_dir, attn_implementation="eager").eval()
    reference_tuned = classifier(tuned_dir)
    for i, eid in enumerate(task.example_ids.tolist()):
        ids = task.encoded.input_ids[i]
        a_layers, b_layers = eager_maps(reference_base, ids), eager_maps(reference_tuned, ids)
        expected = np.array(
            [
                [np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(la, lb)]
                for la, lb in zip(a_layers, b_layers)
            ]
        )
        np.testing.assert_allclose(stored[eid], expected, atol=1e-5, rtol=0)
        np.testing.assert_allclose(tiled[i], expected, atol=1e-5, rtol=0)
    assert min(v.min() for v in stored.values()) < 0.999  # fine-tuning changed the maps


def test_an_encoder_and_a_decoder_are_not_compared(tuned, tiny_model_dir):
    decoder = load_model(str(tuned["llama"][0]), device="cpu")
    encoder = load_model(str(tiny_model_dir("bert")), device="cpu")
    with pytest.raises(ModelError, match="maps are not of one kind"):
        check_compatible(encoder, decoder)


# ---------------------------------------------------------------- the command line


def test_finetune_and_compare_commands_read_a_decoder(monkeypatch, capsys, tuned, tmp_path):
    """`attnwh finetune --model <gpt2>` records the tuned decoder linked to its base, and
    `attnwh ingest compare` stores its change (4 examples × 2 layers × 4 heads). The study's
    test reads a tuned decoder's statistics."""
    base = str(tuned["gpt2"][0])
    out, db = tmp_path / "tuned", tmp_path / "w.duckdb"
    common = ["--db", str(db), "--task", "sentiment", "--limit", "4"]
    code, _, err = run(
        monkeypatch, capsys, "finetune", "--model", base, "--out", str(out), "--db", str(db),
        "--max-train-examples", "16", "--epochs", "1", "--batch-size", "8", "--max-length", "32",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run(monkeypatch, capsys, "ingest", "compare", "--base", base, "--tuned", str(out), *common)
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        tuned_row = con.execute(
            "SELECT t.architecture, t.causal, b.name FROM models t JOIN models b ON t.base_model_id = b.model_id"
        ).fetchall()
        assert tuned_row == [("GPT2ForSequenceClassification", True, base)]
        assert con.execute("SELECT count(*) FROM finetunes").fetchone() == (1,)
        cosines = con.execute("SELECT count(*), min(cosine), max(cosine) FROM attention_change").fetchone()
        assert cosines[0] == 4 * 2 * 4 and 0 < cosines[1] <= cosines[2] <= 1 + 1e-6


@pytest.mark.parametrize("cache", ["GGUF cache", "no cache"])
def test_a_gguf_base_is_saved_as_a_plain_safetensors_folder(data, tmp_path, monkeypatch, cache):
    """A decoder given as one GGUF file (dequantised on loading) is saved as an ordinary
    folder: no GGUF quantizer in its config, the body it was read with (no step taken: the
    weights of the model the file was written from), loadable by attnwh. Whether it is read
    from its entry in the GGUF cache or, where the cache cannot be written, from the file
    itself (the quantizer's mark then dropped before saving)."""
    from test_gguf import write_tiny_gguf

    if cache == "no cache":
        (tmp_path / "a-file").write_text("not a folder")
        monkeypatch.setenv("ATTNWH_CACHE", str(tmp_path / "a-file" / "cache"))

    written = write_tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "tuned"
    untrained = FinetuneOptions(**{**OPTIONS.__dict__, "epochs": 0, "max_length": 16})
    finetune(str(tmp_path / "tiny.gguf"), data[0], data[1], out, untrained, "cpu")
    assert (out / "model.safetensors").is_file() and "quantization_config" not in (out / "config.json").read_text()
    loaded = load_model(str(out), device="cpu")
    assert loaded.architecture == "LlamaForSequenceClassification" and loaded.lineage is not None
    body, source = loaded.model.base_model.state_dict(), written.model.state_dict()
    assert body.keys() == source.keys() and all(torch.equal(body[k], source[k]) for k in body)
