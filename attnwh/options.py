"""The option vocabulary of every `attnwh` command, declared once.

A command names an option by its alias (`db: DbOpt = DEFAULT_DB`), or takes a whole group of
them as one dataclass parameter (`source: DataSource`, `reading: Reading`) under
:func:`with_option_groups`, which spreads the group's fields into the command's options in
that place. A command that words one option of a group differently declares that option itself;
the group still receives its value.

Only typer is imported here (and the torch-free task dispatcher): `attnwh --help` stays fast.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import inspect
import re
import shlex
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnwh.errors import UsageError
from attnwh.ingest.sources.tasks import check_sources, load_tasks

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions
    from attnwh.ingest.runs.loop import IngestOptions
    from attnwh.ingest.sources.examples import TaskData

DEFAULT_DB = Path("attnwh.duckdb")
DB_ENVVAR = "ATTNWH_DB"


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Dtype(str, enum.Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Zeroing(str, enum.Enum):
    layer = "layer"
    head = "head"


class Mode(str, enum.Enum):
    """How `ingest ablation` disables a head."""

    uniform = "uniform"
    zero = "zero"


class ProbeKind(str, enum.Enum):
    """Probe sequences `ingest ablation --probe` scores by next-token loss (`sources/probes.py`)."""

    induction = "induction"
    needle = "needle"
    passkey = "passkey"


class Documents(str, enum.Enum):
    """How a plain text --text file is split into documents (`attnwh.ingest.sources.text`)."""

    paragraph = "paragraph"
    line = "line"
    file = "file"


class ReportFormat(str, enum.Enum):
    html = "html"
    png = "png"
    svg = "svg"


MixingOpt = Annotated[
    bool,
    typer.Option(
        "--mixing/--no-mixing",
        help="Store context mixing after the residual and LayerNorm (Kobayashi et al. 2021) in head_mixing and "
        "layer_mixing (post-LN models). The costliest lens: at GLUE lengths on a CPU a whole ingest takes about a "
        "quarter longer with it (bench/mixing.py); --no-mixing leaves it out of the run.",
    ),
]
MassiveOpt = Annotated[
    bool,
    typer.Option(
        "--massive/--no-massive",
        help="Store massive activations (Sun et al. 2024) in massive_activations (a whole ingest takes about 6% "
        "longer with them); --no-massive leaves them out of the run.",
    ),
]
ValueZeroingOpt = Annotated[
    Zeroing | None,
    typer.Option(
        "--value-zeroing",
        help="Also measure context mixing by value zeroing (Mohebbi et al. 2023) into layer_mixing (layer: each "
        "token's value zeroed in all heads) or head_mixing (head: in one head at a time). Costs one recomputation "
        "of every layer per token (per token and head); off by default.",
    ),
]


def _warehouse_file(path: Path) -> Path:
    """--db is checked as it is parsed, before any work: an existing file that is not a DuckDB
    database (a CSV, a Parquet file) is refused, where DuckDB would silently store nothing."""
    from attnwh.sql.warehouse import check_file

    check_file(path)
    return path


# --db: one name, one default (DEFAULT_DB), one environment variable, one check; the help says
# what the command does with the file.
def _db_option(help: str) -> Any:
    return typer.Option("--db", help=help, envvar=DB_ENVVAR, callback=_warehouse_file)


DbOpt = Annotated[Path, _db_option("Warehouse file (created if missing).")]
ReadDbOpt = Annotated[Path, _db_option("Warehouse file.")]
RecordDbOpt = Annotated[Path, _db_option("Warehouse file to record the run in.")]

DeviceOpt = Annotated[Device, typer.Option(help="Where to run the model.")]
# A model in one GGUF file: --model FILE.gguf, or --model FOLDER with this option. The command
# joins the two into the file's path (attnwh.ingest.model.gguf.model_path), the one name the
# model then travels under (the warehouse, shard processes, Ray workers).
GgufFileOpt = Annotated[
    str | None,
    typer.Option(
        help="A GGUF file (llama.cpp's format) inside the --model folder, loaded with its weights dequantised to "
        "float32; --model FILE.gguf gives one directly."
    ),
]

# The data-source options (`attnwh ingest`, `compare`, `ablation`; finetune and study reuse some).
TaskOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Task(s) to read; repeat or separate with commas. GLUE: sst2 mrpc rte cola stsb qnli qqp mnli wnli. "
        "Bundled sample: sentiment, entailment (both by default); prose, plain text for language modelling (cut as "
        "--text is)."
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
TextColumnOpt = Annotated[
    str | None, typer.Option(help="Text column of --data or --dataset; the field of --text (default: text).")
]
PairColumnOpt = Annotated[str | None, typer.Option(help="Second-sentence column, for sentence pairs.")]
LabelColumnOpt = Annotated[str | None, typer.Option(help="Label column.")]
TextOpt = Annotated[
    str | None,
    typer.Option(
        metavar="FILE|DATASET",
        help="Plain text for language modelling, cut into sequences of --max-length tokens: a text file (see "
        "--documents), a JSONL, CSV or Parquet file (one document per record, field --text-column, default text), "
        "or a datasets folder or name (one document per row). The bundled text sample: --task prose.",
    ),
]
StrideOpt = Annotated[
    int,
    typer.Option(
        min=0,
        help="Tokens that consecutive sequences of one long --text document share (the overlap; 0: each token in "
        "one sequence). Less than --max-length less the special tokens.",
    ),
]
DocumentsOpt = Annotated[
    Documents | None,
    typer.Option(
        help="How a plain text --text file splits into documents: paragraph (blank lines between them; the "
        "default), line, or file (the whole file is one). A document is never cut where it fits."
    ),
]
SplitOpt = Annotated[
    str | None, typer.Option(help="Split to read: train, dev, ... (default: dev; for --data: the whole file).")
]

# How the examples are read and batched.
LimitOpt = Annotated[
    int | None, typer.Option(min=1, help="At most this many examples per task, a seeded random sample.")
]
SeedOpt = Annotated[int, typer.Option(help="Seed of the --limit sample.")]
MaxLengthOpt = Annotated[
    int | None, typer.Option(min=1, help="Truncate inputs to this many tokens (default: the model's limit).")
]
TruncateOpt = Annotated[
    bool, typer.Option(help="Truncate over-long inputs (counted and reported) instead of refusing them.")
]
BatchSizeOpt = Annotated[int, typer.Option(min=1, help="Examples per batch (batches are bucketed by length).")]


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20}
_UNITS |= {"g": 2**30, "gb": 2**30, "gib": 2**30}


def parse_memory(text: str | int | None) -> int | None:
    """Bytes from a size such as 512M, 2G, 1.5GiB or a plain number of bytes (K, M, G are
    powers of 1024)."""
    if text is None or isinstance(text, int):
        return text
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = found and _UNITS.get(found.group(2).lower())
    if not found or unit is None or float(found.group(1)) * unit < 2**20:
        raise UsageError(f"--attention-memory {text!r}: give a size of at least 1M, such as 256M or 2G")
    return int(float(found.group(1)) * unit)


def _memory(text: str | int | None) -> str | int | None:
    if text is not None:
        parse_memory(text)  # refused as it is parsed, before any work
    return text


AttentionMemoryOpt = Annotated[
    str | None,
    typer.Option(
        metavar="SIZE",
        callback=_memory,
        help="Attention maps alive at once, e.g. 256M or 2G. Longer layers are computed in tiles of query rows "
        "that fit it and batches of long inputs are split, so memory grows linearly with the input's length; "
        "what keeps maps whole (DeBERTa, MPNet, gradient importance) refuses inputs over "
        "it. Default: an eighth of the free memory of the device (GPU) or host (CPU), between 64M and 512M.",
    ),
]
ReplaceOpt = Annotated[bool, typer.Option(help="Redo runs that are already complete instead of skipping them.")]


class Precision(str, enum.Enum):
    """What fine-tuning computes its forward and backward in."""

    float32 = "float32"
    bfloat16 = "bfloat16"


# Fine-tuning: how a step is split and how often it is saved (same updates either way), and
# its precision.
MicroBatchOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Fine-tune in micro-batches of this many examples, their gradients accumulated into each step of "
        "--batch-size: the same updates in a fraction of the memory. Default: the whole batch at once.",
    ),
]
CheckpointStepsOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Save a fine-tuning checkpoint (weights, optimizer, schedule, random state, data position) in "
        "OUT/attnwh-checkpoint every this many steps, besides every --checkpoint-minutes; rerunning an "
        "interrupted command resumes from the last one.",
    ),
]
CheckpointMinutesOpt = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="Save a fine-tuning checkpoint at the first step after this many minutes since the last (0: only "
        "every --checkpoint-steps, and at Ctrl-C).",
    ),
]
PrecisionOpt = Annotated[
    Precision,
    typer.Option(
        help="Fine-tuning's forward and backward: float32, or bfloat16 autocast (weights, gradients and AdamW stay "
        "float32; for GPUs with bfloat16).",
    ),
]


@dataclasses.dataclass(frozen=True)
class DataSource:
    """Where a command's examples come from: one source, or the bundled sample without one."""

    task: TaskOpt = None
    glue_dir: GlueDirOpt = None
    dataset: DatasetOpt = None
    dataset_config: DatasetConfigOpt = None
    data: DataOpt = None
    text_column: TextColumnOpt = None
    pair_column: PairColumnOpt = None
    label_column: LabelColumnOpt = None
    split: SplitOpt = None
    text: TextOpt = None
    stride: StrideOpt = 0
    documents: DocumentsOpt = None

    @property
    def given(self) -> bool:
        """Whether a data source was named (else the bundled sample is read)."""
        return any(s is not None for s in (self.glue_dir, self.dataset, self.data, self.text))

    def check(self) -> None:
        """Refuse conflicting sources and options that the chosen source would ignore."""
        check_sources(self.glue_dir, self.dataset, self.data, self.text)
        if self.dataset_config is not None and self.dataset is None and self.text is None:
            raise UsageError("--dataset-config goes with --dataset (or a dataset named by --text)")
        if self.documents is not None and self.text is None:
            raise UsageError("--documents goes with --text (a plain text file)")
        if self.text is not None:
            for name, value in (("--pair-column", self.pair_column), ("--label-column", self.label_column)):
                if value is not None:
                    raise UsageError(f"{name} has no place with --text: plain text has one text field and no labels")
        columns = [
            name
            for name, value in (
                ("--text-column", self.text_column),
                ("--pair-column", self.pair_column),
                ("--label-column", self.label_column),
            )
            if value is not None
        ]
        if columns and self.data is None and self.dataset is None and self.text is None:
            raise UsageError(
                f"{columns[0]} names a column of --data or --dataset (or a field of --text); give one of them"
            )

    def load(self, task: list[str] | None = None) -> list[TaskData]:
        """The tasks to read; `task` overrides --task."""
        return load_tasks(
            task if task is not None else self.task,
            self.glue_dir,
            self.dataset,
            self.dataset_config,
            self.data,
            self.text_column,
            self.pair_column,
            self.label_column,
            self.split,
            text=self.text,
            stride=self.stride,
            documents=self.documents.value if self.documents is not None else None,
        )


