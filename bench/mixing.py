"""Benchmark: what context mixing (residual + LayerNorm) and massive activations add to an ingest.

Runs the whole statistics ingest of one task (batches, the model, the reductions, the rows
written into a fresh DuckDB file) once per variant and repeat, taking turns (A B C D, D C B A, …):

- baseline: head statistics, pattern features and thumbnails only (``--no-mixing
  --no-massive``);
- + massive: with massive_activations (``--no-mixing``);
- + mixing: with head_mixing and layer_mixing (``--no-massive``);
- default: both, as `attnwh ingest` runs by default.

Prints seconds (best of --repeats) and each variant's ratio to the baseline, measured in
the same run: best against best, and the median of the ratios within each repeat. Usage:
``python bench/mixing.py [--model DIR] [--glue-dir ../shared/data/glue --task sst2 --repeats 5]``
"""

from __future__ import annotations

from pathlib import Path

from common import prepare_ingest, print_ratios, task_parser, time_ingests

from attnwh.ingest.runs.loop import StatisticsCapture
from attnwh.sql import warehouse


def main() -> None:
    args = task_parser(__doc__.splitlines()[0]).parse_args()
    encoder, options, prepared = prepare_ingest(args)
    captures = {
        "baseline (statistics only)": StatisticsCapture(encoder, mixing=False, massive=False),
        "+ massive": StatisticsCapture(encoder, mixing=False),
        "+ mixing": StatisticsCapture(encoder, massive=False),
        "default (+ mixing, massive)": StatisticsCapture(encoder),
    }
    times, counts = time_ingests(captures, prepared, options, args.repeats, inspect=row_counts)
    data, n = prepared.data, len(prepared.data.examples)
    print(f"{data.task}/{data.split}: {n} examples, batch size {args.batch_size}, device {encoder.device}")
    print_ratios(times, "baseline (statistics only)", n)
    for name, found in counts.items():
        print(f"{name}: " + ", ".join(f"{t} {c}" for t, c in found.items()))


def row_counts(db: Path) -> dict[str, int]:
    """Rows of the tables the variants differ in."""
    con = warehouse.connect(db, read_only=True)
    tables = ("head_stats", "head_mixing", "layer_mixing", "massive_activations")
    counts = {t: warehouse.one_row(con, f"SELECT count(*) FROM {t}")[0] for t in tables}
    con.close()
    return counts


if __name__ == "__main__":
    main()
