"""Where the units of a heavy stage are computed: here, on Ray, or as one static shard.

Every stage plans its units (:mod:`attnwh.ingest.runs.units`) and stores what comes back
with `rows.store_part`; the engine only decides who computes:

- ``local`` (default): this process, unit after unit;
- ``ray``: a pool of Ray actors, each holding the model once (:mod:`attnwh.ingest.runs.ray_engine`);
  the parts come back through a shard folder and this process, the one writer, stores them;
- a static shard (``--shard I/N`` counted from 1, or ``--shard-index I --shards N`` counted
  from 0, with ``--shard-dir DIR``): this process computes every N-th unit and writes it to
  DIR, touching no warehouse; ``attnwh merge DIR`` stores them later. For Slurm job arrays
  and torchrun, where each task gets its own I (torchrun's RANK counts from 0, a Slurm
  array from whatever ``--array`` says).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attnwh.errors import ModelError, UsageError
from attnwh.ingest.runs import rows, shards
from attnwh.ingest.runs.shards import Part

if TYPE_CHECKING:
    from attnwh.ingest.model.loading import LoadedModel
    from attnwh.ingest.runs.loop import BatchCapture, PreparedTask
    from attnwh.ingest.runs.units import Worker, WorkUnit

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class EngineOptions:
    engine: str = "local"  # local | ray
    ray_address: str | None = None  # None: start a local Ray instance; "auto" or "host:port" (not ray://)
    workers: int = 2  # Ray actors, each holding the model once
    gpus_per_worker: float | None = None  # None: 1 when the cluster has GPUs and --device is not cpu
    device: str = "auto"  # what the user asked for; a Ray worker resolves it where it runs
    shard: tuple[int, int] | None = None  # static shard I of N, I counted from 1 (see shard_from_index)
    shard_dir: Path | None = None  # where shards go (static: required; Ray: default beside the warehouse)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise UsageError(f"unknown engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if self.shard is not None:
            index, count = self.shard
            if count < 1 or not 1 <= index <= count:
                raise UsageError(f"--shard {index}/{count}: I must be between 1 and N")
            if self.shard_dir is None:
                raise UsageError(
                    "a static shard (--shard, --shard-index) writes its part of the work to a folder: give --shard-dir"
                )
            if self.engine != "local":
                raise UsageError(
                    "a static shard (--shard, --shard-index) runs one slice in this process; "
                    "it does not combine with --engine ray"
                )
        if self.engine == "ray":
            from attnwh.ingest.runs.ray_engine import INSTALL_HINT, ray_installed

            if not ray_installed():
                raise UsageError(INSTALL_HINT)
        if self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise UsageError("--gpus-per-worker cannot be negative")
        if self.engine == "ray" and self.ray_address is not None:
            from attnwh.ingest.runs.ray_engine import check_address

            # Now, before any model or data is loaded: Ray would retry for minutes.
            check_address(self.ray_address)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`--shard I/N`, I counted from 1 (1 … N), as (I, N); None stays None."""
    if text is None:
        return None
    head, sep, tail = text.partition("/")
    if not sep or not head.strip().isdigit() or not tail.strip().isdigit():
        raise UsageError(f"--shard {text!r}: write it as I/N with I counted from 1, e.g. 3/8")
    index, count = int(head), int(tail)
    if count < 1:
        raise UsageError(f"--shard {text}: N must be at least 1")
    if not 1 <= index <= count:
        zero = (
            f"; for an index counted from 0 (torchrun's RANK, a Slurm array from 0) give --shard-index 0 --shards {count}"
            if index == 0
            else ""
        )
        raise UsageError(f"--shard {text}: I counts from 1, so it is 1 … {count}{zero}")
    return index, count


