"""Context mixing after residual and LayerNorm (ingest/measures/mixing.py): the terms add up to
the LayerNorm's output exactly, and the stored shares equal a numpy computation from HF's
eager `output_attentions=True` maps and the layer's weights, example by example."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from attnwh.ingest.measures.mixing import HEAD_COLUMNS, LAYER_COLUMNS, ln_terms
from attnwh.ingest.model.encoding import TokenKinds, collate, encode_task
from attnwh.ingest.model.loading import AttentionOutput, load_model
from attnwh.ingest.runs.loop import StatisticsCapture
from test_statistics import task


@pytest.fixture(scope="module")
def strong(tiny_model_dir, tmp_path_factory):
    """Tiny models whose heads weigh about as much as the residual (random tiny weights give
    heads a few percent of it, too little for a comparison to prove much), with LayerNorm
    scales and every bias drawn at random (they start as 1 and 0, which would hide a γ or a
    bias term left out)."""

    def build(family: str) -> Path:
        out = tmp_path_factory.mktemp(f"strong-{family}")
        model = AutoModel.from_pretrained(tiny_model_dir(family))
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for layer in model.encoder.layer:
                attn = layer.attention
                attn.self.value.weight.mul_(4)
                attn.output.dense.weight.mul_(4)
                for tensor in (attn.self.value.bias, attn.output.dense.bias, attn.output.LayerNorm.bias):
                    tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.5)
                gamma = attn.output.LayerNorm.weight
                gamma.copy_(0.5 + torch.rand(gamma.shape, generator=generator))
        model.save_pretrained(out)
        AutoTokenizer.from_pretrained(tiny_model_dir(family)).save_pretrained(out)
        return out

    return build


def _inputs(model, encoded, indices, pad_id) -> dict[str, torch.Tensor]:
    batch = collate(encoded, indices, pad_id, torch.device("cpu"))
    accepted = inspect.signature(model.forward).parameters
    return {k: v for k, v in batch.items() if k in accepted}


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_terms_reconstruct_the_layer_norm_output(strong, family):
    """Per-head terms + residual terms + bias terms = y_i within 1e-5 on a padded batch,
    every row; leaving any one term out breaks it."""
    path = strong(family)
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    data = task(True)
    encoded = encode_task(tokenizer, data, 64)
    inputs = _inputs(eager, encoded, list(range(len(data.examples))), tokenizer.pad_token_id)
    assert inputs["attention_mask"].min() == 0  # padded
    outputs: dict[int, torch.Tensor] = {}
    hooks = [
        layer.attention.output.LayerNorm.register_forward_hook(lambda m, a, out, k=k: outputs.__setitem__(k, out))
        for k, layer in enumerate(eager.encoder.layer)
    ]
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    heads_count = eager.config.num_attention_heads
    for k, layer in enumerate(eager.encoder.layer):
        x = out.hidden_states[k]
        attn = layer.attention
        value = attn.self.value(x)
        value = value.view(*value.shape[:2], heads_count, -1).transpose(1, 2)
        with torch.no_grad():
            heads, residual, biases = ln_terms(
                x, out.attentions[k], value, AttentionOutput(attn.output.dense, attn.output.LayerNorm), heads_count
            )
        y = outputs[k]
        whole = heads.sum(dim=(1, 3)) + residual + biases
        torch.testing.assert_close(whole, y, atol=1e-5, rtol=0)
        # Each term matters: without it the sum is far off.
        for partial in (whole - residual, whole - biases, whole - heads[:, 0].sum(2)):
            assert (partial - y).abs().max() > 1e-2


def _reference(model, tokenizer, ids: list[int], types: list[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """(layer, head, HEAD_COLUMNS) and (layer, LAYER_COLUMNS) of one unpadded example, in
    float64 from eager output_attentions maps and the layer's weights, written out plainly."""
    inputs = {"input_ids": torch.tensor([ids])}
    if types is not None and "token_type_ids" in inspect.signature(model.forward).parameters:
        inputs["token_type_ids"] = torch.tensor([types])
    # Each attention block's LayerNorm input z_i = x_i + Σ_h Σ_j A^h[i,j] f_h(x_j) + b_O, as the
    # model computed it: the mixing ratio's sum over tokens is read from it, not rebuilt.
    ln_inputs: dict[int, np.ndarray] = {}
    hooks = [
        layer.attention.output.LayerNorm.register_forward_pre_hook(
            lambda m, args, k=k: ln_inputs.__setitem__(k, args[0][0].double().numpy())
        )
        for k, layer in enumerate(model.encoder.layer)
    ]
    with torch.no_grad():
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    cls, sep, punct = (m[0].numpy().astype(float) for m in TokenKinds(tokenizer).masks(torch.tensor([ids])))
    n = len(ids)
    near = {name: np.eye(n, k=k) for name, k in (("self", 0), ("prev", -1), ("next", 1))}

    def shares(weights: np.ndarray) -> list[float]:
        """Row shares of (n, n) contributions to the six targets, mean over rows."""
        total = weights.sum(1)
        per_row = [weights @ cls, weights @ sep, weights @ punct, *((weights * near[k]).sum(1) for k in near)]
        return [float(np.mean(r / total)) for r in per_row]

    heads_out, layers_out = [], []
    for k, layer in enumerate(model.encoder.layer):
        attn = layer.attention
        a = out.attentions[k][0].double().numpy()  # (H, n, n)
        x = out.hidden_states[k][0].double().numpy()
        w_v = attn.self.value.weight.detach().double().numpy()
        b_v = attn.self.value.bias.detach().double().numpy()
        w_o = attn.output.dense.weight.detach().double().numpy()
        gamma = attn.output.LayerNorm.weight.detach().double().numpy()
        v = x @ w_v.T + b_v
        H = a.shape[0]
        d = v.shape[1] // H
        f = np.stack([v[:, h * d : (h + 1) * d] @ w_o[:, h * d : (h + 1) * d].T for h in range(H)])  # (H, n, D)
        f = (f - f.mean(-1, keepdims=True)) * gamma
        r = (x - x.mean(-1, keepdims=True)) * gamma
        r_norm = np.linalg.norm(r, axis=-1)
        rows = []
        head_sum = np.zeros(n)
        for h in range(H):
            t = a[h] * np.linalg.norm(f[h], axis=-1)[None, :]  # ||t_h,ij|| × σ_i
            head_sum += t.sum(1)
            rows.append([*shares(t), float(np.mean(r_norm / (r_norm + t.sum(1))))])
        heads_out.append(rows)
        g = np.einsum("hij,hjd->ijd", a, f) + np.eye(n)[..., None] * r[:, None, :]
        c = np.linalg.norm(g, axis=-1)
        # Kobayashi et al.'s mixing ratio from summed vectors: Σ_j g_ij is γ ⊙ centred (z_i − b_O),
        # from the model's own LayerNorm input; σ_i scales m_i and p_i alike and cancels.
        b_o = attn.output.dense.bias.detach().double().numpy()
        z = ln_inputs[k] - b_o
        summed = (z - z.mean(-1, keepdims=True)) * gamma
        own = g[np.arange(n), np.arange(n)]  # c_ii: the token's own heads' terms and its residual
        m = np.linalg.norm(summed - own, axis=-1)
        p = np.linalg.norm(own, axis=-1)
        ratio = float(np.mean(m / (m + p)))
        share = float(np.mean((c.sum(1) - np.diag(c)) / c.sum(1)))
        layers_out.append([ratio, share, float(np.mean(r_norm / (r_norm + head_sum))), *shares(c)])
    return np.array(heads_out), np.array(layers_out)


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("pair", [False, True])
def test_stored_shares_match_numpy_from_eager_maps(strong, family, pair):
    path = strong(family)
    encoder = load_model(str(path), device="cpu")
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    data = task(pair)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    capture = StatisticsCapture(encoder)
    everything = list(range(len(data.examples)))
    capture.run(collate(encoded, everything, encoder.tokenizer.pad_token_id, encoder.device))  # padded
    tables = capture.extra_rows(np.array(everything))
    per_head = tables["head_mixing"].sort_by(
        [("example_id", "ascending"), ("layer", "ascending"), ("head", "ascending")]
    )
    per_layer = tables["layer_mixing"].sort_by([("example_id", "ascending"), ("layer", "ascending")])
    L, H = encoder.num_layers, encoder.num_heads
    got_heads = np.stack([per_head[c].to_numpy() for c in HEAD_COLUMNS], -1).reshape(len(everything), L, H, -1)
    got_layers = np.stack([per_layer[c].to_numpy() for c in LAYER_COLUMNS], -1).reshape(len(everything), L, -1)
    for i in everything:
        ids = encoded.input_ids[i].tolist()
        types = None if encoded.token_type_ids is None else encoded.token_type_ids[i].tolist()
        heads, layers = _reference(eager, encoder.tokenizer, ids, types)
        np.testing.assert_allclose(got_heads[i], heads, atol=1e-5, rtol=0)
        np.testing.assert_allclose(got_layers[i], layers, atol=1e-5, rtol=0)
    # The heads carry weight here, so the comparison above tests the mixing, not only the residual.
    assert got_layers[..., LAYER_COLUMNS.index("mixing_ratio")].min() > 0.1
    # Contributions of different tokens cancel in part: the ratio of summed vectors is below
    # the share of summed norms, row by row, so the two columns cannot be swapped unnoticed.
    ratio, share = (got_layers[..., LAYER_COLUMNS.index(c)] for c in ("mixing_ratio", "mixing_share"))
    assert np.all(ratio < share)
    assert got_heads[..., HEAD_COLUMNS.index("rn_to_cls")].std() > 1e-3


