"""Benchmark: what the look features and the default pattern classifier add to an ingest.

Runs the statistics ingest of one task (batches, the model, the reductions, the rows written
into a fresh DuckDB file; no context mixing or massive activations, to isolate the patterns)
twice per repeat, taking turns (A B, B A, …):

- rules only: the look features replaced by zeros and the types given by the rules, what
  `attnwh ingest` computed before the default classifier;
- default: look features computed on the device and the shipped classifier, as `attnwh
  ingest` runs now.

Prints seconds (best of --repeats) and the ratio of the default to the rules only, measured
in the same run: best against best, and the median of the ratios within each repeat. Usage: ``python bench/look.py [--model DIR] [--glue-dir ../shared/data/glue --task sst2]``
"""

from __future__ import annotations

import torch
from common import prepare_ingest, print_ratios, task_parser, time_ingests

from attnwh.ingest.measures import patterns
from attnwh.ingest.runs.loop import StatisticsCapture


def main() -> None:
    args = task_parser(__doc__.splitlines()[0]).parse_args()
    encoder, options, prepared = prepare_ingest(args)
    rules = StatisticsCapture(encoder, mixing=False, massive=False)
    rules.observer.classifier = patterns.THRESHOLDS
    captures = {
        "rules only": rules,
        "default (look + classifier)": StatisticsCapture(encoder, mixing=False, massive=False),
    }
    look = patterns._look

    def no_look(a: torch.Tensor, *_: object) -> torch.Tensor:
        return a.new_zeros((*a.shape[:2], len(patterns.LOOK_COLUMNS)))

    def swap(name: str) -> None:
        patterns._look = no_look if captures[name] is rules else look  # type: ignore[assignment]

    times, _ = time_ingests(captures, prepared, options, args.repeats, before=swap)
    patterns._look = look  # type: ignore[assignment]
    data, n = prepared.data, len(prepared.data.examples)
    print(f"{data.task}/{data.split}: {n} examples, batch size {args.batch_size}, device {encoder.device}")
    print_ratios(times, "rules only", n)


if __name__ == "__main__":
    main()
