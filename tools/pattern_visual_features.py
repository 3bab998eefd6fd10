"""Exploration for the next default pattern classifier: per-map features read the way a person
sees a map, scored against the shipped hand labels under the same cross-validation as
`attnwh patterns calibrate` (docs/pattern_labels.md).

A person judges a map drawn scaled to its largest weight, so these features are read from
x = A / max(A) over the real tokens: the strongest columns' mean intensity (over the rows
after [CLS]) against the median column, the mean intensity on the diagonal and its two
neighbours, the [CLS] column against the diagonal, the background (off the band), the share
of visibly dark cells, and, for sentence pairs, the intensity within each sentence against
across them. They sit beside the rules' six features.

Needs a warehouse with whole maps and the labels imported (see pattern_label_set.py):

    python tools/pattern_visual_features.py W.duckdb [--folds 5 --seed 0]

It prints macro-F1 and agreement of held-out predictions for a few classifiers. The numbers
choose among classifiers on the very folds they report, so they are optimistic; a default
chosen from them needs nested cross-validation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb
import numpy as np

from attnwh.ingest.measures import calibration, patterns


def visual(attention: list[float], n: int, tokens: list[str]) -> list[float]:
    a = np.array(attention, np.float32).reshape(n, n)
    x = a / max(float(a.max()), 1e-9)
    column = x[1:].mean(0)  # mean intensity per key over the rows after [CLS]
    ordered = np.sort(column)[::-1]
    i = np.arange(n)
    band = np.abs(i[:, None] - i[None]) <= 1
    diagonals = [float(np.diagonal(x, k).mean()) for k in (-1, 0, 1)]
    strongest_diagonal = max(diagonals)
    separators = [j for j, t in enumerate(tokens) if t in ("[SEP]", "</s>")]
    within = across = within_min = ratio = 0.0
    if len(separators) >= 2:
        s = separators[0]
        first, second = x[1:s, 1:s], x[s + 1 : n - 1, s + 1 : n - 1]
        off = [x[1:s, s + 1 : n - 1], x[s + 1 : n - 1, 1:s]]
        if first.size and second.size and all(o.size for o in off):
            within = (first.mean() + second.mean()) / 2
            across = (off[0].mean() + off[1].mean()) / 2
            within_min = min(first.mean(), second.mean())
            ratio = within / (across + 1e-3)
    return [
        ordered[0],
        ordered[1],
        ordered[2],
        ordered[:3].mean(),
        column.mean(),
        np.median(column),
        strongest_diagonal,
        *diagonals,
        x[1:, 0].mean(),
        np.median(x[~band]) if (~band).any() else 0.0,
        (x > 0.25).mean(),
        (x > 0.5).mean(),
        ordered[0] / (np.median(column) + 1e-3),
        strongest_diagonal / (column[0] + 1e-3),
        np.log(n),
        float(len(separators) >= 2),
        within,
        across,
        ratio,
        within_min,
        (x[1:, column.argmax()] > 0.3).mean(),
        (column > 0.2).sum() / n,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    con = duckdb.connect(str(args.db), read_only=True)
    rows = con.execute(
        f"SELECT l.pattern, {', '.join('s.' + c for c in patterns.FEATURE_COLUMNS)}, m.attention, m.n_tokens, k.tokens"
        " FROM pattern_labels AS l JOIN head_stats AS s USING (run_id, example_id, layer, head)"
        " JOIN pattern_maps AS m USING (run_id, example_id, layer, head)"
        " JOIN example_tokens AS k USING (run_id, example_id) ORDER BY l.run_id, l.example_id, l.layer, l.head"
    ).fetchall()
    labels = np.array([r[0] for r in rows])
    rules = np.array([r[1:7] for r in rows], np.float32)
    seen = np.array([visual(r[7], r[8], r[9]) for r in rows], np.float32)
    both = np.concatenate([rules, seen], 1)
    split = calibration.folds(labels, args.folds, args.seed)
    candidates = {
        "logistic regression": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)),
        "MLP(32)": lambda: make_pipeline(
            StandardScaler(), MLPClassifier((32,), max_iter=3000, random_state=0, alpha=1e-2)
        ),
        "random forest, balanced": lambda: RandomForestClassifier(
            1000, random_state=0, min_samples_leaf=3, class_weight="balanced"
        ),
    }
    print(f"{len(labels)} labelled maps with whole maps, {args.folds} folds (seed {args.seed})")
    for name, make in candidates.items():
        for features, x in (("rules' features", rules), ("+ visual features", both)):

            def fitted(train: np.ndarray, test: np.ndarray, make=make, x=x) -> np.ndarray:
                return make().fit(x[train], labels[train]).predict(x[test])

            s = calibration.cross_validate(name, labels, split, fitted)
            print(f"{name:26s} {features:18s} macro-F1 {s.macro_f1:.3f}  agreement {s.agreement:.3f}")


if __name__ == "__main__":
    main()
