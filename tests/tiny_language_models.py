"""Tiny random-weight language models of every family transformers maps to a causal language
model, each built from its own config class with widths, layers and experts shrunk (the
census: tests/test_census.py, docs/families.md).

The family list is transformers' own mapping, not a copy: a release that adds a family is
built and checked without a change here. Sizes are set by the names of the config's fields
(:data:`SIZES`), which the families share; :data:`OVERRIDES` switches a family's own features on
where the shrunk default would leave them out (a hybrid's attention layer past the fourth).
A multimodal family's sub-configs (vision, audio) are shrunk by the same rules.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModel, AutoModelForCausalLM, PreTrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from attnwh.ingest.model.families import language_model_families
from tiny_models import _decoder_tokenizer

# Every config field of these names, in any family, takes this value.
SIZES: dict[str, Any] = dict(
    hidden_size=64,
    d_model=64,
    n_embd=64,
    intermediate_size=48,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=16,
    shared_intermediate_size=16,
    ffn_dim=48,
    n_inner=48,
    num_attention_heads=4,
    n_head=4,
    num_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    # mixture of experts
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    moe_num_experts=4,
    num_experts_per_tok=2,
    moe_topk=2,
    top_k_experts=2,
    moe_k=2,
    n_group=1,
    topk_group=1,
    n_shared_experts=1,
    num_shared_experts=1,
    moe_num_shared_experts=1,
    first_k_dense_replace=1,
    # latent attention (DeepSeek-V2/V3, MiniCPM3)
    q_lora_rank=16,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    qk_head_dim=16,
    # linear attention and state-space layers of hybrids
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    mamba_d_state=8,
    mamba_n_heads=4,
    mamba_d_head=32,  # mamba_n_heads × mamba_d_head = expand (2) × hidden_size
    state_size=8,
    mamba_n_groups=1,
    mamba_chunk_size=16,
    time_step_rank=8,
    mamba_dt_rank=8,
    chunk_size=16,
    # positions, windows shorter than the test inputs, chunks crossed by them
    max_position_embeddings=256,
    n_positions=256,
    sliding_window=5,
    sliding_window_size=5,
    attention_chunk_size=8,
    rotary_dim=8,
    # sparse-attention indexers, per-layer head counts, extra prediction layers
    index_topk=16,
    index_head_dim=16,
    index_n_heads=2,
    swa_num_attention_heads=4,
    swa_num_key_value_heads=2,
    swa_head_dim=16,
    num_mtp_layers=0,
    num_nextn_predict_layers=0,
    # per-layer embeddings (Gemma 3n, Gemma 4) and hashed byte n-grams (BLT): tables of their own
    vocab_size_per_layer_input=512,
    hidden_size_per_layer_input=8,
    encoder_hash_byte_group_vocab=512,
    # vision and audio towers of multimodal families
    image_size=32,
    patch_size=8,
    vision_output_dim=64,
    projection_dim=64,
    out_hidden_size=64,
)
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
LAYERS = 4
# A family's own features that the shrunk defaults leave out.
OVERRIDES: dict[str, dict[str, Any]] = {
    "jamba": {"num_hidden_layers": 6, "attn_layer_period": 3, "attn_layer_offset": 1},
    "mamba2": {"head_dim": 32},
    # Hybrids whose default pattern puts no attention layer among the first four.
    "zamba2": {"layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention", "mamba", "attention"]},
    "bamba": {"attn_layer_indices": [1, 3]},
    "bailing_hybrid": {"layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"]},
    "kimi_linear": {"layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention", "conv", "full_attention"]},
    "falcon_h1": {"mamba_d_ssm": 128},
}


def _fields(cls: type) -> set[str]:
    try:
        return {f.name for f in dataclasses.fields(cls)}
    except TypeError:
        return set()


def _arguments(cls: type, family: str, layers: int, special: dict[str, int]) -> dict[str, Any]:
    names = _fields(cls)
    kw = {k: v for k, v in {**SIZES, **special}.items() if k in names}
    kw.update({k: layers for k in LAYER_FIELDS if k in names})
    if "kv_lora_rank" in names:  # latent attention expands keys and values per query head
        kw["num_key_value_heads"] = kw.get("num_attention_heads", 4)
    for name, sub in (getattr(cls, "sub_configs", None) or {}).items():
        if not getattr(sub, "model_type", ""):  # AutoConfig: the composite's default sub-model
            default = getattr(cls(), name, None)
            if not isinstance(default, PreTrainedConfig):
                continue
            sub = type(default)
        kw[name] = sub(**_arguments(sub, family, layers if name == "text_config" else 2, special))
    kw.update(OVERRIDES.get(family, {}))
    return kw


def tiny_config(family: str, vocab: int, special: dict[str, int]) -> PreTrainedConfig:
    """The tiny config of `family`: its own config class, shrunk (see :data:`SIZES`)."""
    cls = CONFIG_MAPPING[family]
    return cls(**_arguments(cls, family, LAYERS, {"vocab_size": vocab, **special}))


def make_tiny_language_model(family: str, out: Path, seed: int = 0, head: bool = False) -> Path:
    """Save a seeded random-weight base model of `family` (with `head`: its causal-LM class,
    the language-model head included) with a byte-level BPE tokenizer (BOS first) into `out`;
    raises whatever transformers raises where the family's tiny model cannot be built."""
    tokenizer = _decoder_tokenizer("llama")
    special = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    config = tiny_config(family, 512, special)
    torch.manual_seed(seed)
    model = (AutoModelForCausalLM if head else AutoModel).from_config(config)
    # Peaked maps, as for the other tiny models: larger query and key weights.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "c_attn.weight", "qkv_proj.weight")):
                param.mul_(6.0)
    model.save_pretrained(out)
    tokenizer.model_max_length = 256
    tokenizer.save_pretrained(out)
    return out


FAMILIES = language_model_families()