@dataclasses.dataclass(frozen=True)
class Reading:
    """How many examples are read, how long they may be, and how they are batched."""

    limit: LimitOpt = None
    seed: SeedOpt = 42
    max_length: MaxLengthOpt = None
    truncate: TruncateOpt = True
    batch_size: BatchSizeOpt = 32

    def ingest_options(self, replace: bool) -> IngestOptions:
        """Run settings of the ingest loop, with the command line recorded."""
        from attnwh.ingest.runs.loop import IngestOptions

        return IngestOptions(
            limit=self.limit,
            seed=self.seed,
            max_length=self.max_length,
            truncate=self.truncate,
            batch_size=self.batch_size,
            replace=replace,
            command=command_line(),
        )


class EngineChoice(str, enum.Enum):
    local = "local"
    ray = "ray"


# Where the heavy stages run (`attnwh ingest`, `compare`, `ablation`; `study` without --shard).
EngineOpt = Annotated[
    EngineChoice,
    typer.Option(
        "--engine",
        help="local: this process; ray: a pool of Ray workers, each holding the model once "
        "(pip install 'attnwh\\[ray]').",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        help="Ray cluster to join, from one of its nodes: auto (the one `ray start` started on this machine, or "
        "RAY_ADDRESS) or the head's host:6379. Checked first: an address where no Ray answers fails in seconds. "
        "Not ray:// (Ray Data does not run through Ray Client). Default: start a local instance that listens on "
        "127.0.0.1 only."
    ),
]
WorkersOpt = Annotated[int, typer.Option(min=1, help="Ray workers (actors), each holding the model once.")]
GpusPerWorkerOpt = Annotated[
    float | None,
    typer.Option(
        min=0,
        help="GPUs each Ray worker asks for; fractions share a GPU. Default: 1 when the cluster has GPUs and "
        "--device is not cpu, else 0.",
    ),
]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        metavar="I/N",
        help="Compute only static slice I of N, I counted from 1 (1/8 to 8/8, the same slices on every machine), "
        "and write it to --shard-dir instead of the warehouse, for Slurm job arrays or torchrun; `attnwh merge` "
        "loads the slices. Counting from 0: --shard-index with --shards.",
    ),
]
ShardIndexOpt = Annotated[
    int | None,
    typer.Option(
        metavar="I",
        help="The same as --shard, with I counted from 0 (0 to N-1: torchrun's $RANK, $SLURM_ARRAY_TASK_ID of "
        "--array=0-7); give --shards N with it. --shard-index 0 --shards 8 is --shard 1/8.",
    ),
]
ShardsOpt = Annotated[int | None, typer.Option(metavar="N", help="How many slices in all, with --shard-index.")]
ShardDirOpt = Annotated[
    Path | None,
    typer.Option(
        help="Folder of shards: where --shard writes; with --engine ray, where workers leave their parts for this "
        "process to store (default: beside --db; on a cluster, storage every node sees)."
    ),
]


