"""One example's maps on demand (attnwh.ingest.runs.maps): the weights equal HF's eager
`output_attentions` on every family, the other lenses equal numpy from the eager model's hidden
states and weights, the maps reproduce the stored statistics, and a changed or missing model is
refused."""

from __future__ import annotations

import inspect
import shutil

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from attnwh.errors import ModelError, UsageError
from attnwh.ingest.runs.maps import example_maps
from helpers import ingest_args, run, write_pairs
from tiny_models import FAMILIES


def ingest(monkeypatch, capsys, model, tmp_path, n: int = 4):
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, *ingest_args(model, write_pairs(tmp_path / "pairs.tsv", n), db))
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        examples = [
            e for (e,) in con.execute("SELECT example_id FROM run_examples WHERE run_id = 1 ORDER BY 1").fetchall()
        ]
    return db, examples


def eager_outputs(db, example_id: int, model_dir):
    """The eager model's outputs on an example of run 1, truncated as the run truncated it."""
    with duckdb.connect(str(db), read_only=True) as con:
        text_a, text_b, max_length = con.execute(
            "SELECT text_a, text_b, max_length FROM examples, runs WHERE example_id = ? AND run_id = 1", [example_id]
        ).fetchone()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eager = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    inputs = tokenizer(text_a, text_b, truncation=True, max_length=max_length, return_tensors="pt")
    if "token_type_ids" in inputs and "token_type_ids" not in inspect.signature(eager.forward).parameters:
        del inputs["token_type_ids"]
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True, output_hidden_states=True)
    return eager, inputs["input_ids"][0].tolist(), out


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_equal_eager_output_attentions(monkeypatch, capsys, tiny_model_dir, tmp_path, family):
    model = tiny_model_dir(family)
    db, examples = ingest(monkeypatch, capsys, model, tmp_path)
    found = example_maps(db, 1, examples[2])
    _, ids, out = eager_outputs(db, examples[2], model)
    assert found.tokens == AutoTokenizer.from_pretrained(model).convert_ids_to_tokens(ids)
    expected = np.stack([a[0].double().numpy() for a in out.attentions])
    assert found.maps["weights"].shape == expected.shape
    np.testing.assert_allclose(found.maps["weights"], expected, atol=1e-6, rtol=0)
    assert found.kinds[0] == "cls" and found.kinds[-1] == "sep" and found.kinds.count("sep") >= 2
    for lens, maps in found.maps.items():  # every lens is a map of shares
        np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-6, err_msg=lens)


def test_lenses_equal_numpy_from_the_eager_model(monkeypatch, capsys, tiny_model_dir, tmp_path):
    model = tiny_model_dir("bert")
    db, examples = ingest(monkeypatch, capsys, model, tmp_path)
    found = example_maps(db, 1, examples[1], layers=[1])
    assert found.layers == (1,) and set(found.lenses) == {"weights", "norm", "post_ln", "block"}
    eager, ids, out = eager_outputs(db, examples[1], model)
    attn = eager.encoder.layer[1].attention
    a = out.attentions[1][0].double().numpy()  # (H, n, n)
    x = out.hidden_states[1][0].double().numpy()
    v = x @ attn.self.value.weight.detach().double().numpy().T + attn.self.value.bias.detach().double().numpy()
    w_o = attn.output.dense.weight.detach().double().numpy()
    gamma = attn.output.LayerNorm.weight.detach().double().numpy()
    heads, n = a.shape[0], len(ids)
    d = v.shape[1] // heads
    f = np.stack([v[:, h * d : (h + 1) * d] @ w_o[:, h * d : (h + 1) * d].T for h in range(heads)])  # (H, n, D)
    fc = (f - f.mean(-1, keepdims=True)) * gamma  # γ ⊙ centred: what the LayerNorm does to each term, up to σ_i
    r = (x - x.mean(-1, keepdims=True)) * gamma

    def rows(m: np.ndarray) -> np.ndarray:
        return m / m.sum(-1, keepdims=True)

    np.testing.assert_allclose(found.maps["norm"][0], rows(a * np.linalg.norm(f, axis=-1)[:, None, :]), atol=1e-6)
    np.testing.assert_allclose(found.maps["post_ln"][0], rows(a * np.linalg.norm(fc, axis=-1)[:, None, :]), atol=1e-6)
    block = np.linalg.norm(np.einsum("hij,hjd->ijd", a, fc) + np.eye(n)[..., None] * r[:, None, :], axis=-1)
    np.testing.assert_allclose(found.maps["block"][0], rows(block), atol=1e-6)
    # The lenses differ (else the comparisons above could not tell them apart).
    assert np.abs(found.maps["norm"] - found.maps["weights"]).max() > 1e-3
    assert np.abs(found.maps["post_ln"] - found.maps["norm"]).max() > 1e-3


def test_maps_reproduce_the_stored_statistics(monkeypatch, capsys, tiny_model_dir, tmp_path):
    model = tiny_model_dir("roberta")
    db, examples = ingest(monkeypatch, capsys, model, tmp_path)
    found = example_maps(db, 1, examples[0])
    sep = np.array([k == "sep" for k in found.kinds], float)
    cls = np.array([k == "cls" for k in found.kinds], float)
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute(
            "SELECT layer, head, to_cls, to_sep, to_self, entropy, norm_to_sep, rn_to_sep FROM head_stats "
            "JOIN head_mixing USING (run_id, example_id, layer, head) WHERE run_id = 1 AND example_id = ? ORDER BY 1, 2",
            [examples[0]],
        ).fetchall()
    for layer, head, to_cls, to_sep, to_self, entropy, norm_to_sep, rn_to_sep in stored:
        a = found.maps["weights"][layer, head]
        assert (a @ cls).mean() == pytest.approx(to_cls, abs=1e-5)
        assert (a @ sep).mean() == pytest.approx(to_sep, abs=1e-5)
        assert np.diag(a).mean() == pytest.approx(to_self, abs=1e-5)
        assert -(a * np.log(np.where(a > 0, a, 1))).sum(1).mean() == pytest.approx(entropy, abs=1e-5)
        assert (found.maps["norm"][layer, head] @ sep).mean() == pytest.approx(norm_to_sep, abs=1e-5)
        assert (found.maps["post_ln"][layer, head] @ sep).mean() == pytest.approx(rn_to_sep, abs=1e-5)


def test_a_changed_or_missing_model_is_refused(monkeypatch, capsys, tiny_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir("bert"), model)
    db, examples = ingest(monkeypatch, capsys, model, tmp_path)
    with pytest.raises(UsageError, match="not one of run 1's examples"):
        example_maps(db, 1, 12345)
    with pytest.raises(UsageError, match="no run 7"):
        example_maps(db, 7, examples[0])
    with pytest.raises(UsageError, match="layer 9 is not one of"):
        example_maps(db, 1, examples[0], layers=[9])
    # The same folder with other weights: refused, naming both hashes.
    changed = AutoModel.from_pretrained(model)
    with torch.no_grad():
        changed.encoder.layer[0].attention.self.query.weight.mul_(1.5)
    changed.save_pretrained(model)
    with pytest.raises(ModelError, match="are not those run 1 measured"):
        example_maps(db, 1, examples[0])
    shutil.rmtree(model)
    with pytest.raises(ModelError):
        example_maps(db, 1, examples[0])
    # Another copy of the run's weights, given explicitly, is accepted.
    assert example_maps(db, 1, examples[0], model=str(tiny_model_dir("bert"))).maps["weights"].shape[0] == 2
