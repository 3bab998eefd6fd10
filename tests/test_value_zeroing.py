"""Value zeroing: the batched recomputation equals brute force, one forward per zeroed token.

The references load each model independently (eager attention, no attnwh code in the model)
and zero a token's value vector where it is made, at the output of the layer's value
projection, on one unpadded example at a time:

- BERT and RoBERTa: one forward of the layer module on its input hidden state (from
  `output_hidden_states`) per zeroed token, as the definition reads;
- every other family: one forward of the model on the example, stopped as soon as the layer
  has returned, so nothing of the family's own layer arguments (DeBERTa's relative
  positions, MPNet's position bias, ModernBERT's rotary tables and window) is rebuilt here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

from attnwh.errors import ModelError
from attnwh.ingest.measures import value_zeroing
from attnwh.ingest.measures.value_zeroing import VZ_COLUMNS, ValueZeroing
from attnwh.ingest.model.encoding import TokenKinds, collate, encode_task
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.sources.examples import Example, TaskData

# Different lengths, punctuation, and one true sentence pair; the single sentences get an
# empty second segment, so every example has two [SEP]s (RoBERTa, MPNet: three).
TEXTS = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("A film!", None),
    ("Is this the station?", "Cheap tickets sold out."),
    ("Nobody expected the small robot to win, but it did.", None),
]
MAX_LENGTH = 40  # DeBERTa's tiny tokenizer is nearly character-level: keep its inputs short
TOLERANCE = 1e-5


VALUE_SCALE = 8.0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The brute force runs thousands of forwards of tensors a few kilobytes large: a second
    intra-op thread only adds synchronisation, and spins for long when the CPU is shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """family -> the session's tiny model with its value and attention output projections
    scaled up. Initialised at std 0.02, they make the attention block's share of a layer's
    output so small beside the residual that zeroing a value moves cos by rounding noise
    only; scaled, every token's value moves the outputs well beyond the tolerances."""
    cache: dict[str, Path] = {}

    def build(family: str) -> Path:
        if family not in cache:
            source = tiny_model_dir(family)
            model = AutoModel.from_pretrained(source)
            with torch.no_grad():
                for name, module in model.named_modules():
                    if not isinstance(module, nn.Linear):
                        continue
                    if name.endswith("attn.Wqkv"):  # ModernBERT: only the values, the last third of the rows
                        module.weight[2 * module.weight.shape[0] // 3 :] *= VALUE_SCALE
                    elif name.endswith(VALUE_AND_OUTPUT):
                        module.weight *= VALUE_SCALE
            out = tmp_path_factory.mktemp(f"vz-{family}")
            model.save_pretrained(out)
            AutoTokenizer.from_pretrained(source).save_pretrained(out)
            cache[family] = out
        return cache[family]

    return build


# The value and attention output projections of every family, by the end of the module's path:
# BERT, RoBERTa, ELECTRA, DeBERTa; ALBERT; DistilBERT; MPNet; ModernBERT.
VALUE_AND_OUTPUT = (
    ".value",
    "attention.output.dense",
    "attention.dense",
    ".value_proj",
    ".v_lin",
    ".out_lin",
    "attn.v",
    "attn.o",
    "attn.Wo",
)


def padded_batch(encoder) -> dict[str, torch.Tensor]:
    examples = tuple(Example(i, None, a, b, None) for i, (a, b) in enumerate(TEXTS))
    data = TaskData("test", "vz", "dev", examples, None, "test")
    encoded = encode_task(encoder.tokenizer, data, MAX_LENGTH)
    batch = collate(encoded, list(range(len(TEXTS))), encoder.tokenizer.pad_token_id, encoder.device)
    lengths = batch["attention_mask"].sum(-1)
    assert len(set(lengths.tolist())) >= 3  # (two may tie with a coarse tokenizer)
    return batch


# ---------------------------------------------------------------- the brute-force reference


def value_projection(model: Any, depth: int) -> tuple[nn.Linear, nn.Module, bool]:
    """Layer `depth`'s value projection, the layer module, and whether the projection is
    ModernBERT's fused Q, K, V (values are its last third, head-major)."""
    family = model.config.model_type
    base: Any = model.base_model
    if family == "albert":  # one shared layer at every depth
        layer = base.encoder.albert_layer_groups[0].albert_layers[0]
        return layer.attention.value, layer, False
    if family == "modernbert":
        layer = base.layers[depth]
        return layer.attn.Wqkv, layer, True
    if family == "distilbert":
        layer = base.transformer.layer[depth]
        return layer.attention.v_lin, layer, False
    layer = base.encoder.layer[depth]
    if family == "deberta-v2":
        return layer.attention.self.value_proj, layer, False
    if family == "mpnet":
        return layer.attention.attn.v, layer, False
    return layer.attention.self.value, layer, False  # BERT, RoBERTa, ELECTRA


def zeroing_hook(token: int, head: int | None, num_heads: int, fused: bool, call: int = 0):
    """A forward hook that zeroes `token`'s row of the value vectors (head `head`'s slice of
    columns only, if given) at the projection's `call`-th call (ALBERT: the depth)."""
    seen = [0]

    def hook(module: nn.Module, args: object, out: torch.Tensor) -> torch.Tensor:
        index = seen[0]
        seen[0] += 1
        if index != call:
            return out
        out = out.clone()
        start = 2 * out.shape[-1] // 3 if fused else 0
        width = (out.shape[-1] - start) // num_heads
        if head is None:
            out[:, token, start:] = 0
        else:
            out[:, token, start + head * width : start + (head + 1) * width] = 0
        return out

    return hook


def normalised(y: torch.Tensor, changed: list[torch.Tensor]) -> np.ndarray:
    """C[i, j] = 1 − cos(ŷ_i^{¬j}, ŷ_i), rows normalised: (n, n), in float64."""
    y = y.double()
    c = torch.stack([1 - nn.functional.cosine_similarity(z.double(), y, dim=-1) for z in changed], dim=1)
    # Zeroing must move every row's outputs far beyond float32 rounding (about 1e-7), or the
    # normalised rows would be noise and the comparisons with them would prove little.
    assert c.sum(1).min() > 5e-4
    return (c / c.sum(1, keepdim=True)).numpy()


class _Stop(Exception):
    pass


class Reference:
    """Brute-force value zeroing of one eager model, example by example."""

    def __init__(self, path) -> None:
        self.model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
        self.heads = self.model.config.num_attention_heads
        self.accepted = set(inspect.signature(self.model.forward).parameters)

    def inputs(self, batch: dict[str, torch.Tensor], b: int) -> dict[str, torch.Tensor]:
        n = int(batch["attention_mask"][b].sum())
        return {k: v[b : b + 1, :n] for k, v in batch.items() if k in self.accepted and k != "attention_mask"}

    def matrix(self, batch: dict[str, torch.Tensor], b: int, depth: int, head: int | None = None) -> np.ndarray:
        """(n, n) for example `b` at layer `depth`, zeroing in all heads or in `head` only."""
        inputs = self.inputs(batch, b)
        n = inputs["input_ids"].shape[1]
        if self.model.config.model_type in ("bert", "roberta"):
            layer_output = self._layer_forward(inputs, depth)
        else:
            layer_output = self._stopped_forward(inputs, depth)
        y = layer_output(None)
        return normalised(y, [layer_output((j, head)) for j in range(n)])

    def _layer_forward(self, inputs, depth):
        """One forward of the layer module per call, on the layer's unchanged input."""
        with torch.no_grad():
            hidden = self.model(**inputs, output_hidden_states=True).hidden_states[depth]
        value, layer, fused = value_projection(self.model, depth)

        def output(zero: tuple[int, int | None] | None) -> torch.Tensor:
            hook = value.register_forward_hook(zeroing_hook(*zero, self.heads, fused)) if zero else None
            try:
                with torch.no_grad():
                    out = layer(hidden)
            finally:
                if hook is not None:
                    hook.remove()
            return (out[0] if isinstance(out, tuple) else out)[0]

        return output

    def _stopped_forward(self, inputs, depth):
        """One forward of the model per call, stopped once layer `depth` has returned."""
        value, layer, fused = value_projection(self.model, depth)
        shared = self.model.config.model_type == "albert"
        call = depth if shared else 0

        def output(zero: tuple[int, int | None] | None) -> torch.Tensor:
            calls, kept = [0], []

            def stop(module, args, out):
                calls[0] += 1
                if calls[0] - 1 == call:
                    kept.append(out[0] if isinstance(out, tuple) else out)
                    raise _Stop

            hooks = [layer.register_forward_hook(stop)]
            if zero:
                hooks.append(value.register_forward_hook(zeroing_hook(*zero, self.heads, fused, call)))
            try:
                with torch.no_grad():
                    self.model(**inputs)
            except _Stop:
                pass
            finally:
                for hook in hooks:
                    hook.remove()
            return kept[0][0]

        return output


def reference_shares(c: np.ndarray, cls: np.ndarray, sep: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """VZ_COLUMNS of one cropped (n, n) matrix, written out plainly."""
    n = len(c)
    prev = [c[i, i - 1] if i > 0 else 0 for i in range(n)]
    nxt = [c[i, i + 1] if i < n - 1 else 0 for i in range(n)]
    return np.array(
        [(c @ cls).mean(), (c @ sep).mean(), (c @ punct).mean(), np.diag(c).mean(), np.mean(prev), np.mean(nxt)]
    )


def check_padding(matrices: list[torch.Tensor], key_mask: torch.Tensor) -> None:
    """Rows of real queries sum to 1; rows of padding queries and padding columns are 0."""
    real = key_mask.bool()
    for m in matrices:
        m4 = m if m.dim() == 4 else m[:, None]
        sums = m4.sum(-1)  # (B, H', S)
        torch.testing.assert_close(
            sums[real[:, None].expand_as(sums)], torch.ones(()).expand(int(real.sum()) * m4.shape[1])
        )
        assert (sums[~real[:, None].expand_as(sums)] == 0).all()
        assert (m4.transpose(-1, -2)[~real[:, None].expand_as(sums)] == 0).all()
        assert (m4 >= 0).all()


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_layer_variant_equals_brute_force_one_layer_forward_per_token(model_dir, family):
    path = model_dir(family)
    encoder = load_model(str(path), "cpu")
    batch = padded_batch(encoder)
    # 7 rows a chunk: chunks end inside examples, and one holds the end of one and the start of the next.
    vz = ValueZeroing(encoder, "layer", max_rows=7)
    matrices = vz.matrices(batch)
    key_mask = batch["attention_mask"].bool()
    masks = TokenKinds(encoder.tokenizer).masks(batch["input_ids"])
    shares = vz.run(batch, key_mask, *masks)
    assert len(matrices) == encoder.num_layers
    assert shares.shape == (len(TEXTS), encoder.num_layers, 1, len(VZ_COLUMNS)) and shares.dtype == np.float32
    check_padding(matrices, key_mask)
    reference = Reference(path)
    for b in range(len(TEXTS)):
        n = int(key_mask[b].sum())
        kinds = [m[b, :n].double().numpy() for m in masks]
        for depth in range(encoder.num_layers):
            expected = reference.matrix(batch, b, depth)
            np.testing.assert_allclose(matrices[depth][b, :n, :n].numpy(), expected, atol=TOLERANCE, rtol=0)
            np.testing.assert_allclose(shares[b, depth, 0], reference_shares(expected, *kinds), atol=TOLERANCE, rtol=0)
    for k in range(len(VZ_COLUMNS)):  # every share varies, [CLS], [SEP] and punctuation found
        assert shares[..., k].std() > 1e-3, VZ_COLUMNS[k]
    # Chunking is invisible: one row per chunk (each cut to its own example's length), chunks
    # that mix examples of different lengths below the batch's longest, and one chunk for all.
    for max_rows in (1, 40, 10_000):
        for a, b_ in zip(matrices, ValueZeroing(encoder, "layer", max_rows=max_rows).matrices(batch), strict=True):
            torch.testing.assert_close(a, b_, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_head_variant_equals_brute_force_per_head(model_dir, family):
    path = model_dir(family)
    encoder = load_model(str(path), "cpu")
    batch = padded_batch(encoder)
    vz = ValueZeroing(encoder, "head", max_rows=11)
    matrices = vz.matrices(batch)
    key_mask = batch["attention_mask"].bool()
    masks = TokenKinds(encoder.tokenizer).masks(batch["input_ids"])
    shares = vz.run(batch, key_mask, *masks)
    H = encoder.num_heads
    assert matrices[0].shape == (len(TEXTS), H, *key_mask.shape[1:], key_mask.shape[1])
    assert shares.shape == (len(TEXTS), encoder.num_layers, H, len(VZ_COLUMNS)) and shares.dtype == np.float32
    check_padding(matrices, key_mask)
    reference = Reference(path)
    depth = encoder.num_layers - 1
    for b in (0, 2, 3):  # a single sentence, the pair, the longest
        n = int(key_mask[b].sum())
        kinds = [m[b, :n].double().numpy() for m in masks]
        for h in range(H):
            expected = reference.matrix(batch, b, depth, head=h)
            np.testing.assert_allclose(matrices[depth][b, h, :n, :n].numpy(), expected, atol=TOLERANCE, rtol=0)
            np.testing.assert_allclose(shares[b, depth, h], reference_shares(expected, *kinds), atol=TOLERANCE, rtol=0)
    # Heads differ from each other, and from the all-heads matrix.
    layer = ValueZeroing(encoder, "layer").matrices(batch)[depth]
    assert (matrices[depth][:, 0] - matrices[depth][:, 1]).abs().max() > 0.05
    assert (matrices[depth][:, 0] - layer).abs().max() > 0.05


@pytest.mark.parametrize("family", ["distilbert", "electra", "albert", "modernbert", "deberta-v2", "mpnet"])
def test_every_other_family_equals_brute_force(model_dir, family):
    """ALBERT (one layer module at every depth), ModernBERT (rotary tables, a sliding-window
    layer), DeBERTa (relative positions; attention computed inline) and MPNet (position bias,
    inline) each need their layer's own arguments replayed: all variants equal brute force."""
    path = model_dir(family)
    encoder = load_model(str(path), "cpu")
    batch = padded_batch(encoder)
    key_mask = batch["attention_mask"].bool()
    layer = ValueZeroing(encoder, "layer", max_rows=9).matrices(batch)
    head = ValueZeroing(encoder, "head", max_rows=9).matrices(batch)
    check_padding(layer, key_mask)
    check_padding(head, key_mask)
    reference = Reference(path)
    for depth in range(encoder.num_layers):
        for b in (1, 2):  # padded, a short single sentence and the pair
            n = int(key_mask[b].sum())
            expected = reference.matrix(batch, b, depth)
            np.testing.assert_allclose(layer[depth][b, :n, :n].numpy(), expected, atol=TOLERANCE, rtol=0)
    b, h, depth = 2, 1, encoder.num_layers - 1
    n = int(key_mask[b].sum())
    expected = reference.matrix(batch, b, depth, head=h)
    np.testing.assert_allclose(head[depth][b, h, :n, :n].numpy(), expected, atol=TOLERANCE, rtol=0)


def test_without_the_zeroing_the_matrices_differ(model_dir, monkeypatch):
    """The comparison can fail: with the observer leaving the weights alone, the layer is
    recomputed unchanged and C is rounding noise, far from brute force."""
    path = model_dir("bert")
    encoder = load_model(str(path), "cpu")
    batch = padded_batch(encoder)

    def leave_alone(self, module, probs, value):
        self.calls += 1
        return probs

    monkeypatch.setattr(value_zeroing._ZeroColumns, "observe", leave_alone)
    broken = ValueZeroing(encoder, "layer").matrices(batch)
    n = int(batch["attention_mask"][0].sum())
    expected = Reference(path).matrix(batch, 0, 0)
    assert np.abs(broken[0][0, :n, :n].numpy() - expected).max() > 0.05


def test_an_unknown_variant_and_a_model_without_per_depth_layers_are_refused(model_dir, monkeypatch):
    encoder = load_model(str(model_dir("bert")), "cpu")
    with pytest.raises(ValueError, match="unknown value-zeroing variant 'token'"):
        ValueZeroing(encoder, "token")
    monkeypatch.setattr(value_zeroing, "layer_modules", lambda model: None)
    with pytest.raises(ModelError, match="cannot recompute the layers") as err:
        ValueZeroing(encoder, "layer")
    assert "\n" not in str(err.value)
