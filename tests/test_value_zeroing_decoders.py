"""Value zeroing on decoders: attnwh's batched recomputation equals brute force, one plain
eager forward of the model per zeroed token.

The reference loads each tiny decoder independently (eager attention, no attnwh code in
the model), runs one unpadded example at a time, and zeroes token j's value vector where it
is made: at the output of the layer's value projection (`v_proj`, Phi-3's fused `qkv_proj`,
GPT-2's fused `c_attn`), in a forward stopped once the layer has returned. Under
grouped-query attention a value row is shared by the query heads of its group, so that
zeroes it for every head: the "layer" variant. The "head" variant zeroes the value as one
query head reads it; its reference is the same model with every key/value head copied out
for each of its query heads (an equivalent multi-head model, checked equal), where zeroing
head h's slice of the value projection touches query head h only.

attnwh's batches are right-padded; the measure must also give each row of a left-padded
batch what the row gives alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer

from attnwh.ingest.measures.value_zeroing import VZ_COLUMNS, ValueZeroing
from attnwh.ingest.model import capture
from attnwh.ingest.model.encoding import TokenKinds
from attnwh.ingest.model.loading import LoadedModel, load_model
from helpers import run
from tiny_language_models import make_tiny_language_model
from tiny_models import DECODER_FAMILIES, DECODER_WINDOW, make_tiny_decoder

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A film!",
    "Is this the station, where the night train stops?",
]
TOLERANCE = 1e-5
VALUE_SCALE = 8.0
LAYERS, HEADS = 2, 4
# Every family attnwh reads. Among them Llama: GQA 2:1. Gemma 2: GQA, a sliding window on
# layer 0, soft-capping. GPT-2: fused Conv1D projections, absolute positions. Mistral: a window
# on every layer. Qwen2: GQA 4:1, biases. Phi-3: fused Q, K, V. Gemma 3: local and global
# rotary tables. Qwen3, OLMo2: query and key norms.
FAMILIES = DECODER_FAMILIES
# Newer attention, built from transformers' own configs (tiny_language_models.py, 4 layers):
# gpt-oss's learned sinks (a row's weights sum to less than 1), Qwen3-MoE's experts after the
# attention, DeepSeek-V3's latent attention (values made by `kv_b_proj` beside the keys' no-rotary
# part, of another head size than the queries and keys).
NEWER_FAMILIES = ("gpt_oss", "qwen3_moe", "deepseek_v3")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Hundreds of forwards of tensors a few kilobytes large: one thread is faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _scale_values(source: Path, out: Path) -> Path:
    """A copy of the decoder at `source` with its value and attention output projections scaled
    up, so that zeroing one value moves the layer's outputs far beyond rounding noise (at the
    default initialisation the residual stream dwarfs the attention block's output)."""
    model = AutoModel.from_pretrained(source)
    with torch.no_grad():
        for depth in range(model.config.num_hidden_layers):
            value, values, _, projection = value_projection(model, depth)
            rows = value.weight if not is_conv1d(value) else value.weight.T  # (out features, in)
            rows[values] *= VALUE_SCALE
            if value.bias is not None:
                value.bias[values] *= VALUE_SCALE
            projection.weight *= VALUE_SCALE
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory):
    """family -> a tiny decoder (`_scale_values`): of LAYERS layers for the families of
    tiny_models.py, of its own config's for NEWER_FAMILIES."""
    cache: dict[str, Path] = {}

    def build(family: str) -> Path:
        if family not in cache:
            source = tmp_path_factory.mktemp(f"vzd-src-{family}")
            if family in NEWER_FAMILIES:
                make_tiny_language_model(family, source)
            else:
                make_tiny_decoder(family, source, LAYERS, HEADS)
            cache[family] = _scale_values(source, tmp_path_factory.mktemp(f"vzd-{family}"))
        return cache[family]

    return build


# ---------------------------------------------------------------- the brute-force reference


def is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D"  # GPT-2's: weight (in, out)


def value_projection(model: Any, depth: int) -> tuple[nn.Module, slice | torch.Tensor, nn.Module, nn.Module]:
    """Layer `depth`'s module that makes the values, the output features that hold them (a
    slice of H_kv heads side by side, or their indices), the layer module and the attention
    output projection."""
    config, base = model.config, model.base_model
    if config.model_type == "gpt2":
        block = base.h[depth]
        return block.attn.c_attn, slice(2 * config.hidden_size, None), block, block.attn.c_proj
    layer = base.layers[depth]
    attention = layer.self_attn
    if hasattr(attention, "kv_b_proj"):  # latent attention: per head, the keys' no-rotary part, then the values
        nope, width = config.qk_nope_head_dim, config.v_head_dim
        per_head = torch.arange(nope, nope + width)
        values = torch.cat([h * (nope + width) + per_head for h in range(config.num_attention_heads)])
        return attention.kv_b_proj, values, layer, attention.o_proj
    if config.model_type == "phi3":  # fused Q, K, V: the values come last
        width = config.num_key_value_heads * config.hidden_size // config.num_attention_heads
        return attention.qkv_proj, slice(-width, None), layer, attention.o_proj
    return attention.v_proj, slice(None), layer, attention.o_proj


