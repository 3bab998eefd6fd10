"""What the ingest benchmarks share: the task options, loading the task they time, and timing
variants of the statistics ingest against each other."""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from torch import nn

from attnwh.ingest.model.loading import LoadedModel, load_model
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask, StatisticsCapture, ingest_runs, prepare_tasks
from attnwh.ingest.sources import files as loaders
from attnwh.ingest.sources.examples import TaskData


def task_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the options every ingest benchmark takes: the model, the task, its size,
    the batch size, the repeats and the device."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default=None, help="encoder folder or hub name (default: the bundled MiniLM)")
    parser.add_argument("--glue-dir", type=Path, default=None)
    parser.add_argument("--task", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    return parser


def load_task(args: argparse.Namespace) -> TaskData:
    """The dev split of a GLUE task under --glue-dir (default SST-2), else of a bundled
    sample task (default sentiment)."""
    if args.glue_dir:
        return loaders.load_glue(args.glue_dir, args.task or "sst2", "dev")
    return loaders.load_sample(args.task or "sentiment", "dev")


def prepare_ingest(args: argparse.Namespace) -> tuple[LoadedModel, IngestOptions, PreparedTask]:
    """--model (default: the bundled MiniLM) on --device, the ingest options of the arguments,
    and the task (:func:`load_task`) prepared for it."""
    encoder = load_model(args.model, args.device)
    options = IngestOptions(limit=args.limit, batch_size=args.batch_size)
    (prepared,) = prepare_tasks(encoder, [load_task(args)], options)
    return encoder, options, prepared


Found = TypeVar("Found")


def time_ingests(
    captures: dict[str, StatisticsCapture],
    prepared: PreparedTask,
    options: IngestOptions,
    repeats: int,
    before: Callable[[str], None] = lambda name: None,
    inspect: Callable[[Path], Found] | None = None,
) -> tuple[dict[str, list[float]], dict[str, Found]]:
    """Seconds of the whole ingest of the task into a fresh warehouse under each capture, per
    repeat (:func:`alternate`); `before` is called with the variant's name before each of its
    ingests, and `inspect` on each variant's last warehouse."""
    last: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def run(name: str) -> Callable[[int], None]:
            def ingest(repeat: int) -> None:
                before(name)
                last[name] = Path(tmp) / f"{repeat}-{list(captures).index(name)}.duckdb"
                ingest_runs(last[name], captures[name], [prepared], options)

            return ingest

        times = alternate({name: run(name) for name in captures}, repeats)
        found = {name: inspect(db) for name, db in last.items()} if inspect else {}
    return times, found


def alternate(runs: dict[str, Callable[[int], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each run per repeat, after one warm-up round. The runs take turns, and the
    order flips every repeat (A B, B A, …), so a slow spell of a shared machine falls on
    each of them alike; each run is called with the repeat's number."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats + 1):
        order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
        for name in order:
            start = time.perf_counter()
            runs[name](repeat)
            if repeat:
                times[name].append(time.perf_counter() - start)
    return times


def print_ratios(times: dict[str, list[float]], baseline: str, n_examples: int) -> None:
    """Per run: the best time, and its ratio to the baseline two ways: best against best, and
    the median over repeats of the ratio within each repeat (robust to drift on a shared
    machine), with the range of those ratios."""
    base = times[baseline]
    for name, seconds in times.items():
        paired = sorted(s / b for s, b in zip(seconds, base, strict=True))
        best = min(seconds)
        print(
            f"{name:30s} {best:7.2f} s  {n_examples / best:7.1f} ex/s  ratio best {best / min(base):5.2f}"
            f"  median {statistics.median(paired):5.2f} [{paired[0]:.2f}, {paired[-1]:.2f}]"
        )


def with_attention(model: nn.Module, implementation: str) -> nn.Module:
    """A copy of `model` running transformers' `implementation` of attention (sdpa falls back
    to the family's own where it has none)."""
    twin = copy.deepcopy(model)
    try:
        twin.set_attn_implementation(implementation)
    except ValueError:
        twin.set_attn_implementation("eager")
    return twin.eval()
