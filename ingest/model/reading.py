"""What attnwh reads of a model: its softmax attention layers, found and checked when it loads.

attnwh reads any model whose attention goes through transformers' attention interface (or
one of the inline attentions of `inline.py`), whatever its family. Whether it can is not
decided by a list of names but by one short probe input run through the model twice when it
loads, before anything is written:

1. through attnwh's attention function, with an observer that keeps each layer's maps, and a
   tap that sees each call's arguments (sliding window, learned sink) and output, and the
   inputs of the linear layers that may be W_O;
2. through the family's own eager attention with ``output_attentions=True``, with hooks on the
   attention modules the first pass saw.

The model is read when every attention module was called once per pass (or, where depths
share one module, once per depth), with one map per query head, rows summing to 1 (or to 1
less a learned sink's share), causal where the model is a decoder, and the same maps as its
eager attention returns (within a few units of its dtype's precision); and when no
softmax map that eager returns was missed. Anything else is refused in one line naming the
module and what differs, so a model is read exactly or not at all.

The same probe says, per layer of the model: whether attnwh reads it (hybrid models have
layers of linear attention, state-space or convolution blocks between their attention
layers), its kind, window, chunk, whether it gets rotary position tables, whether it adds a
learned sink, and which linear layer projects its heads back to the model width (W_O): the
one whose input is exactly the attention function's output. Where no layer takes that
output as it is (a gate multiplies it first, as in Qwen3-Next), the layer is ``gated`` and
the measures that read W_O (the norm lens, context mixing) are not taken on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig

from attnwh.errors import ModelError
from attnwh.ingest.model import capture
from attnwh.ingest.model.families import Family

# The probe: words and punctuation, longer than the tiny windows of test models, short enough
# to cost little next to loading the weights (it runs twice). Layers that treat longer inputs
# otherwise (DeepSeek-V4's compressed memory) are refused by the attention function when
# they do.
PROBE_TEXT = " ".join(
    ["The quick brown fox jumps over the lazy dog. A film, a book, and a song: which one did you like?"] * 2
)
PROBE_TOKENS = 64

# Tensors a family may hand its attention function that change nothing attnwh computes
# (positions for kernels that need them), or that attnwh models (`capture._Scoring`).
_KNOWN_TENSORS = frozenset(
    {
        "position_ids",
        "cache_position",
        "position_embeddings",
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "s_aux",
        "sinks",
        "position_bias",
    }
)

# What a config's `layer_types` calls a layer that attnwh does not read, in the warehouse's words.
_KINDS = {
    "linear_attention": "linear attention",
    "mamba": "state space",
    "mamba2": "state space",
    "ssm": "state space",
    "recurrent": "recurrent",
    "conv": "convolution",
    "short_conv": "convolution",
    "mlp": "feed-forward only",
    "moe": "feed-forward only",
    "cross_attention": "cross attention",
}


@dataclass(frozen=True)
class LayerFacts:
    """One layer of a model as attnwh reads it (the `model_layers` table)."""

    layer: int  # the model's own layer number, 0-based
    kind: str  # attention, sliding, chunked; or linear attention, state space, convolution, … (not read)
    read: bool  # attnwh reads its attention maps
    module: str  # the class of its attention module (of the layer, where it has none)
    window: int | None = None  # keys a sliding-window row sees, itself included
    chunk: int | None = None  # chunked attention: a row sees only its own chunk of this many tokens
    rotary: bool | None = None  # its attention gets rotary position tables
    gated: bool | None = None  # its heads' output is changed (gated) before W_O: no norm lens
    learned_sink: bool = False  # a learned sink logit joins each row's softmax


@dataclass(frozen=True)
class AttentionOutput:
    """Where a self-attention module's heads go next: the linear layer that projects them
    back to the model width (W_O), and the LayerNorm applied to the residual sum after it
    (None where the block is pre-LN: no norm follows the sum)."""

    dense: nn.Linear
    norm: nn.LayerNorm | None


@dataclass
class Reading:
    """What the check at load found: every layer's facts, W_O of each attention module whose
    heads reach it unchanged, and whether the maps are causal."""

    layers: tuple[LayerFacts, ...]
    outputs: dict[nn.Module, AttentionOutput] = field(default_factory=dict)
    causal: bool = False
    modules: list[nn.Module] = field(default_factory=list)  # the attention modules, in call order

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The model's layer numbers attnwh reads, in the order their attention runs."""
        return tuple(f.layer for f in self.layers if f.read)


