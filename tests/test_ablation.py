"""Disabling heads: exact against plain forward passes, the cached path equal to the full one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

from attnwh.ingest.measures.ablation import (
    AblationSweep,
    Configuration,
    combination,
    head_importance_batch,
    sweep_configurations,
)
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import forward_inputs, load_model
from attnwh.ingest.sources.examples import Example, TaskData
from helpers import SENTENCES

LAYERS, HEADS = 3, 4


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    from tiny_models import make_sharp_classifier

    found = {
        family: make_sharp_classifier(family, tmp_path_factory.mktemp(f"abl-{family}"), LAYERS, HEADS)
        for family in ("bert", "roberta", "distilbert", "electra", "albert")
    }
    # Shaped like BERT-large (24 layers × 16 heads): deeper, more and narrower heads.
    found["bert-large-shape"] = make_sharp_classifier("bert", tmp_path_factory.mktemp("abl-large"), 5, 8)
    return found


def batch_for(encoder, n: int = 6, pairs: bool = True) -> dict[str, torch.Tensor]:
    examples = tuple(
        Example(i, None, SENTENCES[i % len(SENTENCES)], SENTENCES[(i + 3) % len(SENTENCES)] if pairs else None, "0")
        for i in range(n)
    )
    data = TaskData("test", "toy", "dev", examples, ("0", "1"), "test")
    encoded = encode_task(encoder.tokenizer, data, 48)
    return collate(encoded, list(range(n)), encoder.tokenizer.pad_token_id, encoder.device)


def hand_disabled_logits(path, batch, disabled: set[tuple[int, int]], mode: str) -> np.ndarray:
    """Eager BERT-style model; each disabled head's slice of its self-attention output is
    replaced by hand: the mean of its value vectors over the real tokens (uniform weights),
    or zero."""
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    mask = batch["attention_mask"].float()
    hooks = []
    for layer_index, layer in enumerate(model.base_model.encoder.layer):
        heads = [h for l, h in disabled if l == layer_index]
        if not heads:
            continue
        module = layer.attention.self

        def replace(mod, args, output, heads=heads):
            context, weights = output
            d = mod.attention_head_size
            values = mod.value(args[0])  # (B, S, H * d)
            context = context.clone()
            for h in heads:
                v = values[..., h * d : (h + 1) * d]
                mean = (v * mask[..., None]).sum(1, keepdim=True) / mask.sum(1)[:, None, None]
                context[..., h * d : (h + 1) * d] = mean if mode == "uniform" else 0.0
            return context, weights

        hooks.append(module.register_forward_hook(replace))
    with torch.no_grad():
        logits = model(**forward_inputs(model, batch)).logits
    for hook in hooks:
        hook.remove()
    return logits.numpy()


def test_nothing_disabled_reproduces_the_baseline_bit_for_bit(classifier_dir):
    encoder = load_model(str(classifier_dir["bert"]), "cpu")
    batch = batch_for(encoder)
    with torch.no_grad():
        plain = encoder.model(**forward_inputs(encoder.model, batch)).logits.numpy()
    for cached in (True, False):
        sweep = AblationSweep(encoder, "uniform", prefix_cache=cached)
        out = sweep.logits(batch, [Configuration("baseline", ())])
        assert np.array_equal(out[0], plain)


@pytest.mark.parametrize("family", ["bert", "roberta", "bert-large-shape"])
@pytest.mark.parametrize("mode", ["uniform", "zero"])
def test_disabled_head_equals_a_hand_replaced_forward_pass(classifier_dir, family, mode):
    path = classifier_dir[family]
    encoder = load_model(str(path), "cpu")
    batch = batch_for(encoder)  # padded pairs
    configs = sweep_configurations(encoder.num_layers, encoder.num_heads)
    out = AblationSweep(encoder, mode).logits(batch, configs)
    for i, config in enumerate(configs):
        reference = hand_disabled_logits(path, batch, set(config.heads), mode)
        np.testing.assert_allclose(out[i], reference, atol=1e-5, rtol=0, err_msg=f"{config}")
    # Every configuration moves the logits far beyond the tolerance (else the test is vacuous).
    assert (np.abs(out[1:] - out[0]).max(axis=(1, 2)) > 1e-3).all()


def test_all_heads_of_a_layer_equal_the_layer_configuration(classifier_dir):
    encoder = load_model(str(classifier_dir["bert"]), "cpu")
    batch = batch_for(encoder)
    layer = [c for c in sweep_configurations(LAYERS, HEADS) if c.kind == "layer" and c.layer == 1][0]
    by_heads = combination("helpful", [(1, h) for h in reversed(range(HEADS))])
    out = AblationSweep(encoder, "uniform").logits(batch, [layer, by_heads])
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize(
    ("family", "mode"),
    [(f, "uniform") for f in ("bert", "roberta", "distilbert", "electra", "albert", "bert-large-shape")]
    + [("bert", "zero"), ("distilbert", "zero")],
)
@pytest.mark.parametrize("per_pass", [1, 5])
def test_cached_prefix_path_equals_the_full_path(classifier_dir, family, per_pass, mode):
    encoder = load_model(str(classifier_dir[family]), "cpu")
    batch = batch_for(encoder)
    configs = sweep_configurations(encoder.num_layers, encoder.num_heads) + [
        combination("top_k", [(2, 1), (1, 3)], k=2)
    ]
    full = AblationSweep(encoder, mode, prefix_cache=False).logits(batch, configs)
    cached = AblationSweep(encoder, mode, prefix_cache=True, configs_per_pass=per_pass).logits(batch, configs)
    if per_pass == 1:
        assert np.array_equal(cached, full)  # the same operations on the same tensors
    else:  # a batch of another size may take other kernels
        np.testing.assert_allclose(cached, full, atol=1e-5, rtol=0)
    assert (np.abs(full[1:] - full[0]).max(axis=(1, 2)) > 5e-5).all()  # every configuration matters


def test_importance_is_the_gradient_of_the_loss_with_respect_to_a_head_gate(classifier_dir):
    """Finite differences of the loss with one head's output scaled by 1 ± eps, taken on a
    plain eager Hugging Face model in float64 with a hook on the attention's output projection
    (the head's slice of its input scaled): nothing of attnwh's capture or gates."""
    from transformers import AutoModelForSequenceClassification

    encoder = load_model(str(classifier_dir["bert"]), "cpu")
    batch = batch_for(encoder, n=1)  # one example: |sum of gradients| = sum of |gradients|
    targets = torch.tensor([1])
    importance = head_importance_batch(encoder, batch, targets, regression=False)
    assert importance.shape == (LAYERS, HEADS)

    plain = AutoModelForSequenceClassification.from_pretrained(classifier_dir["bert"], attn_implementation="eager")
    plain = plain.double().eval()
    width = plain.config.hidden_size // HEADS

    def loss(layer: int, head: int, scale: float) -> float:
        def scaled(module, args):
            (context,) = args
            context = context.clone()
            context[..., head * width : (head + 1) * width] *= scale
            return (context,)

        projection = plain.bert.encoder.layer[layer].attention.output.dense
        hook = projection.register_forward_pre_hook(scaled)
        try:
            with torch.no_grad():
                logits = plain(**batch).logits
        finally:
            hook.remove()
        return float(torch.nn.functional.cross_entropy(logits, targets))

    eps = 1e-4
    for layer, head in [(0, 0), (1, 2), (2, 3)]:
        numeric = (loss(layer, head, 1 + eps) - loss(layer, head, 1 - eps)) / (2 * eps)
        assert abs(numeric) > 1e-5  # the head matters, so the comparison can fail
        assert importance[layer, head] == pytest.approx(abs(numeric), rel=1e-3)