def shard_from_index(index: int | None, count: int | None) -> tuple[int, int] | None:
    """`--shard-index I --shards N`, I counted from 0 (0 … N-1), as the same shard's
    (I + 1, N) that :func:`parse_shard` gives for `--shard I+1/N`; both None stay None."""
    if index is None and count is None:
        return None
    if count is None:
        raise UsageError("--shard-index goes with --shards N (how many shards in all)")
    if index is None:
        raise UsageError("--shards goes with --shard-index I (this shard's index, counted from 0)")
    if count < 1:
        raise UsageError(f"--shards {count}: there must be at least 1 shard")
    if not 0 <= index < count:
        raise UsageError(
            f"--shard-index {index} --shards {count}: the index counts from 0, so it is 0 … {count - 1}; "
            f"for I counted from 1 give --shard I/{count}"
        )
    return index + 1, count


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process loads to compute units of one kind of run: the models by the
    names `load_model` was given, the weights they must have, and the kind's settings."""

    kind: str  # statistics | compare | ablation | roles | restriction | streaming | massive_ablation | relations | loss_curve
    models: Mapping[str, str | None]  # runs column (model_id, base_model_id) -> load_model name
    weights: Mapping[str, str]  # runs column -> weights hash the loaded model must have
    dtype: str
    settings: Mapping[str, Any] = field(
        default_factory=dict
    )  # the capture's settings(); ablation: mode, prefix_cache, the objective and its settings, …
    language_model: bool = False  # load a decoder with its language-model head (runs read through a prompt)


def capture_spec(capture: BatchCapture) -> WorkerSpec:
    models = capture.models()
    return WorkerSpec(
        kind=capture.kind,
        models={column: e.source for column, e in models.items()},
        weights={column: e.weights_hash for column, e in models.items()},
        dtype=str(capture.encoder.dtype).removeprefix("torch."),
        settings=capture.settings(),
        # A statistics run read through a prompt reads its answers: the language-model head.
        language_model=bool(capture.settings().get("label_ids")),
    )


def build_worker(spec: WorkerSpec, device: str) -> Worker:
    """Load the spec's models on `device` and return the worker that computes its units.
    Raises ModelError when a model loads with other weights than the driver's."""
    from attnwh.ingest.model.loading import load_model

    encoders: dict[str, LoadedModel] = {}
    for column, name in spec.models.items():
        encoder = load_model(name, device, spec.dtype, language_model=spec.language_model)
        if encoder.weights_hash != spec.weights[column]:
            raise ModelError(
                f"{encoder.name} loaded on a worker has other weights than on the driver; "
                "every machine must see the same model files"
            )
        encoders[column] = encoder
    if spec.kind == "statistics":
        from attnwh.ingest.runs.loop import StatisticsCapture
        from attnwh.ingest.runs.units import CaptureWorker

        return CaptureWorker(StatisticsCapture(encoders["model_id"], **spec.settings))
    if spec.kind == "compare":
        from attnwh.ingest.measures.change import ChangeCapture
        from attnwh.ingest.runs.units import CaptureWorker

        return CaptureWorker(ChangeCapture(encoders["base_model_id"], encoders["model_id"], **spec.settings))
    if spec.kind == "restriction":
        from attnwh.ingest.runs.restriction import RestrictionWorker

        settings = spec.settings
        return RestrictionWorker(
            encoders["model_id"], settings["options"], settings["sets"], settings["labels"], settings["places"]
        )
    if spec.kind == "streaming":
        from attnwh.ingest.runs.streaming import StreamingWorker

        return StreamingWorker(encoders["model_id"], spec.settings["options"], spec.settings["places"])
    if spec.kind == "massive_ablation":
        from attnwh.ingest.runs.massive_ablation import MassiveAblationWorker

        return MassiveAblationWorker(encoders["model_id"], spec.settings["entries"], spec.settings["sites"])
    if spec.kind == "loss_curve":
        from attnwh.ingest.runs.loss_curve import LossCurveWorker

        return LossCurveWorker(encoders["model_id"])
    if spec.kind == "relations":
        from attnwh.ingest.runs.relations import RelationsWorker

        return RelationsWorker(encoders["model_id"], spec.settings["inputs"], spec.settings["batch_size"])
    if spec.kind == "roles":
        from attnwh.ingest.runs.roles import RolesCapture
        from attnwh.ingest.runs.units import CaptureWorker

        return CaptureWorker(RolesCapture(encoders["model_id"], **spec.settings))
    if spec.kind == "ablation":
        from attnwh.ingest.runs.sweep import sweep_worker

        return sweep_worker(encoders["model_id"], spec.settings)
    raise ValueError(f"no worker for runs of kind {spec.kind!r}")