def test_pre_ln_models_leave_mixing_out(tiny_model_dir):
    """ModernBERT normalises before attention: no LayerNorm follows the residual sum, so no
    head_mixing or layer_mixing rows (the statistics are still there)."""
    encoder = load_model(str(tiny_model_dir("modernbert")), device="cpu")
    data = task(False)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    capture = StatisticsCapture(encoder)
    stats = capture.run(collate(encoded, [0, 1], encoder.tokenizer.pad_token_id, encoder.device))
    assert stats.shape[0] == 2
    tables = capture.extra_rows(np.array([0, 1]))
    assert "head_mixing" not in tables and "layer_mixing" not in tables


@pytest.mark.parametrize("family", ["distilbert", "electra", "albert", "deberta-v2", "mpnet"])
def test_other_post_ln_families_mix(tiny_model_dir, family):
    """Every other post-LN family gets rows whose shares are proper shares."""
    encoder = load_model(str(tiny_model_dir(family)), device="cpu")
    data = task(True)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    capture = StatisticsCapture(encoder)
    everything = list(range(len(data.examples)))
    capture.run(collate(encoded, everything, encoder.tokenizer.pad_token_id, encoder.device))
    tables = capture.extra_rows(np.array(everything))
    heads, layers = tables["head_mixing"], tables["layer_mixing"]
    assert heads.num_rows == len(everything) * encoder.num_layers * encoder.num_heads
    assert layers.num_rows == len(everything) * encoder.num_layers
    for table in (heads, layers):
        for column in ("rn_to_cls", "rn_to_sep", "rn_to_punct", "rn_to_self"):
            values = table[column].to_numpy()
            assert np.all((values >= 0) & (values <= 1 + 1e-6)), column
    share = layers["mixing_share"].to_numpy()
    np.testing.assert_allclose(share, 1 - layers["rn_to_self"].to_numpy(), atol=1e-6)
    ratio = layers["mixing_ratio"].to_numpy()
    assert np.all((ratio > 0) & (ratio < share))
    assert np.all(layers["rn_to_sep"].to_numpy() > 0)


