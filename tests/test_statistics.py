"""Parity: statistics from attnwh's attention function equal those computed directly from
HF's `output_attentions=True` maps on the eager path, example by example."""

from __future__ import annotations

import inspect
import json
import string
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel

from attnwh.ingest.measures import pattern_model, patterns
from attnwh.ingest.measures.patterns import PATTERN_TYPES, THRESHOLDS
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS, STAT_COLUMNS
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs.loop import StatisticsCapture
from attnwh.ingest.sources.examples import Example, TaskData

TEXTS = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("A film!", None),
    ("Nobody expected the small robot to win the race, but it did; everyone cheered.", None),
    ("Is this the station?", "Cheap tickets (only five dollars) sold out in minutes."),
    ("She said that the weather would turn cold.", "It stayed warm."),
    ("Two people walk along the river.", "The dog follows them, quietly, all the way home to the museum."),
]


def task(pair: bool) -> TaskData:
    rows = [(a, b) for a, b in TEXTS if (b is not None) == pair]
    examples = tuple(Example(i, None, a, b, None) for i, (a, b) in enumerate(rows))
    return TaskData("test", "pair" if pair else "single", "dev", examples, None, "test")


def look_reference(A: np.ndarray, cls: np.ndarray, sep: np.ndarray) -> list[float]:
    """The look features of one cropped map, written out plainly (patterns.LOOK_COLUMNS)."""
    n = len(A)
    x = A / A.max()
    column = x.mean(0)
    ordered = np.sort(column)[::-1]
    near = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= 1
    segment = np.cumsum(sep) - sep
    ordinary = ~cls & ~sep
    within = across = 0.0
    if len(set(segment[ordinary].tolist())) >= 2:
        same = (segment[:, None] == segment[None, :]) & ordinary[:, None] & ordinary[None, :]
        cross = (segment[:, None] != segment[None, :]) & ordinary[:, None] & ordinary[None, :]
        within, across = x[same].mean(), x[cross].mean()
    return [
        *(list(ordered[:3]) + [0.0] * 3)[:3],
        np.median(column),
        column.mean(),
        (x[:, column.argmax()] > 0.3).mean(),
        (column > 0.2).mean(),
        np.diagonal(x, -1).mean(),
        np.diagonal(x).mean(),
        np.diagonal(x, 1).mean(),
        column[cls].sum(),
        x[~near].mean() if (~near).any() else 0.0,
        *((x > level).mean() for level in (0.02, 0.05, 0.1, 0.25, 0.5)),
        within,
        across,
    ]


def learned_reference(features: list[float], look: list[float]) -> tuple[int, float]:
    """Type and margin by the shipped classifier, from its stored weights, written out plainly."""
    weights = json.loads((Path(pattern_model.__file__).with_name("pattern_model.json")).read_text())
    col = dict(zip((*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS), features + look, strict=True))
    offsets = (col["look_prev"], col["look_self"], col["look_next"])
    diagonal = max(offsets)
    inputs = {
        "columns": col["col_cls"] + col["col_sep"] + col["col_punct"] + col["col_other"],
        **col,
        "look_diagonal": diagonal,
        "look_band": sum(offsets),
        "log_column_contrast": np.log((col["look_col_1"] + 1e-3) / (col["look_col_median"] + 1e-3)),
        "log_diagonal_over_column": np.log((diagonal + 1e-3) / (col["look_col_1"] + 1e-3)),
        "log_within_over_across": np.log((col["look_within"] + 1e-3) / (col["look_across"] + 1e-3)),
        "pair": float(col["block"] > 0),
    }
    h = np.array([inputs[name] for name in weights["inputs"]])
    h = (h - np.array(weights["mean"])) / np.array(weights["scale"])
    for k, layer in enumerate(weights["layers"]):
        h = h @ np.array(layer["weight"]) + np.array(layer["bias"])
        h = np.maximum(h, 0) if k < len(weights["layers"]) - 1 else h
    p = dict(zip(weights["classes"], np.exp(h - h.max()) / np.exp(h - h.max()).sum()))
    if col["block"] <= 0:  # a single sentence: never block
        p["block"] = 0.0
    p = np.array([p.get(name, 0.0) for name in PATTERN_TYPES]) / sum(p.values())
    order = np.argsort(p)[::-1]
    return int(order[0]), p[order[0]] - p[order[1]]


def pattern_reference(A: np.ndarray, cls: np.ndarray, sep: np.ndarray, punct: np.ndarray, rules: bool) -> list[float]:
    """Pattern features, look features, type and margin of one cropped map, written out
    plainly (patterns.py); the type by the shipped classifier, or by the rules."""
    n = len(A)
    cls, sep, punct = cls.astype(bool), sep.astype(bool), punct.astype(bool)
    ordinary = ~cls & ~sep
    other = ordinary & ~punct
    near = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= 1
    column = np.where(near, 0, A).mean(0)  # mean mass per column, off the band
    col_other = column[other].max() if other.any() else 0.0
    band = np.where(near & other[None, :], A, 0).sum(1).mean()
    segment = np.cumsum(sep) - sep
    groups = sorted(set(segment[ordinary].tolist()))
    block = 0.0
    if len(groups) >= 2:
        block = min(A[np.ix_(ordinary & (segment == g), ordinary & (segment == g))].sum(1).mean() for g in groups)
    # Punctuation columns among the ordinary tokens: a first token that is punctuation is the
    # sink column of a decoder (col_cls), never counted twice.
    features = [column[cls].sum(), column[sep].sum(), column[punct & ordinary].sum(), col_other, band, block]
    look = look_reference(A, cls, sep)
    return [*features, *look, *classify(features, look, rules)]


