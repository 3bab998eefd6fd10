"""Fitting the pattern rules to hand labels and scoring classifiers against them
(`attnwh patterns calibrate`).

The rules (`patterns.py`) have five thresholds. :func:`fit_thresholds` chooses them to
maximise the macro-F1 against a set of hand-labelled maps, by coordinate ascent over a grid
of 0.00, 0.01, …, 1.00 (one threshold at a time, each to its best grid value given the
others; rounds until none moves; of equally good values the one nearest the current value,
so a threshold moves only for a gain). Coordinate ascent can stop at a local optimum, so it
runs from the starting set and from a few more starts drawn from the grid with a fixed
seed, and keeps the best end point (the first of equals). It is deterministic.

:func:`cross_validate` scores a classifier honestly: seeded stratified k folds; each fold's
maps are predicted by a classifier fitted on the other folds only, so every map gets one
held-out prediction; the macro-F1 (scikit-learn's, over the types present in the labels),
the agreement (share of maps whose prediction equals the label) and the confusion table are
read from those predictions. The rules with fixed thresholds need no fitting; the default
classifier (`pattern_model.py`, chosen and fitted) and the CNN (`pattern_cnn.py`) are fitted
per fold the same way.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnwh.ingest.measures import patterns

GRID = np.round(np.linspace(0.0, 1.0, 101), 2)
THRESHOLD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(patterns.Thresholds))

# A classifier for cross-validation: (train indices, test indices) -> predictions of the test maps.
FoldClassifier = Callable[[np.ndarray, np.ndarray], np.ndarray]


def macro_f1(labels: np.ndarray, predictions: np.ndarray, classes: Sequence[int]) -> float:
    """The mean over `classes` of each one's F1 (0 where it has no true or predicted map),
    as scikit-learn's f1_score(average="macro", zero_division=0) gives it; computed from one
    confusion count, as the fit calls it thousands of times."""
    k = len(patterns.PATTERN_TYPES)
    confusion = np.bincount(labels * k + predictions, minlength=k * k).reshape(k, k)
    chosen = np.asarray(list(classes), dtype=np.int64)
    tp = confusion[chosen, chosen]
    denominator = confusion[chosen].sum(1) + confusion[:, chosen].sum(0)
    return float(np.mean(np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)))


def rule_predictions(features: np.ndarray, thresholds: patterns.Thresholds) -> np.ndarray:
    """The rules' codes for (n, len(FEATURE_COLUMNS)) features."""
    return patterns.classify(torch.from_numpy(np.asarray(features, np.float32)), thresholds).numpy()


def fit_thresholds(
    features: np.ndarray,
    labels: np.ndarray,
    start: patterns.Thresholds = patterns.THRESHOLDS,
    classes: Sequence[int] | None = None,
    restarts: int = 7,
    max_rounds: int = 20,
) -> patterns.Thresholds:
    """Thresholds that maximise the macro-F1 of the rules on (features, labels); see the
    module's docstring. `classes`: the types the macro-F1 averages over (default: those in
    `labels`); `restarts`: starts drawn from the grid besides `start`."""
    present = sorted(set(labels.tolist())) if classes is None else list(classes)
    x = torch.from_numpy(np.asarray(features, np.float32))

    def score(values: dict[str, float]) -> float:
        return macro_f1(labels, patterns.classify(x, patterns.Thresholds(**values)).numpy(), present)

    rng = np.random.default_rng(0)
    starts = [start.as_dict()] + [{name: float(rng.choice(GRID)) for name in THRESHOLD_NAMES} for _ in range(restarts)]
    best_values, best_score = starts[0], -1.0
    for current in starts:
        current = dict(current)
        top = score(current)
        for _ in range(max_rounds):
            moved = False
            for name in THRESHOLD_NAMES:
                scores = np.array([score({**current, name: float(v)}) for v in GRID])
                if scores.max() > top + 1e-12:
                    # Of the grid values that reach the top, the nearest to the current one.
                    candidates = GRID[scores >= scores.max() - 1e-12]
                    current[name] = float(candidates[np.argmin(np.abs(candidates - current[name]))])
                    top, moved = float(scores.max()), True
            if not moved:
                break
        if top > best_score + 1e-12:
            best_values, best_score = current, top
    return patterns.Thresholds(**best_values)


