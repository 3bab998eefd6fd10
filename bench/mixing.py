"""Benchmark: what context mixing (residual + LayerNorm) and massive activations add to an ingest.

Runs the whole statistics ingest of one task (batches, the model, the reductions, the rows
written into a fresh DuckDB file) twice per repeat, alternating:

- baseline: head statistics, pattern features and thumbnails only (``mixing=False,
  massive=False``), what `attnwh ingest` stored before;
- default: the same plus head_mixing, layer_mixing and massive_activations, as
  `attnwh ingest` runs now.

Prints seconds (best of --repeats) and the ratio of the default to the baseline, measured in
the same run. Usage: ``python bench/mixing.py [--glue-dir ../shared/data/glue --task sst2]``
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import load_task, task_parser

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
    times: dict[str, list[float]] = {name: [] for name in captures}
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats + 1):  # the first round warms up
            for name, capture in captures.items():
                db = Path(tmp) / f"{repeat}-{len(times[name])}-{name[:7]}.duckdb"
                start = time.perf_counter()
                ingest_runs(db, capture, prepared, options)
                seconds = time.perf_counter() - start
                if repeat:
                    times[name].append(seconds)
                con = warehouse.connect(db, read_only=True)
                tables = ("head_stats", "head_mixing", "layer_mixing", "massive_activations")
                counts[name] = {t: warehouse.one_row(con, f"SELECT count(*) FROM {t}")[0] for t in tables}
                con.close()
    n = len(prepared[0].data.examples)
    print(f"{data.task}/{data.split}: {n} examples, batch size {args.batch_size}, device {encoder.device}")
    best = {name: min(t) for name, t in times.items()}
    base = best["baseline (statistics only)"]
    for name, seconds in best.items():
        rows = ", ".join(f"{t} {c}" for t, c in counts[name].items())
        print(f"{name:30s} {seconds:7.2f} s  {n / seconds:7.1f} ex/s  ratio {seconds / base:5.2f}  ({rows})")


if __name__ == "__main__":
    main()