class Executor(Protocol):
    """Computes units and yields their parts (in any order), each once."""

    def map(self, units: Sequence[WorkUnit]) -> Iterator[Part]: ...


class LocalExecutor:
    """This process, unit after unit."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def map(self, units: Sequence[WorkUnit]) -> Iterator[Part]:
        for unit in units:
            yield self.worker.compute(unit)


def executor_for(engine: EngineOptions, spec: WorkerSpec, worker: Worker, db_path: Path) -> Executor:
    """The executor of `engine`; `worker` is this process's own (used by the local engine)."""
    if engine.engine == "ray":
        from attnwh.ingest.runs.ray_engine import RayExecutor

        return RayExecutor(engine, spec, engine.shard_dir or default_shard_dir(db_path))
    return LocalExecutor(worker)


def default_shard_dir(db_path: Path) -> Path:
    """Where Ray workers put their parts for the driver, beside the warehouse."""
    db_path = Path(db_path)
    return db_path.parent / f"{db_path.name}.shards"


# -- static shards ------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardSummary:
    task: str
    kind: str
    run_key: str
    shard: tuple[int, int]
    n_units: int  # this shard's units of the run
    n_written: int  # units computed by this invocation (the others were already there)
    n_examples: int  # the run's examples (all shards)
    seconds: float
    folder: Path


ProgressStart = Callable[[str, int], None]
ProgressBatch = Callable[[int], None]


def write_shards(
    engine: EngineOptions,
    plans: Sequence[tuple[Mapping[str, Any], Sequence[WorkUnit]]],
    worker: Worker,
    tasks: Sequence[PreparedTask],
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> list[ShardSummary]:
    """Compute this static shard's units of every run (`plans`: the run's description for
    `shards.write_run_info` and all its units) and write them to the shard folder. Units
    already there are skipped, and partial ones left by an interrupted attempt removed, so
    rerunning a shard resumes it."""
    from attnwh.ingest.runs.units import shard_slice

    assert engine.shard is not None and engine.shard_dir is not None  # checked by EngineOptions
    summaries = []
    for (info, units), task in zip(plans, tasks, strict=True):
        started = time.perf_counter()
        run_key = str(info["run_key"])
        shards.write_run_info(engine.shard_dir, info)
        mine = shard_slice(units, engine.shard)
        have = shards.stored_parts(engine.shard_dir, run_key)
        todo = [u for u in mine if u.name not in have]
        shards.remove_partial(engine.shard_dir, run_key, [u.name for u in todo])
        if on_start:
            index, count = engine.shard
            on_start(f"{task.data.task} · shard {index}/{count}", sum(len(u.positions) for u in todo))
        for unit in todo:
            part = worker.compute(unit)
            part.tables["examples"] = rows.example_rows(task.data, unit.positions, unit.example_ids.tolist())
            shards.write_part(engine.shard_dir, part)
            if on_batch:
                on_batch(len(unit.positions))
        summaries.append(
            ShardSummary(
                task=task.data.task,
                kind=str(info["kind"]),
                run_key=run_key,
                shard=engine.shard,
                n_units=len(mine),
                n_written=len(todo),
                n_examples=len(task.data.examples),
                seconds=time.perf_counter() - started,
                folder=shards.run_folder(engine.shard_dir, run_key),
            )
        )
    return summaries