def folds(labels: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Seeded stratified k folds as (train, test) index arrays (scikit-learn's
    StratifiedKFold with shuffling); a type with fewer than k maps is spread as far as it goes."""
    from sklearn.model_selection import StratifiedKFold

    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        return [(train, test) for train, test in splitter.split(np.zeros(len(labels)), labels)]


@dataclass(frozen=True)
class Scores:
    """One classifier's held-out predictions under cross-validation, and what they come to."""

    name: str
    predictions: np.ndarray  # one held-out prediction per map
    macro_f1: float
    agreement: float
    confusion: np.ndarray  # (5, 5): rows = hand label, columns = prediction, in pattern code order
    # False for a classifier fitted without regard to the folds (the shipped one): its
    # predictions are held out only if it never saw these labels.
    held_out: bool = True

    def f1_of(self, code: int) -> float | None:
        """One type's F1 from the confusion table (None where it is neither a label nor a
        prediction)."""
        both = int(self.confusion[code].sum() + self.confusion[:, code].sum())
        return 2 * float(self.confusion[code, code]) / both if both else None


def cross_validate(
    name: str, labels: np.ndarray, split: Sequence[tuple[np.ndarray, np.ndarray]], classifier: FoldClassifier
) -> Scores:
    """Held-out predictions of `classifier` on every fold of `split`, and their scores."""
    predictions = np.full(len(labels), -1, np.int64)
    for train, test in split:
        predictions[test] = classifier(train, test)
    return scores_of(name, labels, predictions)


def scores_of(name: str, labels: np.ndarray, predictions: np.ndarray) -> Scores:
    """The scores of `predictions` against `labels` (the same maps)."""
    from sklearn.metrics import confusion_matrix

    present = sorted(set(labels.tolist()))
    return Scores(
        name,
        predictions,
        macro_f1(labels, predictions, present),
        float(np.mean(predictions == labels)),
        confusion_matrix(labels, predictions, labels=list(range(len(patterns.PATTERN_TYPES)))),
    )


def subset(scores: Scores, labels: np.ndarray, where: np.ndarray, name: str) -> Scores:
    """`scores` read on the maps `where` (a boolean mask) only, e.g. one length band."""
    return dataclasses.replace(scores_of(name, labels[where], scores.predictions[where]), held_out=scores.held_out)


def across_groups(name: str, labels: np.ndarray, groups: np.ndarray, classifier: FoldClassifier) -> dict[str, Scores]:
    """Per group (e.g. per model), `classifier` fitted on the maps of every other group and
    scored on the group's own: how well a classifier carries over to a model it never saw."""
    out = {}
    for group in sorted(set(groups.tolist())):
        test = np.flatnonzero(groups == group)
        train = np.flatnonzero(groups != group)
        out[group] = scores_of(f"{name} → {group}", labels[test], classifier(train, test))
    return out


def fixed_rules(features: np.ndarray, thresholds: patterns.Thresholds) -> FoldClassifier:
    """The rules with set thresholds, as a fold classifier (nothing to fit)."""
    return lambda _train, test: rule_predictions(features[test], thresholds)


def fitted_rules(features: np.ndarray, labels: np.ndarray, start: patterns.Thresholds) -> FoldClassifier:
    """The rules with thresholds fitted on each fold's training maps."""
    present = sorted(set(labels.tolist()))

    def classify(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        fitted = fit_thresholds(features[train], labels[train], start, present)
        return rule_predictions(features[test], fitted)

    return classify


def fitted_classifier(x: np.ndarray, labels: np.ndarray, seed: int) -> FoldClassifier:
    """The default classifier's training procedure on inputs x (`pattern_model.INPUT_NAMES`):
    on each fold's training maps and the shipped anchors, the architecture chosen by an
    inner cross-validation and its weights fitted (so the score is of nested cross-validation)."""
    from attnwh.ingest.measures import pattern_model

    def classify(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        model = pattern_model.fit_selected(x[train], labels[train], seed, pattern_model.anchors())
        return pattern_model.predict(model, x[test])

    return classify


def fitted_cnn(thumbnails: np.ndarray, labels: np.ndarray, seed: int, epochs: int) -> FoldClassifier:
    """The pattern CNN trained on each fold's training maps."""
    from attnwh.ingest.measures import pattern_cnn

    def classify(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        model = pattern_cnn.fit(thumbnails, labels, train, seed=seed, epochs=epochs)
        return pattern_cnn.predict(model, thumbnails[test])

    return classify