class _Record:
    """Observer and tap of the probe's pass through attnwh's attention function: each call's
    module, maps and facts, and what the function returned to each module."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.outputs: dict[int, torch.Tensor] = {}  # what the attention function returned, by module
        self._facts: dict[str, Any] = {}

    def called(self, module: nn.Module, kwargs: dict[str, object]) -> None:
        window = kwargs.get("sliding_window")
        self._facts = {
            "window": int(window) if isinstance(window, int) and window > 0 else None,
            "sink": isinstance(kwargs.get("s_aux"), torch.Tensor) or isinstance(kwargs.get("sinks"), torch.Tensor),
            "tensors": sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k not in _KNOWN_TENSORS),
        }

    def observe(self, module: nn.Module, probs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        # An inline attention (DeBERTa, MPNet) is observed without a call of the attention function.
        facts = self._facts or {"window": None, "sink": False, "tensors": []}
        self.calls.append(
            {
                "module": module,
                "probs": probs.detach().float().clone(),
                "values": value.shape[1],
                "dtype": probs.dtype,
                **facts,
            }
        )
        self._facts = {}
        return probs

    def returned(self, module: nn.Module, output: torch.Tensor) -> None:
        self.outputs.setdefault(id(module), output.detach())


def read(
    model: nn.Module,
    config: PretrainedConfig,
    family: Family,
    inputs: dict[str, torch.Tensor],
    name: str,
    num_layers: int,
    num_heads: int,
    causal: bool,
) -> Reading:
    """Run the probe `inputs` (one unpadded input) through `model` and check its attention
    (see the module's docstring); ModelError with one line where attnwh cannot read it."""
    # W_O is looked for among the linear layers of attention modules (and where the family
    # says it is): their inputs are kept during the first pass, with what the attention
    # function returns to each module.
    linears = _LinearInputs(_candidates(model, family))
    record = _Record()
    with linears.recording(), torch.inference_mode(), capture.observing(record), capture.tapping(record):
        model(**inputs)
    calls = record.calls
    modules = {id(c["module"]): c["module"] for c in calls}
    eager = _eager_maps(model, modules, inputs)
    layer_list = find_layers(model, family, num_layers, list(modules.values()))
    if not calls:
        if eager is not None and eager.maps:
            raise ModelError(
                f"{name} computes its attention outside transformers' attention interface "
                f"({_module_names(model)}), which attnwh cannot observe"
            )
        raise ModelError(f"{name} has no softmax attention layer attnwh can read ({_layer_names(layer_list)})")
    for call in calls:
        if call.get("tensors"):
            raise ModelError(
                f"{type(call['module']).__name__} of {name} hands its attention function "
                f"{', '.join(call['tensors'])}, which attnwh does not model"
            )
    _check_calls(calls, name, num_heads, causal, layer_list is None and family.layers is None)
    if eager is not None:
        _check_against_eager(calls, eager, name, model)
    for call in calls:
        if id(call["module"]) in record.outputs:
            call["output"] = record.outputs[id(call["module"])]
    facts, found = _layer_facts(calls, eager, layer_list, config, family, linears, num_layers, name)
    return Reading(layers=facts, outputs=found, causal=causal, modules=list(modules.values()))


def _check_calls(calls: list[dict[str, Any]], name: str, num_heads: int, causal: bool, shared: bool) -> None:
    """One call per attention module (per depth where depths share a module), maps per query
    head whose rows sum to 1 (less a learned sink), and nothing after the row on a decoder."""
    counts: dict[int, int] = {}
    for call in calls:
        counts[id(call["module"])] = counts.get(id(call["module"]), 0) + 1
    repeated = [c["module"] for c in calls if counts[id(c["module"])] > 1]
    if repeated and not shared:
        module = repeated[0]
        raise ModelError(
            f"{type(module).__name__} of {name} calls the attention function {counts[id(module)]} times in one pass "
            "(a differential, looped or multi-pass attention), which attnwh does not read"
        )
    for call in calls:
        probs, module = call["probs"], type(call["module"]).__name__
        if probs.shape[1] != num_heads:
            raise ModelError(
                f"{module} of {name} gives maps of {probs.shape[1]} heads where the model has {num_heads} "
                "(layers with their own numbers of heads), which attnwh does not read"
            )
        if call["values"] != probs.shape[1]:
            raise ModelError(
                f"{module} of {name} hands values of {call['values']} heads beside maps of {probs.shape[1]}: "
                "not attention per query head, which attnwh does not read"
            )
        sums = probs.sum(-1)
        slack = _slack(call["dtype"])
        if (sums > 1 + slack).any() or (probs < 0).any() or (not call["sink"] and (sums < 1 - slack).any()):
            raise ModelError(
                f"{module} of {name} gives attention rows that do not sum to 1: not a softmax attnwh can read"
            )
        n = probs.shape[-1]
        if probs.shape[-2] != n:
            raise ModelError(
                f"{module} of {name} attends to {n} keys for {probs.shape[-2]} tokens (keys that are not the "
                "input's tokens), which attnwh does not read"
            )
        if causal:
            later = torch.ones(n, n, dtype=torch.bool, device=probs.device).triu(1)
            if probs[..., later].abs().max() > 0:
                raise ModelError(f"{module} of {name} attends to later tokens: not the causal attention of a decoder")


@dataclass
class _Eager:
    """The eager pass: each observed module's returned weights and keyword arguments, in call
    order, and every map `output_attentions` returned."""

    weights: dict[int, list[torch.Tensor | None]]
    rotary: dict[int, bool]
    maps: list[torch.Tensor]


def _eager_maps(model: Any, modules: dict[int, nn.Module], inputs: dict[str, torch.Tensor]) -> _Eager | None:
    """The same input through the family's eager attention (None where it has none). `model`:
    a transformers model (Any: torch types its methods as tensors)."""
    implementation = getattr(model.config, "_attn_implementation", None)
    try:
        model.set_attn_implementation("eager")
    except (ValueError, ImportError, AttributeError):
        return None
    weights: dict[int, list[torch.Tensor | None]] = {}
    rotary: dict[int, bool] = {}

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        returned = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        weights.setdefault(id(module), []).append(returned.detach() if isinstance(returned, torch.Tensor) else None)
        uses = getattr(module, "use_rope", None)
        rotary[id(module)] = bool(uses) if uses is not None else kwargs.get("position_embeddings") is not None

    hooks = [m.register_forward_hook(hook, with_kwargs=True) for m in modules.values()]
    try:
        with torch.inference_mode():
            out = model(**inputs, output_attentions=True)
    finally:
        for handle in hooks:
            handle.remove()
        if implementation is not None:
            model.set_attn_implementation(implementation)
    maps = [a for a in (getattr(out, "attentions", None) or ()) if isinstance(a, torch.Tensor)]
    return _Eager(weights, rotary, maps)


def _check_against_eager(calls: list[dict[str, Any]], eager: _Eager, name: str, model: nn.Module) -> None:
    """Each call's maps equal what the family's eager attention returned for it; no softmax map
    that eager returned was left unobserved."""
    seen: dict[int, int] = {}
    for call in calls:
        key = id(call["module"])
        at = seen.get(key, 0)
        seen[key] = at + 1
        returned = eager.weights.get(key, [])
        theirs = returned[at] if at < len(returned) else None
        if theirs is None:
            continue
        ours, theirs_f = call["probs"], theirs.float()
        if theirs_f.shape != ours.shape:
            raise ModelError(
                f"{type(call['module']).__name__} of {name} returns maps of shape {tuple(theirs_f.shape)} from its "
                f"eager attention but computes {tuple(ours.shape)} through the attention interface"
            )
        if call["sink"] and torch.allclose(theirs_f.sum(-1), torch.ones(()), atol=_slack(theirs.dtype)):
            # Eager returns the weights before its sink scales the heads' output (GraniteSWA):
            # compare attnwh's token weights renormalised to 1.
            ours = ours / ours.sum(-1, keepdim=True).clamp_min(torch.finfo(ours.dtype).tiny)
        difference = float((ours - theirs_f).abs().max()) if ours.numel() else 0.0
        if difference > _slack(theirs.dtype):
            raise ModelError(
                f"{type(call['module']).__name__} of {name} computes attention that attnwh does not model: its maps "
                f"differ from its own eager attention's by {difference:.3g}"
            )
    observed = [w for ws in eager.weights.values() for w in ws if w is not None]
    for maps in eager.maps:
        if maps.dim() != 4 or any(w.shape == maps.shape and torch.equal(w, maps) for w in observed):
            continue
        sums = maps.float().sum(-1)
        # A softmax map nobody observed: attention computed outside the interface. Maps that are
        # no softmax (a linear attention's, returned by some hybrids) are other kinds of layer.
        if (maps >= 0).all() and torch.allclose(sums, torch.ones(()), atol=_slack(maps.dtype)):
            raise ModelError(
                f"{name} computes some of its attention outside transformers' attention interface "
                f"({_module_names(model)}), which attnwh cannot observe"
            )


def _slack(dtype: torch.dtype) -> float:
    """How far a softmax row in `dtype` may sum from 1, and two computations of one weight may
    differ: 1e-4 in float32, four of the dtype's eps in half precision (bfloat16: 0.031)."""
    return max(1e-4, 4 * torch.finfo(dtype).eps)


def _candidates(model: nn.Module, family: Family) -> list[nn.Module]:
    """The linear layers that may be W_O: those inside attention modules (by class name), and
    the family's W_O of each (a BERT-style W_O sits beside the self-attention module)."""
    found: dict[int, nn.Module] = {}
    for module in model.modules():
        if "Attention" not in type(module).__name__:
            continue
        found.update({id(m): m for m in module.modules() if _is_linear(m)})
        named = _resolve(module, family.output)
        if named is not None and _is_linear(named):
            found[id(named)] = named
    return list(found.values())


class _LinearInputs:
    """The first input of every linear layer (nn.Linear, GPT-2's Conv1D) during the first pass."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.modules = modules
        self.inputs: dict[int, list[torch.Tensor]] = {}

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        def hook(module: nn.Module, args: tuple) -> None:
            if args and isinstance(args[0], torch.Tensor):
                self.inputs.setdefault(id(module), []).append(args[0].detach())

        hooks = [m.register_forward_pre_hook(hook) for m in self.modules]
        try:
            yield
        finally:
            for handle in hooks:
                handle.remove()

    def takes(self, module: nn.Module, output: torch.Tensor) -> bool:
        """Whether `module` was called with exactly `output` (batch, seq, heads × head_dim)."""
        return any(x.shape == output.shape and torch.equal(x, output) for x in self.inputs.get(id(module), ()))


def _is_linear(module: object) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def find_layers(
    model: nn.Module, family: Family, num_layers: int, seen: list[nn.Module] | None = None
) -> list[nn.Module] | None:
    """The model's per-depth layer modules: at the family's path under the base model, or the
    list of `num_layers` modules that holds the attention modules `seen` (a multimodal model's
    language model sits deeper); None where depths share modules (ALBERT)."""
    if family.layers is None:
        return None
    base: Any = getattr(model, "base_model", model)
    with contextlib.suppress(AttributeError):
        found = base.get_submodule(family.layers)
        if isinstance(found, nn.ModuleList) and len(found) == num_layers:
            return list(found)
    wanted = {id(m) for m in seen or ()}
    for module in base.modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            inside = {id(m) for layer in module for m in layer.modules()}
            if wanted <= inside:
                return list(module)
    return None


def _layer_facts(
    calls: list[dict[str, Any]],
    eager: _Eager | None,
    layers: list[nn.Module] | None,
    config: PretrainedConfig,
    family: Family,
    linears: _LinearInputs,
    num_layers: int,
    name: str,
) -> tuple[tuple[LayerFacts, ...], dict[nn.Module, AttentionOutput]]:
    """Every layer's facts, and W_O of the attention modules whose heads reach it unchanged."""
    owner: dict[int, int] = {}
    if layers is not None:
        for number, layer in enumerate(layers):
            for module in layer.modules():
                owner.setdefault(id(module), number)
    types = layer_types(config, num_layers)
    chunk = getattr(config, "attention_chunk_size", None)
    read: dict[int, LayerFacts] = {}
    outputs: dict[nn.Module, AttentionOutput] = {}
    for order, call in enumerate(calls):
        module = call["module"]
        number = owner.get(id(module), order) if layers is not None else order
        if number in read:
            continue
        dense = _output_projection(module, call.get("output"), family, linears)
        if dense is not None:
            outputs[module] = AttentionOutput(_as_linear(dense), _norm(module, family))
        kind = types[number] if types is not None else None
        window = call["window"]
        chunked = kind == "chunked_attention" and chunk
        read[number] = LayerFacts(
            layer=number,
            kind="sliding" if window else "chunked" if chunked else "attention",
            read=True,
            module=type(module).__name__,
            window=window,
            chunk=int(chunk) if chunked and chunk else None,
            rotary=eager.rotary.get(id(module)) if eager is not None else None,
            # Inline attention (DeBERTa, MPNet) returns nothing through the interface: its W_O is the family's.
            gated=dense is None if "output" in call else None,
            learned_sink=bool(call["sink"]),
        )
    facts = []
    for number in range(num_layers if layers is not None else len(read)):
        if number in read:
            facts.append(read[number])
            continue
        assert layers is not None  # without a list of layers every call is a layer of its own
        kind = types[number] if types is not None else None
        unseen = _softmax_attention(layers[number])
        if unseen is not None and "CrossAttention" in unseen:
            # Attention to another input (Mllama's image tokens), skipped on text alone.
            kind, unseen = "cross_attention", None
        if kind in _ATTENTION_TYPES or kind is None and unseen is not None:
            # A layer of softmax attention the observer never saw: computed outside the interface.
            raise ModelError(
                f"layer {number} of {name} computes its attention ({unseen or kind}) outside transformers' "
                "attention interface, which attnwh cannot observe"
            )
        mixer = _mixer_name(layers[number])
        facts.append(LayerFacts(layer=number, kind=_other_kind(kind, mixer), read=False, module=mixer))
    return tuple(facts), outputs


# What a layer's token mixer is, by its class name, where the config's word for the layer names
# only its cache ("linear_attention" for a state-space layer too).
_MIXERS = (
    (("Mamba", "SSM", "Ssm"), "state space"),
    (("Conv",), "convolution"),
    (("Recurrent", "Rglru"), "recurrent"),
    (("Linear", "DeltaNet", "Lightning", "Kda", "KDA"), "linear attention"),
)


def _other_kind(kind: str | None, mixer: str) -> str:
    """The kind of a layer attnwh does not read: by its token mixer's class where that says
    what it is, else by the config's word for the layer."""
    for parts, named in _MIXERS:
        if any(part in mixer for part in parts):
            return named
    if kind is None:
        return "not attention"
    return _KINDS.get(kind, kind.replace("_", " "))


# What a config's `layer_types` calls a layer of softmax attention.
_ATTENTION_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention", "attention"})
# Module classes whose name says "attention" but which are none attnwh could read (no softmax).
_NOT_SOFTMAX = ("Linear", "Lightning", "Delta", "Mamba", "Conv", "Recurrent", "Retention")


def _softmax_attention(layer: nn.Module) -> str | None:
    """The class name of the innermost softmax attention module in `layer`, by its name, if it
    has one."""
    names = [type(m).__name__ for m in layer.modules()]
    found = [n for n in names if n.endswith("Attention") and not any(part in n for part in _NOT_SOFTMAX)]
    return found[-1] if found else None


def layer_types(config: PretrainedConfig, num_layers: int) -> list[str] | None:
    """The config's kind of each layer: `layers_block_type` where a hybrid has it (its
    `layer_types` says only which cache each layer keeps: a state-space layer's is
    "linear_attention"), else `layer_types`."""
    for name in ("block_types", "layers_block_type", "layer_types"):
        types = getattr(config, name, None)
        if not isinstance(types, (list, tuple)) or not types or not all(isinstance(t, str) for t in types):
            continue
        if name == "block_types":  # RecurrentGemma: a pattern the layers repeat
            types = [types[i % len(types)] for i in range(num_layers)]
        if len(types) == num_layers:
            return list(types)
    return None


def _output_projection(
    module: nn.Module, output: torch.Tensor | None, family: Family, linears: _LinearInputs
) -> nn.Module | None:
    """The linear layer whose input is exactly the attention function's `output` (batch, seq,
    heads, head_dim): the family's W_O where it is that, else the one inside the module that
    is; None where none is (a gate changes the heads' output first). Inline attention (no
    output seen): the family's W_O as it is."""
    named = _resolve(module, family.output)
    if output is None:
        return named
    flat = output.reshape(*output.shape[:2], -1)
    if named is not None and _is_linear(named) and linears.takes(named, flat):
        return named
    return next((m for m in module.modules() if _is_linear(m) and linears.takes(m, flat)), None)


def _norm(module: nn.Module, family: Family) -> nn.LayerNorm | None:
    norm = _resolve(module, family.output_norm) if family.output_norm else None
    return norm if isinstance(norm, nn.LayerNorm) else None


def _resolve(module: nn.Module, path: str | None) -> nn.Module | None:
    """The module at `path` from `module`, where each leading ``^`` steps to the parent."""
    if path is None:
        return None
    parts = path.split(".")
    current: Any = module
    while parts and parts[0] == "^":
        parent = getattr(current, "_attnwh_parent", None)
        if parent is None:
            return None
        current, parts = parent, parts[1:]
    for part in parts:
        current = getattr(current, part, None)
        if current is None:
            return None
    return current if isinstance(current, nn.Module) else None


def link_parents(model: nn.Module) -> None:
    """Give every module a reference to its parent (`^` in a family's paths). Kept outside
    torch's module registry (object.__setattr__), so it is no submodule and no state."""
    for parent in model.modules():
        for child in parent.children():
            object.__setattr__(child, "_attnwh_parent", parent)


def _as_linear(module: nn.Module) -> nn.Linear:
    """W_O as an nn.Linear: GPT-2's Conv1D (y = x W + b, W of shape (in, out)) as the linear
    layer it equals, sharing its storage (W transposed). Only its weights are read."""
    if isinstance(module, nn.Linear):
        return module
    weight: torch.Tensor = module.weight  # type: ignore[assignment]
    bias: torch.Tensor | None = getattr(module, "bias", None)
    linear = nn.Linear(int(weight.shape[0]), int(weight.shape[1]), bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight.detach().t(), requires_grad=False)
    if bias is not None:
        linear.bias = nn.Parameter(bias.detach(), requires_grad=False)
    return linear


def _mixer_name(layer: nn.Module) -> str:
    """The class of what mixes tokens in a layer attnwh does not read (its largest child
    that is not a norm or an MLP), or the layer's own class."""
    for child in layer.children():
        name = type(child).__name__
        if not any(part in name for part in ("Norm", "MLP", "Mlp", "Moe", "MoE", "Experts", "FeedForward")):
            return name
    return type(layer).__name__


def _module_names(model: nn.Module) -> str:
    names = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Attention")})
    return ", ".join(names[:3]) or type(model).__name__


def _layer_names(layers: list[nn.Module] | None) -> str:
    if not layers:
        return "no layers found"
    names = sorted({_mixer_name(layer) for layer in layers})
    return "its layers: " + ", ".join(names[:3])