@dataclasses.dataclass(frozen=True)
class Engine:
    """Where the batches of a heavy stage are computed: here, on Ray, or as a static shard."""

    engine: EngineOpt = EngineChoice.local
    ray_address: RayAddressOpt = None
    workers: WorkersOpt = 2
    gpus_per_worker: GpusPerWorkerOpt = None
    shard: ShardOpt = None
    # Keyword-only: `attnwh study`, which takes no shard, builds the group positionally.
    shard_index: ShardIndexOpt = dataclasses.field(default=None, kw_only=True)
    shards: ShardsOpt = dataclasses.field(default=None, kw_only=True)
    shard_dir: ShardDirOpt = None

    def options(self, device: str) -> EngineOptions:
        """The engine settings for the library (checked: one line for a bad combination)."""
        from attnwh.ingest.runs.engine import EngineOptions, parse_shard, shard_from_index

        ray_only = [
            name
            for name, given in (
                ("--ray-address", self.ray_address is not None),
                ("--workers", self.workers != 2),
                ("--gpus-per-worker", self.gpus_per_worker is not None),
            )
            if given
        ]
        if ray_only and self.engine is not EngineChoice.ray:
            raise UsageError(f"{ray_only[0]} goes with --engine ray")
        from_zero = self.shard_index is not None or self.shards is not None
        if self.shard is not None and from_zero:
            raise UsageError(
                "give --shard I/N (I counted from 1) or --shard-index I --shards N (I counted from 0), not both"
            )
        sharded = self.shard is not None or from_zero
        if self.shard_dir is not None and not sharded and self.engine is not EngineChoice.ray:
            raise UsageError("--shard-dir goes with --shard, --shard-index or --engine ray")
        return EngineOptions(
            engine=self.engine.value,
            ray_address=self.ray_address,
            workers=self.workers,
            gpus_per_worker=self.gpus_per_worker,
            device=device,
            shard=shard_from_index(self.shard_index, self.shards) if from_zero else parse_shard(self.shard),
            shard_dir=self.shard_dir,
        )


