"""Benchmark: what context mixing (residual + LayerNorm) and massive activations add to an ingest.

Runs the whole statistics ingest of one task (batches, the model, the reductions, the rows
written into a fresh DuckDB file) twice per repeat, taking turns (A B, B A, …):

- baseline: head statistics, pattern features and thumbnails only (``mixing=False,
  massive=False``), what `attnwh ingest` stored before;
- default: the same plus head_mixing, layer_mixing and massive_activations, as
  `attnwh ingest` runs now.

Prints seconds (best of --repeats) and the ratio of the default to the baseline, measured in
the same run: best against best, and the median of the ratios within each repeat. Usage:
``python bench/mixing.py [--glue-dir ../shared/data/glue --task sst2 --repeats 5]``
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from common import alternate, load_task, print_ratios, task_parser

from attnwh.ingest.encoder.loading import load_encoder
from attnwh.ingest.runs.loop import IngestOptions, StatisticsCapture, ingest_runs, prepare_tasks
from attnwh.sql import warehouse


def main() -> None:
    args = task_parser(__doc__.splitlines()[0]).parse_args()
    data = load_task(args)
    encoder = load_encoder(None, args.device)
    options = IngestOptions(limit=args.limit, batch_size=args.batch_size)
    prepared = prepare_tasks(encoder, [data], options)
    captures = {
        "baseline (statistics only)": StatisticsCapture(encoder, mixing=False, massive=False),
        "default (+ mixing, massive)": StatisticsCapture(encoder),
    }
    last: dict[str, Path] = {}  # each variant's latest warehouse, to count its rows
    with tempfile.TemporaryDirectory() as tmp:

        def run(name: str) -> Callable[[int], None]:
            def ingest(repeat: int) -> None:
                last[name] = Path(tmp) / f"{repeat}-{name[:7]}.duckdb"
                ingest_runs(last[name], captures[name], prepared, options)

            return ingest

        times = alternate({name: run(name) for name in captures}, args.repeats)
        counts = {name: row_counts(db) for name, db in last.items()}
    n = len(prepared[0].data.examples)
    print(f"{data.task}/{data.split}: {n} examples, batch size {args.batch_size}, device {encoder.device}")
    print_ratios(times, "baseline (statistics only)", n)
    for name, found in counts.items():
        print(f"{name}: " + ", ".join(f"{t} {c}" for t, c in found.items()))


def row_counts(db: Path) -> dict[str, int]:
    con = warehouse.connect(db, read_only=True)
    tables = ("head_stats", "head_mixing", "layer_mixing", "massive_activations")
    counts = {t: warehouse.one_row(con, f"SELECT count(*) FROM {t}")[0] for t in tables}
    con.close()
    return counts


if __name__ == "__main__":
    main()