def multi_head(model: Any) -> Any:
    """The same decoder without grouped-query attention: each key/value head's rows of the
    key and value projections copied for every query head of its group (transformers'
    repeat_kv, done on the weights)."""
    config = model.config
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    if kv == heads:
        return model
    width = getattr(config, "head_dim", None) or config.hidden_size // heads
    expanded = AutoConfig.for_model(**{**config.to_dict(), "num_key_value_heads": heads})
    copy = AutoModel.from_config(expanded, attn_implementation="eager").eval()
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")):
            tensor = tensor.view(kv, width, *tensor.shape[1:]).repeat_interleave(heads // kv, 0).flatten(0, 1)
        state[name] = tensor
    copy.load_state_dict(state)
    return copy


class _Stop(Exception):
    pass


class Reference:
    """Brute-force value zeroing of one eager decoder, one unpadded example at a time."""

    def __init__(self, path: Path, heads_apart: bool = False) -> None:
        model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
        self.model = multi_head(model) if heads_apart else model
        self.width = self.model.config.hidden_size // self.model.config.num_attention_heads
        self._cache: dict[tuple, np.ndarray] = {}

    def layer_output(self, ids: list[int], depth: int, zero: tuple[int, int | None] | None) -> torch.Tensor:
        """Layer `depth`'s output (n, D), token zero[0]'s value zeroed (head zero[1]'s only)."""
        value, values, layer, _ = value_projection(self.model, depth)
        kept: list[torch.Tensor] = []

        def stop(module: nn.Module, args: object, out: Any) -> None:
            kept.append(out[0] if isinstance(out, tuple) else out)
            raise _Stop

        def zeroing(module: nn.Module, args: object, out: torch.Tensor) -> torch.Tensor:
            assert zero is not None
            token, head = zero
            out = out.clone()
            if head is None:
                out[..., token, values] = 0
            else:
                assert isinstance(values, slice)
                start = range(out.shape[-1])[values][0]
                out[..., token, start + head * self.width : start + (head + 1) * self.width] = 0
            return out

        hooks = [layer.register_forward_hook(stop)]
        if zero is not None:
            hooks.append(value.register_forward_hook(zeroing))
        try:
            with torch.no_grad():
                self.model(input_ids=torch.tensor([ids]), use_cache=False)
        except _Stop:
            pass
        finally:
            for hook in hooks:
                hook.remove()
        return kept[0][0]

    def matrix(self, ids: list[int], depth: int, head: int | None = None) -> np.ndarray:
        """C (n, n) of one example at layer `depth`: 1 − cos, rows normalised, in float64."""
        key = (tuple(ids), depth, head)
        if key not in self._cache:
            y = self.layer_output(ids, depth, None).double()
            changed = [self.layer_output(ids, depth, (j, head)).double() for j in range(len(ids))]
            c = torch.stack([1 - nn.functional.cosine_similarity(z, y, dim=-1) for z in changed], dim=1)
            # Every row must move far beyond float32 rounding, or the comparison proves little.
            assert c.sum(1).min() > 5e-4
            self._cache[key] = (c / c.sum(1, keepdim=True)).numpy()
        return self._cache[key]


def reference_shares(c: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """VZ_COLUMNS of one unpadded causal matrix, written out plainly: the first token in
    [CLS]'s place, no [SEP], the next token never visible."""
    n = len(c)
    prev = [c[i, i - 1] if i > 0 else 0 for i in range(n)]
    return np.array([c[:, 0].mean(), 0.0, (c @ punct).mean(), np.diag(c).mean(), np.mean(prev), 0.0])


def batch_of(encoder: LoadedModel, side: str) -> dict[str, torch.Tensor]:
    tokenizer = encoder.tokenizer
    tokenizer.padding_side = side
    try:
        return dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    finally:
        tokenizer.padding_side = "right"


def real_positions(batch: dict[str, torch.Tensor], b: int) -> torch.Tensor:
    return batch["attention_mask"][b].bool().nonzero().squeeze(1)


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("family", FAMILIES + NEWER_FAMILIES)
def test_layer_variant_equals_brute_force_right_and_left_padded(decoder, family):
    path = decoder(family)
    encoder = load_model(str(path), "cpu")
    layers = encoder.num_layers
    reference = Reference(path)
    # 7 rows a chunk: chunks end inside examples and mix examples of different lengths.
    vz = ValueZeroing(encoder, "layer", max_rows=7)
    kinds = TokenKinds(encoder.tokenizer, causal=True)
    for side in ("right", "left"):
        batch = batch_of(encoder, side)
        key_mask = batch["attention_mask"].bool()
        assert len(set(key_mask.sum(-1).tolist())) == len(TEXTS)
        assert bool(key_mask[:, 0 if side == "left" else -1].logical_not().any())  # padded on that side
        matrices = vz.matrices(batch)
        masks = kinds.masks(batch["input_ids"], batch["attention_mask"])
        shares = vz.run(batch, key_mask, *masks)
        assert shares.shape == (len(TEXTS), layers, 1, len(VZ_COLUMNS))
        for b in range(len(TEXTS)):
            real = real_positions(batch, b)
            ids = batch["input_ids"][b, real].tolist()
            punct = masks[2][b, real].double().numpy()
            for depth in range(layers):
                full = matrices[depth][b]
                got = full[real][:, real].numpy()
                expected = reference.matrix(ids, depth)
                np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0, err_msg=f"{side} {b} {depth}")
                # A later key changes nothing: exactly 0, and so is everything off the real tokens.
                outside = full.clone()
                outside[real[:, None], real[None, :]] = 0
                assert (np.triu(got, 1) == 0).all() and (outside == 0).all()
                np.testing.assert_allclose(shares[b, depth, 0], reference_shares(expected, punct), atol=TOLERANCE)
    # Sliding windows (shorter than the inputs) leave keys a row cannot see at exactly 0.
    for depth in encoder.sliding_layers:
        got = matrices[depth][2].numpy()
        assert (np.tril(got, -DECODER_WINDOW) == 0).all() and np.tril(got, -DECODER_WINDOW + 1).any()
    assert shares[..., VZ_COLUMNS.index("vz_to_cls")].std() > 1e-3


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_oss"])
def test_head_variant_zeroes_one_query_head_of_a_key_value_group(decoder, family):
    path = decoder(family)
    encoder = load_model(str(path), "cpu")
    assert encoder.num_key_value_heads < encoder.num_heads
    reference = Reference(path, heads_apart=True)
    grouped = Reference(path).model
    ids = encoder.tokenizer(TEXTS[2])["input_ids"]
    with torch.no_grad():  # the multi-head copy is the same model
        torch.testing.assert_close(
            reference.model(input_ids=torch.tensor([ids])).last_hidden_state,
            grouped(input_ids=torch.tensor([ids])).last_hidden_state,
            atol=1e-5,
            rtol=0,
        )
    batch = batch_of(encoder, "left")
    matrices = ValueZeroing(encoder, "head", max_rows=11).matrices(batch)
    layer = ValueZeroing(encoder, "layer")
    assert matrices[0].shape == (len(TEXTS), HEADS, *batch["input_ids"].shape[1:], batch["input_ids"].shape[1])
    for b in (1, 2):
        real = real_positions(batch, b)
        ids = batch["input_ids"][b, real].tolist()
        for depth in range(LAYERS):
            for h in range(HEADS):
                got = matrices[depth][b, h][real][:, real].numpy()
                np.testing.assert_allclose(got, reference.matrix(ids, depth, h), atol=TOLERANCE, rtol=0)
    # Query heads 0 and 1 share a key/value head, yet their matrices differ.
    assert (matrices[1][:, 0] - matrices[1][:, 1]).abs().max() > 0.05
    # A memory bound of one row per recomputation changes nothing, nor does a caller's tile height.
    whole = layer.matrices(batch)
    bounded = ValueZeroing(encoder, "layer", memory=1).matrices(batch)
    with capture.attention_memory(rows=3):
        tiled = layer.matrices(batch)
    for depth in range(LAYERS):
        torch.testing.assert_close(bounded[depth], whole[depth], atol=TOLERANCE, rtol=0)
        torch.testing.assert_close(tiled[depth], whole[depth], atol=TOLERANCE, rtol=0)


def test_ingest_stores_value_zeroing_of_a_decoder_with_null_sep_and_next(monkeypatch, capsys, decoder, tmp_path):
    db = tmp_path / "w.duckdb"
    model = str(decoder("gemma2"))
    args = ["ingest", "--model", model, "--db", str(db), "--limit", "3", "--value-zeroing", "head"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        rows, nulls, low, high = con.execute(
            "SELECT count(*), count(*) FILTER (vz_to_sep IS NULL AND vz_to_next IS NULL),"
            " min(vz_to_cls + vz_to_self), max(vz_to_cls) FROM head_mixing"
        ).fetchone()
        examples = con.execute("SELECT count(*) FROM run_examples").fetchone()[0]
    assert rows == examples * LAYERS * HEADS and nulls == rows and low > 0 and high <= 1 + 1e-6
