"""The census: every family transformers maps to a causal language model (its own mapping,
not a copy), built tiny from its own config class (tiny_language_models.py), is read exactly
or refused in one line; one read wrongly fails.

Read exactly means: every stored statistic of a right-padded batch of three inputs of mixed
lengths (crossing the tiny sliding windows of 5 keys and chunks of 8) within 1e-5 of a
reference recomputed one input at a time from the family's own eager attention. The reference
is independent of attnwh's attention function and its check at load: it runs the model with an
attention function that calls the family's own ``eager_attention_forward`` and keeps what it
is given (the values, per key/value head) and returns (the maps and the heads' output), and
finds W_O as the linear layer whose input is that output. A learned sink's share is what the
eager rows leave of 1 (GraniteSWA's eager rows sum to 1 and its sink scales the heads' output
instead: its token weights are the eager weights times that scale).

docs/families.md lists the outcome per family; :func:`test_the_families_page_matches_the_census`
keeps it true, and run with ATTNWH_CENSUS_WRITE=1 writes the page's census part (do so when
transformers changes).
"""

from __future__ import annotations

import importlib
import os
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface, AutoModel
from transformers.masking_utils import eager_mask
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from attnwh.errors import ModelError
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs.loop import StatisticsCapture
from attnwh.ingest.runs.rows import CAUSAL_NULL_COLUMNS
from attnwh.ingest.sources.examples import Example, TaskData
from test_statistics import assert_matches_reference, layer_rows
from tiny_language_models import FAMILIES, make_tiny_language_model
from tiny_models import CORPUS

NULL = [OBSERVED_COLUMNS.index(c) for c in CAUSAL_NULL_COLUMNS]
TEXTS = (CORPUS[1], CORPUS[3] + " " + CORPUS[0], CORPUS[6])
MAX_LENGTH = 40
PAGE = Path(__file__).parents[1] / "docs" / "families.md"

# Families looked at more closely (the newer attention of the issue that opened the census):
# each input alone as well, and the batch through a tokenizer that pads on the left.
CLOSER = frozenset({"gpt_oss", "deepseek_v3", "llama4_text", "qwen3_moe", "smollm3", "olmo3", "qwen3_next"})
# Each family's outcome, for the page check: "read", "refused: …", "not built: …".
OUTCOMES: dict[str, str] = {}
pytestmark = pytest.mark.slow  # about 170 families: a minute and a half in all


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


