"""What attnwh knows of a model family beyond what transformers' attention interface hands its
attention function: one record per family that differs from the common layout, and the
rules that decide whether a model is read as an encoder or as a decoder.

Everything else is read from the model itself when it loads (`reading.py`): which layers are
softmax attention, under which layer numbers, with which window, chunk, rotary positions or
learned sink, and which linear layer projects each layer's heads back to the model width
(W_O). The record of a family only says where to look first and what cannot be observed:

- ``layers``: where the list of per-depth layer modules sits under the base model (None where
  depths share one module, as ALBERT's do);
- ``projections``: the query, key and value projections of an attention module (the ablation
  sweep's prefix cache takes their outputs from the reference pass);
- ``output`` and ``output_norm``: W_O and, in a post-LN encoder, the LayerNorm applied to
  the residual sum after it, as paths from the attention module (``^`` is its parent);
- ``inline``: the attention class that computes softmax(scores) @ values in its own forward
  rather than through the attention interface (`inline.py`); ``whole_mask``: it adds the
  mask itself, so the mask function must hand it whole;
- ``float32_softmax``: its eager attention takes the softmax in float32 whatever the
  model's dtype (only a half-precision model's last bits depend on it);
- ``reserved_positions``: RoBERTa-style position ids that start after the padding id, so the
  position table holds padding_idx + 1 fewer usable positions.

A family laid out like Llama (``model.layers[i].self_attn.{q,k,v,o}_proj``) needs no record:
:data:`DECODER` covers it, and any causal language model transformers maps is read when its
attention passes the check at load (`reading.py`), whatever its name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
)


@dataclass(frozen=True)
class Family:
    """The facts of one family (see the module's docstring)."""

    encoder: bool = False
    layers: str | None = "layers"
    projections: tuple[tuple[str, ...], ...] = (("q_proj", "k_proj", "v_proj"),)
    output: str = "o_proj"
    output_norm: str | None = None
    inline: str | None = None
    whole_mask: bool = False
    float32_softmax: bool = True
    reserved_positions: bool = False


# The common layouts: a decoder like Llama, an encoder like BERT.
DECODER = Family()
_BERT = Family(
    encoder=True,
    layers="encoder.layer",
    projections=(("query", "key", "value"),),
    output="^.output.dense",
    output_norm="^.output.LayerNorm",
    float32_softmax=False,
)

FAMILIES: dict[str, Family] = {
    # Encoders: attnwh's statistics of [CLS], [SEP] and the post-LN lenses are defined for these.
    "bert": _BERT,
    "electra": _BERT,
    "roberta": replace(_BERT, reserved_positions=True),
    "xlm-roberta": replace(_BERT, reserved_positions=True),
    "camembert": replace(_BERT, reserved_positions=True),
    "distilbert": replace(
        _BERT,
        layers="transformer.layer",
        projections=(("q_lin", "k_lin", "v_lin"),),
        output="out_lin",
        output_norm="^.sa_layer_norm",
    ),
    # ALBERT calls one shared layer module at every depth: no list of layers, calls told apart by order.
    "albert": replace(_BERT, layers=None, output="dense", output_norm="LayerNorm"),
    # Pre-LN, fused Q, K, V; local layers with a sliding window.
    "modernbert": replace(_BERT, layers="layers", projections=(("Wqkv",),), output="Wo", output_norm=None),
    # DeBERTa-v2/v3: relative attention computed inline; only its values are taken from the
    # reference pass (with shared keys its query and key projections also run on the relative
    # embeddings, twice per forward).
    "deberta-v2": replace(_BERT, projections=(("value_proj",),), inline="DisentangledSelfAttention"),
    "mpnet": replace(
        _BERT,
        projections=(("q", "k", "v"),),
        output="o",
        output_norm="^.LayerNorm",
        inline="MPNetSelfAttention",
        whole_mask=True,
        reserved_positions=True,
    ),
    # Decoders that differ from Llama's layout.
    "gpt2": replace(DECODER, layers="h", projections=(("c_attn",),), output="c_proj", float32_softmax=False),
    "phi3": replace(DECODER, projections=(("qkv_proj",),)),
}

# The encoder families attnwh has been checked on (their tokenizers' [CLS] and [SEP] are what
# the statistics are about); another family with a masked language model is read with BERT's
# layout when it passes the check at load, and every other family as a decoder when
# transformers maps it to a causal language model.
ENCODER_FAMILIES: tuple[str, ...] = tuple(name for name, family in FAMILIES.items() if family.encoder)


def facts_of(model_type: str) -> Family:
    """The record of `model_type`: its own; for another family that transformers gives a
    masked language model, BERT's layout (an encoder); for any other, Llama's (a decoder)."""
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    return _BERT if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else DECODER


def is_language_model(model_type: str) -> bool:
    """Whether transformers maps `model_type` to a causal language model that is not an
    encoder's or a sequence-to-sequence model's language-model head."""
    return (
        model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
        and model_type not in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    )


def language_model_families() -> list[str]:
    """Every family transformers maps to a causal language model that is not an encoder's or
    a sequence-to-sequence model's head: what attnwh may read as a decoder."""
    return sorted(t for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if is_language_model(t))
