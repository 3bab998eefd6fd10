"""What the ingest benchmarks share: the task options and loading the task they time."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnwh.ingest.sources import files as loaders
from attnwh.ingest.sources.examples import TaskData


def task_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the options every ingest benchmark takes: the task, its size, the batch
    size, the repeats and the device."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--glue-dir", type=Path, default=None)
    parser.add_argument("--task", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    return parser


def load_task(args: argparse.Namespace) -> TaskData:
    """The dev split of a GLUE task under --glue-dir (default SST-2), else of a bundled
    sample task (default sentiment)."""
    if args.glue_dir:
        return loaders.load_glue(args.glue_dir, args.task or "sst2", "dev")
    return loaders.load_sample(args.task or "sentiment", "dev")