def classify(features: list[float], look: list[float], rules: bool) -> list[float]:
    """Type code and margin of one map from its pattern and look features: by the shipped
    classifier, or by the rules."""
    if not rules:
        return list(learned_reference(features, look))
    col_cls, col_sep, col_punct, col_other, band, block = features
    v = col_cls + col_sep + col_punct + col_other
    t = THRESHOLDS
    if v >= t.vertical and band < t.mixed_diagonal:
        code = 1
    elif band >= t.diagonal and v < t.mixed_vertical:
        code = 2
    elif block >= t.block and v < t.vertical and band < t.diagonal:
        code = 4
    elif v >= t.mixed_vertical and band >= t.mixed_diagonal:
        code = 3
    else:
        code = 0
    # How near the map is to another type: its scores' distance to the nearest threshold.
    distances = [abs(v - t.vertical), abs(v - t.mixed_vertical), abs(band - t.diagonal), abs(band - t.mixed_diagonal)]
    margin = min(distances + ([abs(block - t.block)] if block > 0 else []))
    return [code, margin]


FEATURES = slice(OBSERVED_COLUMNS.index("col_cls"), OBSERVED_COLUMNS.index("look_col_1"))
LOOK = slice(OBSERVED_COLUMNS.index("look_col_1"), OBSERVED_COLUMNS.index("pattern"))
TYPE = OBSERVED_COLUMNS.index("pattern")


def assert_matches_reference(actual: np.ndarray, expected: np.ndarray, rules: bool = False, err_msg: str = "") -> None:
    """Every measured column within 1e-5 of the reference; the type and margin those of the
    captured features, classified plainly. The learned classifier takes log ratios of
    features floored at 1e-3, so a float32 rounding of 1e-7 in a feature can move its margin
    by more than 1e-5 with nothing wrong in the classifier: comparing the margin with the
    reference's at 1e-5 would test rounding, not attnwh."""
    np.testing.assert_allclose(actual[..., :TYPE], expected[..., :TYPE], atol=1e-5, rtol=0, err_msg=err_msg)
    rows = actual.reshape(-1, actual.shape[-1])
    classified = np.array([classify(list(r[FEATURES]), list(r[LOOK]), rules) for r in rows])
    np.testing.assert_allclose(rows[:, TYPE:], classified, atol=1e-5, rtol=0, err_msg=err_msg)
    # And near the reference's: its type wherever it is not on a boundary, its margin closely.
    reference_rows = expected.reshape(rows.shape)
    sure = reference_rows[:, -1] > 1e-3
    np.testing.assert_array_equal(rows[sure, TYPE], reference_rows[sure, TYPE], err_msg=err_msg)
    np.testing.assert_allclose(rows[:, -1], reference_rows[:, -1], atol=1e-3, rtol=0, err_msg=err_msg)


def layer_rows(
    a: np.ndarray,
    v: np.ndarray | None,
    wo: np.ndarray | None,
    cls: np.ndarray,
    sep: np.ndarray,
    punct: np.ndarray,
    rules: bool = False,
    sink: bool = False,
) -> list[list[float]]:
    """Every head's observed columns of one layer from its maps a (H, n, n), its value
    vectors v (n, H * d) and W_O (hidden, H * d): ||f_h(x_j)|| through the head's slice of W_O
    (NaN norms where v or W_O is None: a layer gated before W_O); `sink`: the layer has a
    learned sink, whose share is what the rows leave of 1."""
    rows = []
    for h in range(a.shape[0]):
        if v is None or wo is None:
            norms = np.full(a.shape[-1], np.nan)
        else:
            d = v.shape[1] // a.shape[0]
            f = v[:, h * d : (h + 1) * d] @ wo[:, h * d : (h + 1) * d].T  # (n, hidden)
            norms = np.linalg.norm(f, axis=1)
        rows.append(head_row(a[h], norms, cls, sep, punct, rules, sink))
    return rows