# The arguments of the `attnwh` command being run, set by its entry point; None when attnwh.api
# is called from Python (a notebook's sys.argv is its kernel's, not a command).
TYPED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("typed", default=None)


def command_line() -> str:
    """The command as typed, recorded with every run; from Python, that it was the API."""
    typed = TYPED.get()
    return "attnwh.api (Python)" if typed is None else shlex.join(["attnwh", *typed])


_GROUPS = (DataSource, Reading, Engine)


def with_option_groups(command: Callable[..., Any]) -> Callable[..., Any]:
    """Spread each parameter typed with an option group (:class:`DataSource`, :class:`Reading`,
    :class:`Engine`)
    into the group's options, at that place in the command's options, and hand the command the
    group built from them. An option of the group that the command declares itself (its own
    help) takes the group's place for it in --help; the group gets its value too."""
    signature = inspect.signature(command, eval_str=True)
    own = signature.parameters
    groups = {p.name: p.annotation for p in own.values() if p.annotation in _GROUPS}
    grouped = {f.name for group in groups.values() for f in dataclasses.fields(group)}
    params: list[inspect.Parameter] = []
    for p in own.values():
        if p.name in groups:
            hints = typing.get_type_hints(p.annotation, include_extras=True)
            params += [
                own[f.name]
                if f.name in own
                else inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
                )
                for f in dataclasses.fields(p.annotation)
            ]
        elif p.name not in grouped:
            params.append(p)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        for name, group in groups.items():
            fields = [f.name for f in dataclasses.fields(group)]
            kwargs[name] = group(**{f: kwargs[f] if f in own else kwargs.pop(f) for f in fields})
        return command(**kwargs)

    del run.__wrapped__  # typer reads the signature below, not the command's
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run
