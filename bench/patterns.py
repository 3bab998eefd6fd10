"""Benchmark: precision and recall of the pattern-type rules and of the default classifier on synthetic maps of known type.

Generates held-out synthetic maps (`fixtures.synthetic_maps`; a seed not used to set the
thresholds or make the classifier's anchors), runs them through the ingest observer, and
prints per-type precision and recall (checked against scikit-learn when it is installed) and
the confusion matrix, for the rules and for the shipped classifier (trained on hand labels of
real maps: this is its sanity check, not its target). With --cnn it also trains the pattern CNN on thumbnails of other synthetic maps and
prints its held-out macro F1 on these.

Usage: ``python bench/patterns.py [--per-type 1000] [--seed 20241201] [--cnn]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from attnwh.ingest.measures import pattern_cnn, patterns
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS

# The synthetic fixtures live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fixtures import synthetic_maps


def thumbnails(maps: list[synthetic_maps.SyntheticMap]) -> np.ndarray:
    return torch.stack(
        [patterns.thumbnails(torch.from_numpy(m.attention).float()[None, None], [0], [len(m.cls)])[0, 0] for m in maps]
    ).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-type", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20241201)
    parser.add_argument("--cnn", action="store_true", help="also train and score the CNN on thumbnails")
    args = parser.parse_args()

    start = time.perf_counter()
    maps = synthetic_maps.generate(args.per_type, args.seed)
    labels = np.array([m.label for m in maps])
    observed = synthetic_maps.features(maps)
    seconds = time.perf_counter() - start
    print(
        f"{len(maps)} synthetic maps ({args.per_type} per type, seed {args.seed}), "
        f"lengths {min(len(m.cls) for m in maps)}–{max(len(m.cls) for m in maps)}, "
        f"{sum(m.pair for m in maps)} pairs; generated and classified in {seconds:.1f} s"
    )
    rules = synthetic_maps.predicted(maps)
    learned = observed[:, OBSERVED_COLUMNS.index("pattern")].astype(np.int64)
    for name, codes in (("the rules", rules), ("the shipped classifier", learned)):
        print(f"\n{name}: agreement {np.mean(codes == labels):.3f}")
        report = synthetic_maps.per_class_report(labels, codes)
        print(f"{'type':20s} {'precision':>9s} {'recall':>7s} {'support':>8s}")
        for type_name, precision, recall, support in report:
            print(f"{type_name:20s} {precision:9.3f} {recall:7.3f} {support:8d}")
        print(f"{'macro F1':20s} {pattern_cnn.macro_f1(labels, codes):9.3f}")
        try:
            from sklearn.metrics import precision_recall_fscore_support
        except ImportError:
            pass
        else:
            p, r, _, _ = precision_recall_fscore_support(
                labels, codes, labels=range(len(patterns.PATTERN_TYPES)), zero_division=0
            )
            assert np.allclose(p, [row[1] for row in report]) and np.allclose(r, [row[2] for row in report])
            print("(equal to sklearn.metrics.precision_recall_fscore_support)")
        print(f"confusion (rows: true type, columns: {name})")
        short = [n[:6] for n in patterns.PATTERN_TYPES]
        print(" " * 20 + " ".join(f"{s:>7s}" for s in short))
        for k, type_name in enumerate(patterns.PATTERN_TYPES):
            counts = [int(((labels == k) & (codes == j)).sum()) for j in range(len(short))]
            print(f"{type_name:20s}" + " ".join(f"{c:7d}" for c in counts))

    if args.cnn:
        train_maps = synthetic_maps.generate(max(40, args.per_type // 5), args.seed + 1)
        train_labels = np.array([m.label for m in train_maps])
        start = time.perf_counter()
        trained = pattern_cnn.train(thumbnails(train_maps), train_labels, seed=42, epochs=40, test_share=0.25)
        predicted = pattern_cnn.predict(trained.model, thumbnails(maps))
        print(
            f"\nCNN on thumbnails: trained on {len(trained.train)} maps in {time.perf_counter() - start:.1f} s; "
            f"macro F1 on its own held-out split {trained.f1_cnn:.3f}, on the maps above "
            f"{pattern_cnn.macro_f1(labels, predicted):.3f}"
        )


if __name__ == "__main__":
    main()