class _Reference:
    """Attention function of the reference pass: the family's own eager attention, keeping
    its values and what it returns, per call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, module: nn.Module, query, key, value, attention_mask, **kwargs):
        eager = importlib.import_module(type(module).__module__).eager_attention_forward
        output, weights = eager(module, query, key, value, attention_mask, **kwargs)
        sink = kwargs.get("s_aux") if kwargs.get("s_aux") is not None else kwargs.get("sinks")
        self.calls.append(
            {"module": module, "value": value.detach(), "output": output.detach(), "weights": weights, "sink": sink}
        )
        return output, weights


def _linear_inputs(module: nn.Module):
    """Hooks keeping the inputs of every linear layer inside `module`."""
    seen: dict[nn.Module, list[torch.Tensor]] = {}
    hooks = [
        m.register_forward_pre_hook(lambda m, args: seen.setdefault(m, []).append(args[0].detach()))
        for m in module.modules()
        if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"
    ]
    return seen, hooks


def reference(eager: nn.Module, tokenizer, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(attention layer, head, column) for one unpadded input, and each layer's maps (H, n, n)."""
    spy = _Reference()
    AttentionInterface.register("census-reference", spy)
    # Without a mask function of its own, transformers hands an unknown implementation no mask.
    AttentionMaskInterface.register("census-reference", eager_mask)
    eager.set_attn_implementation("census-reference")
    inputs: dict[nn.Module, dict[nn.Module, list[torch.Tensor]]] = {}
    hooks: list[Any] = []
    for module in eager.modules():
        if type(module).__name__.endswith("Attention"):
            inputs[module], more = _linear_inputs(module)
            hooks += more
    try:
        with torch.no_grad():
            eager(input_ids=torch.tensor([ids]))
    finally:
        for hook in hooks:
            hook.remove()
    n = len(ids)
    cls = np.zeros(n)
    cls[0] = 1
    sep = np.zeros(n)
    special = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    punct = np.array([_is_punct(t) and i not in special for t, i in zip(tokens, ids)], float)
    result, maps = [], []
    for call in spy.calls:
        a = call["weights"][0].double()  # (H, n, n)
        heads = a.shape[0]
        value = call["value"][0].double()  # (H_kv, n, d)
        value = value.repeat_interleave(heads // value.shape[0], dim=0)  # per query head
        out = call["output"][0].double()  # (n, H, d)
        sink = call["sink"] is not None
        if sink:
            # The weights that multiply the values: eager's, times the share of the output they
            # make (1 where eager's rows already leave the sink's share out).
            product = torch.einsum("hij,hjd->ihd", a, value)
            scale = out.norm(dim=-1) / product.norm(dim=-1).clamp_min(1e-300)
            a = a * scale.T[:, :, None]
        flat = call["output"][0].reshape(n, -1)
        wo = next(
            (
                m
                for m, xs in inputs.get(call["module"], {}).items()
                if any(x.shape[-2:] == flat.shape and torch.equal(x[0], flat) for x in xs)
            ),
            None,
        )
        v = value.permute(1, 0, 2).reshape(n, -1).numpy()
        w = None
        if wo is not None:
            w = (wo.weight.T if type(wo).__name__ == "Conv1D" else wo.weight).detach().double().numpy()
        result.append(layer_rows(a.numpy(), v if w is not None else None, w, cls, sep, punct, sink=sink))
        maps.append(a.numpy())
    expected = np.array(result)
    expected[..., NULL] = np.nan
    return expected, maps


# The look features that count cells above a level of the map's largest weight.
DARK = {f"look_dark_{level:02d}": level / 100 for level in (2, 5, 10, 25, 50)}


def at_ties(actual: np.ndarray, expected: np.ndarray, maps: list[np.ndarray]) -> np.ndarray:
    """`expected` with each count of cells above a level taken as attnwh's where they differ by
    no more than the cells that lie within rounding (1e-6 of the largest weight) of that level:
    such a cell falls on either side of it in float32 or float64, and one cell of a 40-token
    map is 1/1600 of the share."""
    expected = expected.copy()
    for layer, a in enumerate(maps):
        n = a.shape[-1]
        top = a.max(axis=(-2, -1), keepdims=True)
        for name, level in DARK.items():
            column = OBSERVED_COLUMNS.index(name)
            ties = (np.abs(a - level * top) <= 1e-6 * top).sum(axis=(-2, -1)) / (n * n)  # per head
            close = np.abs(actual[layer, :, column] - expected[layer, :, column]) <= ties + 1e-5
            expected[layer, close, column] = actual[layer, close, column]
    return expected


def _is_punct(token: str) -> bool:
    text = token.replace("Ġ", "").strip()
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_language_model_family_is_read_exactly_or_refused_in_one_line(family, tmp_path):
    try:
        path = make_tiny_language_model(family, tmp_path / family)
        eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
        with torch.no_grad():
            # A state-space model's output has no attentions at all.
            maps = getattr(eager(input_ids=torch.arange(3, 15)[None], output_attentions=True), "attentions", None)
    except Exception as exc:  # the tiny model cannot be built or run: not in the census
        OUTCOMES[family] = f"not built: {_first_line(exc)}"
        pytest.skip(f"tiny {family} cannot be built or run: {_first_line(exc)}")
    try:
        encoder = load_model(str(path), device="cpu")
    except ModelError as exc:
        message = str(exc)
        assert "\n" not in message and message, message
        OUTCOMES[family] = f"refused: {message.replace(str(path), family)}"
        return
    # A model whose eager forward returns no maps (a state-space model) has nothing to read.
    assert maps and any(m is not None for m in maps), f"{family} is read although eager returns no maps"
    data = TaskData(
        "census", "single", "dev", tuple(Example(i, None, t, None, None) for i, t in enumerate(TEXTS)), None, "census"
    )
    encoded = encode_task(encoder.tokenizer, data, MAX_LENGTH)
    rows = list(range(len(TEXTS)))
    batch = collate(encoded, rows, encoder.tokenizer.pad_token_id, encoder.device)
    assert not batch["attention_mask"].bool().all()  # padded
    capture = StatisticsCapture(encoder)
    values = capture.run(batch)
    for i in rows:
        expected, maps = reference(eager, encoder.tokenizer, encoded.input_ids[i].tolist())
        assert expected.shape == values[i].shape, (family, expected.shape, values[i].shape)
        assert np.isnan(values[i][..., NULL]).all()
        assert_matches_reference(values[i], at_ties(values[i], expected, maps), err_msg=f"{family} input {i}")
        if family in CLOSER:  # each input alone too, and in a batch of a left-padding tokenizer
            alone = capture.run(collate(encoded, [i], encoder.tokenizer.pad_token_id, encoder.device))[0]
            assert_matches_reference(alone, at_ties(alone, expected, maps), err_msg=f"{family} input {i} alone")
    if family in CLOSER:
        encoder.tokenizer.padding_side = "left"
        encoder.tokenizer.save_pretrained(path)
        left = load_model(str(path), device="cpu")
        again = StatisticsCapture(left).run(
            collate(encode_task(left.tokenizer, data, MAX_LENGTH), rows, left.tokenizer.pad_token_id, left.device)
        )
        np.testing.assert_array_equal(again, values, err_msg=f"{family} through a left-padding tokenizer")
    OUTCOMES[family] = "read: " + describe(encoder.layers)


def describe(layers) -> str:
    """What the census found of a read family's layers, in a few words for the page."""
    read = [f for f in layers if f.read]
    kinds = sorted({f.kind for f in read})
    words = [f"{len(read)} of {len(layers)} layers read ({', '.join(kinds)})"]
    others = sorted({f.kind for f in layers if not f.read})
    if others:
        words.append("others: " + ", ".join(others))
    if any(f.learned_sink for f in read):
        words.append("learned sink")
    if any(f.gated for f in read):
        words.append("output gated (no norm lens)")
    if any(f.rotary is False for f in read) and any(f.rotary for f in read):
        words.append("some layers without rotary positions")
    return "; ".join(words)


def test_the_families_page_matches_the_census():
    """docs/families.md gives each family the outcome the census found (run after it)."""
    if len(OUTCOMES) < len(FAMILIES):
        pytest.skip("run with the whole census")
    text = PAGE.read_text(encoding="utf-8")
    assert CENSUS_PART.search(text), "docs/families.md lost the marks around the census's part"
    if os.environ.get("ATTNWH_CENSUS_WRITE"):  # the census writes its part of the page
        text = CENSUS_PART.sub(lambda m: f"{m[1]}\n{census_table(OUTCOMES)}\n\n{m[2]}", text)
        PAGE.write_text(text, encoding="utf-8")
    listed = dict(re.findall(r"^\| `([^`]+)` \| (read|refused|not built)", text, flags=re.M))
    for family, outcome in OUTCOMES.items():
        if family in listed:
            assert outcome.split(":")[0] == listed[family], (family, outcome, listed[family])
    assert set(listed) <= set(FAMILIES), sorted(set(listed) - set(FAMILIES))


# The census's part of the page, between its two marks.
CENSUS_PART = re.compile(r"(<!-- census: the lines .*?-->\n).*?(<!-- census: end -->)", re.S)


def census_table(outcomes: dict[str, str]) -> str:
    """The census's part of docs/families.md: how many families are read, refused and not
    built, and a row per family with its outcome and its classifier class for `attnwh finetune`."""
    counts = {kind: sum(o.startswith(kind) for o in outcomes.values()) for kind in ("read", "refused", "not built")}
    lines = [
        f"transformers {transformers.__version__}: {len(outcomes)} families; {counts['read'] + counts['refused']} "
        f"built tiny and ran, of which attnwh reads **{counts['read']}** exactly and refuses {counts['refused']}; "
        f"{counts['not built']} could not be built tiny.",
        "",
        "| family | outcome | what the census found | `attnwh finetune` |",
        "| --- | --- | --- | --- |",
    ]
    for family, outcome in sorted(outcomes.items()):
        kind, _, detail = outcome.partition(": ")
        classifier = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(family)
        tuned = f"`{classifier}`" if classifier else "no classifier class"
        lines.append(f"| `{family}` | {kind} | {detail.replace('|', '/')} | {tuned} |")
    return "\n".join(lines)
