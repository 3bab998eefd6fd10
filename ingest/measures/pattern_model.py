"""The default pattern classifier: a small network on each map's features, trained on the
shipped hand labels of real maps (docs/pattern_labels.md).

The rules (`patterns.py`) read three scores of attention mass. People judge a map by how it
looks when drawn scaled to its largest weight, and on real maps the rules' thresholds cannot
follow them (docs/pattern_labels.md has the cross-validated comparison). This classifier
reads :data:`INPUT_NAMES`, made from the rules' features and the look features
(`patterns.LOOK_COLUMNS`) so that they mean the same on every model: the columns' share of
the mass whatever token they sit on, the diagonal band, the within-sentence mass, the look
features (intensities scaled to the map's largest weight) without the ones tied to one
token or one diagonal offset, the strongest diagonal and the band's sum, three log ratios
(the strongest column against the median one, the strongest diagonal against the strongest
column, within-sentence against across-sentence intensity) and whether the input is a
sentence pair. All are computed from features stored in head_stats, so `attnwh patterns
reclassify` can apply the classifier again without the model.

The hand-labelled maps come from two models (MiniLM and all-mpnet-base-v2) and run up to 192
tokens. Trained on real maps alone, a network can read clear maps outside their range
wrongly (one clean column over 100 tokens, say). So every fit also sees *anchors*: 20 synthetic maps of each type (seeded, 10 to 128 tokens,
from the generator the rules were tuned on), whose inputs ship beside the weights. They
change how often held-out real maps get the hand label hardly at all, and keep the clear
synthetic cases right (docs/pattern_labels.md has both numbers).

The classifier is a standardisation followed by a multi-layer perceptron (no hidden layer:
multinomial logistic regression), fitted with scikit-learn and evaluated here in torch from
its weights, so ingest needs no scikit-learn and runs on the ingest's device. Which
architecture ships is chosen by :func:`select`: the candidate with the best macro-F1 under a
seeded inner cross-validation; `attnwh patterns calibrate` scores that whole procedure with
nested cross-validation. The shipped weights (`pattern_model.json`) are rebuilt by
``python tools/pattern_label_set.py model``.

Per map the classifier gives a probability per type; the type is the most probable one and
the margin the gap between the two largest probabilities (0 = a toss-up, 1 = certain).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnwh.ingest.measures import patterns

# What the classifier reads must mean the same on every model: which token a column sits on
# ([CLS] in BERT, </s> or punctuation in MPNet) and which diagonal a model favours (itself in
# MiniLM, its neighbours in MPNet) are traits of the model, not of the type people see. So the
# columns enter as their sum and their intensities whatever the token, the diagonal as its
# strongest offset and the band's sum (docs/pattern_labels.md measures them across models).
INPUT_NAMES: tuple[str, ...] = (
    "columns",  # V: col_cls + col_sep + col_punct + col_other
    "band",
    "block",
    *(c for c in patterns.LOOK_COLUMNS if c not in ("look_prev", "look_self", "look_next", "look_cls")),
    "look_diagonal",  # the strongest of look_prev, look_self, look_next
    "look_band",  # their sum
    "log_column_contrast",
    "log_diagonal_over_column",
    "log_within_over_across",
    "pair",
)
_EPS = 1e-3  # keeps the log ratios finite where a part is 0

# Architectures :func:`select` chooses among: hidden layer sizes and L2 penalty.
CANDIDATES: Mapping[str, Mapping[str, Any]] = {
    "logistic regression": {"hidden": (), "alpha": 1.0},
    "MLP(32), alpha 0.01": {"hidden": (32,), "alpha": 0.01},
    "MLP(32), alpha 0.1": {"hidden": (32,), "alpha": 0.1},
    "MLP(64), alpha 0.1": {"hidden": (64,), "alpha": 0.1},
}
SHIPPED = Path(__file__).with_name("pattern_model.json")


_LOOK_KEPT = [
    j for j, c in enumerate(patterns.LOOK_COLUMNS) if c not in ("look_prev", "look_self", "look_next", "look_cls")
]


def inputs(features: torch.Tensor, look: torch.Tensor) -> torch.Tensor:
    """Classifier inputs (…, len(INPUT_NAMES)) from the rules' features (…, 6) and the look
    features (…, len(LOOK_COLUMNS))."""
    f, x = features.float(), look.float()
    rule = {name: f[..., j] for j, name in enumerate(patterns.FEATURE_COLUMNS)}
    col = {name: x[..., j] for j, name in enumerate(patterns.LOOK_COLUMNS)}
    columns = rule["col_cls"] + rule["col_sep"] + rule["col_punct"] + rule["col_other"]
    offsets = torch.stack([col["look_prev"], col["look_self"], col["look_next"]], -1)
    diagonal = offsets.amax(-1)
    derived = [
        diagonal,
        offsets.sum(-1),
        torch.log((col["look_col_1"] + _EPS) / (col["look_col_median"] + _EPS)),
        torch.log((diagonal + _EPS) / (col["look_col_1"] + _EPS)),
        torch.log((col["look_within"] + _EPS) / (col["look_across"] + _EPS)),
        (rule["block"] > 0).float(),
    ]
    return torch.cat(
        [torch.stack([columns, rule["band"], rule["block"]], -1), x[..., _LOOK_KEPT], torch.stack(derived, -1)], -1
    )


@dataclass(frozen=True)
class PatternModel:
    """A fitted classifier: standardisation, then dense layers with ReLU between them, then
    a softmax over `classes` (pattern codes; types absent from the training labels get
    probability 0, and so does block for single sentences, renormalising the rest)."""

    name: str
    mean: np.ndarray
    scale: np.ndarray
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]  # (weight (in, out), bias (out,))
    classes: tuple[int, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    # The weights as tensors per device, made once: a copy to an accelerator per layer and
    # batch would wait for the device each time.
    _on: dict[torch.device, list[torch.Tensor]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def _tensors(self, device: torch.device) -> list[torch.Tensor]:
        if device not in self._on:
            arrays = [self.mean, self.scale, *(a for layer in self.layers for a in layer)]
            self._on[device] = [torch.from_numpy(a).to(device) for a in arrays]
        return self._on[device]

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """(…, len(PATTERN_TYPES)) probabilities from inputs (…, len(INPUT_NAMES))."""
        mean, scale, *weights = self._tensors(x.device)
        h = (x.float() - mean) / scale
        for k in range(len(self.layers)):
            h = h @ weights[2 * k] + weights[2 * k + 1]
            if k < len(self.layers) - 1:
                h = torch.relu(h)
        if h.shape[-1] == 1:  # two classes: scikit-learn keeps one logit, of the second
            h = torch.cat([torch.zeros_like(h), h], -1)
        p = torch.softmax(h, -1)
        out = p.new_zeros((*p.shape[:-1], len(patterns.PATTERN_TYPES)))
        out[..., list(self.classes)] = p
        # Block attention is defined for sentence pairs: a single sentence's map is never one.
        single = x[..., INPUT_NAMES.index("pair")] == 0
        out[..., patterns.BLOCK] = torch.where(single, 0.0, out[..., patterns.BLOCK])
        return out / out.sum(-1, keepdim=True).clamp_min(torch.finfo(out.dtype).tiny)

    def classify(self, features: torch.Tensor, look: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, margins) of maps from their features and look features."""
        p = self.probabilities(inputs(features, look))
        two = p.topk(2, dim=-1).values
        return p.argmax(-1), two[..., 0] - two[..., 1]

    def to_json(self, anchors: tuple[np.ndarray, np.ndarray] | None = None) -> str:
        """The model as JSON, with the anchors it was fitted with (:func:`anchors`); numbers
        as float32 writes them shortest, so the file stays small and exact."""

        def floats(values: np.ndarray) -> Any:
            return np.vectorize(lambda v: float(str(np.float32(v))), otypes=[object])(values).tolist()

        extra = {} if anchors is None else {"anchors": {"inputs": floats(anchors[0]), "labels": anchors[1].tolist()}}
        return json.dumps(
            {
                **extra,
                "name": self.name,
                "inputs": list(INPUT_NAMES),
                "classes": [patterns.PATTERN_TYPES[c] for c in self.classes],
                "mean": floats(self.mean),
                "scale": floats(self.scale),
                "layers": [{"weight": floats(w), "bias": floats(b)} for w, b in self.layers],
                "settings": self.settings,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PatternModel:
        data = json.loads(text)
        if tuple(data["inputs"]) != INPUT_NAMES:
            raise ValueError("the pattern model was fitted on other inputs than this version of attnwh computes")
        return cls(
            name=data["name"],
            mean=np.asarray(data["mean"], np.float32),
            scale=np.asarray(data["scale"], np.float32),
            layers=tuple(
                (np.asarray(layer["weight"], np.float32), np.asarray(layer["bias"], np.float32))
                for layer in data["layers"]
            ),
            classes=tuple(patterns.PATTERN_TYPES.index(c) for c in data["classes"]),
            settings=data["settings"],
        )


@functools.cache
def default() -> PatternModel:
    """The shipped classifier, the default of every ingest and of `patterns reclassify`."""
    return PatternModel.from_json(SHIPPED.read_text(encoding="utf-8"))


@functools.cache
def anchors() -> tuple[np.ndarray, np.ndarray]:
    """The shipped anchors: inputs (n, len(INPUT_NAMES)) and pattern codes of synthetic maps
    of known type, added to every fit (see the module's docstring)."""
    data = json.loads(SHIPPED.read_text(encoding="utf-8"))["anchors"]
    return np.asarray(data["inputs"], np.float32), np.asarray(data["labels"], np.int64)


def assign(
    classifier: PatternModel | patterns.Thresholds, features: torch.Tensor, look: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, margins) of maps from their features and look features: by a fitted
    classifier, or by the rules with the thresholds given (their margin, `patterns.margins`)."""
    if isinstance(classifier, patterns.Thresholds):
        return patterns.classify(features, classifier), patterns.margins(features, classifier)
    return classifier.classify(features, look)


Anchors = tuple[np.ndarray, np.ndarray] | None


def estimator(candidate: str, seed: int = 0) -> Any:
    """The scikit-learn pipeline (standardisation, then the classifier) of candidate
    architecture `candidate` (a key of :data:`CANDIDATES`), unfitted."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    spec = CANDIDATES[candidate]
    if spec["hidden"]:
        head = MLPClassifier(spec["hidden"], alpha=spec["alpha"], max_iter=3000, random_state=seed)
    else:
        head = LogisticRegression(C=1.0 / spec["alpha"], max_iter=5000)
    return make_pipeline(StandardScaler(), head)


def from_estimator(fitted: Any, name: str, settings: dict[str, Any] | None = None) -> PatternModel:
    """A :class:`PatternModel` with the weights of a fitted :func:`estimator` pipeline."""
    scaler, head = fitted[0], fitted[-1]
    if hasattr(head, "coefs_"):  # MLPClassifier
        layers = [(w.astype(np.float32), b.astype(np.float32)) for w, b in zip(head.coefs_, head.intercepts_)]
    else:  # LogisticRegression: one layer
        layers = [(head.coef_.T.astype(np.float32), head.intercept_.astype(np.float32))]
    return PatternModel(
        name=name,
        mean=scaler.mean_.astype(np.float32),
        scale=scaler.scale_.astype(np.float32),
        layers=tuple(layers),
        classes=tuple(int(c) for c in head.classes_),
        settings=settings or {},
    )


def fit(x: np.ndarray, labels: np.ndarray, candidate: str, seed: int = 0, extra: Anchors = None) -> PatternModel:
    """Fit candidate architecture `candidate` (a key of :data:`CANDIDATES`) to inputs x (n,
    len(INPUT_NAMES)) and pattern codes `labels`, plus the anchor maps `extra` (inputs,
    codes) if given; deterministic for a seed."""
    if extra is not None:
        x, labels = np.concatenate([x, extra[0]]), np.concatenate([labels, extra[1]])
    with warnings.catch_warnings():
        # A few hundred maps rarely converge to the tolerance; the iteration cap is the stop.
        warnings.filterwarnings("ignore", message=".*Maximum iterations.*")
        fitted = estimator(candidate, seed).fit(x, labels)
    spec = CANDIDATES[candidate]
    settings = {"candidate": candidate, **spec, "hidden": list(spec["hidden"]), "seed": seed, "n_maps": len(labels)}
    return from_estimator(fitted, candidate, settings)


def predict(model: PatternModel, x: np.ndarray) -> np.ndarray:
    """Pattern codes of inputs x (n, len(INPUT_NAMES))."""
    return model.probabilities(torch.from_numpy(np.asarray(x, np.float32))).argmax(-1).numpy()


def select(
    x: np.ndarray, labels: np.ndarray, folds: int = 4, seed: int = 0, extra: Anchors = None
) -> tuple[str, dict[str, float]]:
    """The candidate with the best macro-F1 under seeded stratified `folds`-fold
    cross-validation on (x, labels) (the first of equals), and every candidate's score; the
    anchors `extra` join every training part, never a held-out one."""
    from attnwh.ingest.measures import calibration

    split = calibration.folds(labels, folds, seed)
    scores: dict[str, float] = {}
    for candidate in CANDIDATES:

        def held_out(train: np.ndarray, test: np.ndarray, candidate: str = candidate) -> np.ndarray:
            return predict(fit(x[train], labels[train], candidate, seed, extra), x[test])

        scores[candidate] = calibration.cross_validate(candidate, labels, split, held_out).macro_f1
    return max(scores, key=lambda c: scores[c]), scores


def fit_selected(x: np.ndarray, labels: np.ndarray, seed: int = 0, extra: Anchors = None) -> PatternModel:
    """:func:`select`'s candidate, fitted to all of (x, labels) and the anchors `extra`:
    the default classifier's training procedure."""
    chosen, scores = select(x, labels, seed=seed, extra=extra)
    model = fit(x, labels, chosen, seed, extra)
    return dataclasses.replace(model, settings={**model.settings, "inner_macro_f1": scores})


def features_of(rows: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Inputs (n, len(INPUT_NAMES)) from stored rows of FEATURE_COLUMNS then LOOK_COLUMNS."""
    values = torch.tensor(np.asarray(rows, np.float32))
    k = len(patterns.FEATURE_COLUMNS)
    return inputs(values[:, :k], values[:, k:]).numpy()