def head_row(
    A: np.ndarray,
    norms: np.ndarray,
    cls: np.ndarray,
    sep: np.ndarray,
    punct: np.ndarray,
    rules: bool = False,
    sink: bool = False,
) -> list[float]:
    """One head's observed columns from its (n, n) map A and the norms ||f_h(x_j)|| of its
    value vectors through its slice of W_O, computed directly with numpy; the learned sink's
    share NaN (NULL) where the layer has none."""
    n = len(A)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(A > 0, A * np.log(A), 0).sum(1)
    prev = np.array([A[i, i - 1] if i > 0 else 0 for i in range(n)])
    nxt = np.array([A[i, i + 1] if i < n - 1 else 0 for i in range(n)])
    W = A * norms[None, :]
    W = W / W.sum(1, keepdims=True)
    return [
        (A @ cls).mean(),
        (A @ sep).mean(),
        (A @ punct).mean(),
        np.diag(A).mean(),
        prev.mean(),
        nxt.mean(),
        ent.mean(),
        A.max(1).mean(),
        (W @ cls).mean(),
        (W @ sep).mean(),
        (W @ punct).mean(),
        (1 - A.sum(1)).mean() if sink else np.nan,
        *pattern_reference(A, cls, sep, punct, rules),
    ]


def reference(model, tokenizer, ids: list[int], types: list[int] | None, rules: bool = False) -> np.ndarray:
    """(layer, head, column) for one unpadded example, from eager output_attentions maps:
    the statistics, then the pattern features, look features, type and margin (by the
    shipped classifier, or by the rules)."""
    inputs = {"input_ids": torch.tensor([ids])}
    if types is not None and "token_type_ids" in inspect.signature(model.forward).parameters:
        inputs["token_type_ids"] = torch.tensor([types])
    with torch.no_grad():
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    cls = np.array([i == tokenizer.cls_token_id for i in ids])
    sep = np.array([i == tokenizer.sep_token_id for i in ids])
    punct = np.array(
        [
            t.lstrip("Ġ").removeprefix("##") != ""
            and all(c in string.punctuation for c in t.lstrip("Ġ").removeprefix("##"))
            and i not in tokenizer.all_special_ids
            for t, i in zip(tokens, ids)
        ],
        float,
    )
    result = []
    for layer, maps in enumerate(out.attentions):
        a = maps[0].double().numpy()  # (H, n, n)
        attn = model.encoder.layer[layer].attention
        x = out.hidden_states[layer][0].double().numpy()
        v = x @ attn.self.value.weight.detach().double().numpy().T + attn.self.value.bias.detach().double().numpy()
        wo = attn.output.dense.weight.detach().double().numpy()
        result.append(layer_rows(a, v, wo, cls, sep, punct, rules))
    return np.array(result)


@pytest.fixture(scope="module")
def large_shape(tmp_path_factory):
    """A BERT shaped like BERT-large (24 layers × 16 heads): deeper, more and narrower heads."""
    from tiny_models import make_tiny

    return make_tiny("bert", tmp_path_factory.mktemp("bert-large-shape"), layers=5, heads=8)


@pytest.mark.parametrize("family", ["bert", "roberta", "bert-large-shape"])
@pytest.mark.parametrize("pair", [False, True])
def test_statistics_match_eager_output_attentions(tiny_model_dir, large_shape, family, pair):
    path = large_shape if family == "bert-large-shape" else tiny_model_dir(family)
    encoder = load_model(str(path), device="cpu")
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    data = task(pair)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    capture = StatisticsCapture(encoder)
    # All examples in one batch: the shorter ones are padded to the longest.
    everything = list(range(len(data.examples)))
    batched = capture.run(collate(encoded, everything, encoder.tokenizer.pad_token_id, encoder.device))
    assert batched.shape == (len(everything), encoder.num_layers, encoder.num_heads, len(OBSERVED_COLUMNS))
    for i in everything:
        ids = encoded.input_ids[i].tolist()
        types = None if encoded.token_type_ids is None else encoded.token_type_ids[i].tolist()
        expected = reference(eager, encoder.tokenizer, ids, types)
        assert_matches_reference(batched[i], expected)
        alone = capture.run(collate(encoded, [i], encoder.tokenizer.pad_token_id, encoder.device))
        assert_matches_reference(alone[0], batched[i])
    # The rules instead of the shipped classifier: the same features, their types and margins.
    capture.observer.classifier = THRESHOLDS
    by_rules = capture.run(collate(encoded, everything, encoder.tokenizer.pad_token_id, encoder.device))
    for i in everything:
        ids = encoded.input_ids[i].tolist()
        types = None if encoded.token_type_ids is None else encoded.token_type_ids[i].tolist()
        assert_matches_reference(by_rules[i], reference(eager, encoder.tokenizer, ids, types, True), rules=True)
    if pair and family.startswith("bert"):  # segment ids reach the model and the reference alike
        assert encoded.token_type_ids is not None and max(t.max() for t in encoded.token_type_ids) == 1
    # The statistics must vary, or the comparison above would prove little.
    assert batched[..., STAT_COLUMNS.index("to_cls")].std() > 1e-3
    assert batched[..., STAT_COLUMNS.index("to_punct")].max() > 0
    assert batched[..., STAT_COLUMNS.index("to_sep")].max() > 0
    for name in ("col_cls", "col_other", "band", "look_col_1", "look_self", "look_dark_10", "pattern_margin"):
        assert batched[..., OBSERVED_COLUMNS.index(name)].std() > 1e-3, name
    assert (batched[..., OBSERVED_COLUMNS.index("block")].max() > 0) == pair
    assert (batched[..., OBSERVED_COLUMNS.index("look_within")].max() > 0) == pair