def test_lenses_left_out_are_not_stored_and_make_a_run_of_their_own(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import duckdb

    from helpers import run as run_cli

    db = tmp_path / "w.duckdb"
    common = ["ingest", "--model", str(tiny_model_dir("bert")), "--task", "sentiment", "--limit", "12", "--db", str(db)]
    code, _, err = run_cli(monkeypatch, capsys, *common, "--no-mixing", "--no-massive")
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *common)  # every lens: a new run, not the one above skipped
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        assert len(runs) == 2
        lean, full = runs

        def count(table: str, run_id: int) -> int:
            return con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchone()[0]

        for table in ("head_mixing", "layer_mixing", "massive_activations"):
            assert count(table, lean) == 0 and count(table, full) > 0, table
        # The statistics, pattern types and thumbnails do not depend on the other lenses.
        for table in ("head_stats", "pattern_thumbnails"):
            rows = [
                con.execute(f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = ? ORDER BY ALL", [r]).fetchall()
                for r in runs
            ]
            assert len(rows[0]) == len(rows[1]) > 0, table
            for a, b in zip(*rows):  # within float32 rounding: one product reads the maps either way
                for x, y in zip(a, b, strict=True):
                    if isinstance(x, float | list):
                        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6, err_msg=table)
                    else:
                        assert x == y, (table, a[:4])
    code, _, err = run_cli(monkeypatch, capsys, *common, "--no-mixing", "--no-massive")
    assert code == 0 and "already complete" in err + _, err  # its own run is found again
