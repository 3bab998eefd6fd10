"""The one skeleton of an ablation sweep, whatever scores its configurations.

A sweep disables every head and every whole layer in turn (1 + L×H + L configurations) and
scores each configuration by its *objective*: a classifier's or a prompted model's task
metric on gold labels (:class:`attnwh.ingest.runs.ablation.TaskObjective`), or a language
model's next-token loss on text or probes
(:class:`attnwh.ingest.runs.loss_ablation.LossObjective`). The skeleton is the same for
both, and lives here once:

1. the sweep, as resumable units of the engine (:mod:`attnwh.ingest.runs.units`): batches of
   examples, on Ray and in static shards split further into groups of configurations that
   share a first disabled layer, so the prefix cache still applies inside a group. A unit's
   rows under every configuration are committed with its run_examples marks, so an
   interrupted run resumes at the next unit, and the shards' rows merge into the same run;
2. the finish, once every example is in: the objective's tests and extras (combinations,
   gradient importance), from the stored rows, in the transaction that completes the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb
import numpy as np

from attnwh.ingest.measures.ablation import AblationSweep, Configuration, sweep_configurations
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.runs.loop import IngestOptions, OpenRun, PreparedTask, open_task_run, run_info, store_stream
from attnwh.ingest.runs.units import Worker, plan_units
from attnwh.sql import runs, status, warehouse

if TYPE_CHECKING:
    from attnwh.ingest.runs.ablation import AblationOptions
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary, WorkerSpec
    from attnwh.ingest.runs.prepared import Prepared

ProgressStart = Callable[[str, int], None]
ProgressBatch = Callable[[int], None]


@dataclass(frozen=True)
class SweepRun:
    """A task's sweep run, as its objective finishes it (its sweep whole) and sums it up."""

    con: duckdb.DuckDBPyConnection
    run_id: int
    task: PreparedTask
    sweep: AblationSweep  # this process's, for what the finish computes (combinations, importance)
    options: IngestOptions
    ablation: AblationOptions
    on_start: ProgressStart
    on_batch: ProgressBatch


class Objective(Protocol):
    """What scores a sweep's configurations, and what its run does once they are scored."""

    name: str  # "task" | "loss": the worker's settings name it (`sweep_worker`)
    table: str  # the table of rows per configuration and example
    language_model: bool  # workers load the language-model head

    def check(self, encoder: LoadedModel, tasks: Sequence[PreparedTask], ablation: AblationOptions) -> None:
        """Refuse, before anything is written, tasks this objective cannot score."""
        ...

    def labels(self, task: PreparedTask) -> np.ndarray | None:
        """What a unit of `task` carries besides its tokens (gold labels), or None."""
        ...

    def configurations(self, encoder: LoadedModel) -> list[Configuration]:
        """The configurations scored, in config_id order (0: the baseline)."""
        ...

    def worker_settings(self, tasks: Sequence[PreparedTask]) -> dict[str, Any]:
        """The objective's part of a worker's settings (label words, spans, by run key)."""
        ...

    def describe(self, task: PreparedTask, ablation: AblationOptions, n_configs: int) -> str:
        """The progress bar's name of a task's sweep."""
        ...

    def finish(self, run: SweepRun) -> None:
        """Test the stored rows and complete the run, in one transaction."""
        ...

    def summary(self, run: SweepRun, outcome: str, n_written: int, seconds: float) -> Any:
        """The headline of a complete run, read back from the warehouse."""
        ...


def sweep_worker(encoder: LoadedModel, settings: Mapping[str, Any]) -> Worker:
    """The worker of a sweep of `encoder` with `AblationOptions.worker_settings()` and its
    objective's settings (`settings["objective"]` names it)."""
    sweep = AblationSweep(
        encoder,
        settings["mode"],
        settings["prefix_cache"],
        settings["configs_per_pass"],
        settings.get("attention_memory"),
    )
    sweep.on_pass = status.on_pass  # a no-op but in the process of a command that keeps a status
    if settings.get("objective") == "loss":
        from attnwh.ingest.runs.loss_ablation import LossWorker

        return LossWorker(sweep, settings["spans"], settings.get("configs"))
    from attnwh.ingest.runs.ablation import SweepWorker

    return SweepWorker(sweep, settings.get("label_ids"))


def sweep_groups(num_layers: int, num_heads: int) -> list[tuple[int, ...]]:
    """The sweep's configuration ids (`sweep_configurations` order) in groups that share a
    first disabled layer: layer l's heads and the whole layer l; the baseline goes with the
    last layer, whose pass is the shortest."""
    groups = [
        tuple(1 + l * num_heads + h for h in range(num_heads)) + (1 + num_layers * num_heads + l,)
        for l in range(num_layers)
    ]
    groups[-1] = (0, *groups[-1])
    return groups


def config_groups(configs: Sequence[Configuration], num_layers: int, num_heads: int) -> list[tuple[int, ...]]:
    """`configs`' ids in groups that share a first disabled layer: :func:`sweep_groups` for the
    whole sweep, else one group per first layer in order, the baseline (which changes no layer)
    with the last."""
    if list(configs) == sweep_configurations(num_layers, num_heads):
        return sweep_groups(num_layers, num_heads)
    by_start: dict[int, list[int]] = {}
    for i, config in enumerate(configs):
        by_start.setdefault(config.start(num_layers), []).append(i)
    groups = [tuple(by_start[start]) for start in sorted(by_start)]
    if len(groups) > 1 and num_layers in by_start:
        last = groups.pop()
        groups[-1] = (*last, *groups[-1])
    return groups


def ingest_sweep(
    db_path: Path,
    encoder: LoadedModel,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    ablation: AblationOptions,
    objective: Objective,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
    engine: EngineOptions | None = None,
) -> list[Any]:
    """Sweep, finish and store every prepared task; returns the objective's summary per task.
    `engine` sweeps on Ray (the finish runs here, from the stored rows); by default,
    everything runs here."""
    from attnwh.ingest.runs.engine import EngineOptions, executor_for

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_sweep")
    objective.check(encoder, tasks, ablation)
    settings = worker_settings(ablation, objective, tasks)
    worker = sweep_worker(encoder, settings)
    executor = executor_for(engine, worker_spec(encoder, objective, settings), worker, db_path)
    singles = objective.configurations(encoder)
    # Ray workers take a batch's configurations in groups that share a first disabled layer.
    groups = config_groups(singles, encoder.num_layers, encoder.num_heads) if engine.engine == "ray" else None
    con = warehouse.connect(db_path)
    try:
        from attnwh.ingest.runs.ablation import insert_configs

        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        states = [open_task_run(con, model_ids, "ablation", encoder, task, options) for task in tasks]
        opened = []
        for task, state in zip(tasks, states):
            if state.status == "complete":
                continue
            insert_configs(con, state.run_id, ablation.mode, singles, 0)
            units = plan_units(
                task.run_key,
                task.encoded,
                task.example_ids,
                options.batch_size,
                done_by_group(con, state, groups, objective.table),
                labels=objective.labels(task),
                groups=groups,
            )
            # With groups, the bar counts examples once per group.
            note = f" (examples × {len(groups)} groups)" if groups else ""
            opened.append(
                OpenRun(task.run_key, objective.describe(task, ablation, len(singles)) + note, state.run_id, units)
            )
        store_stream(con, executor, opened, objective.table, on_start, on_batch)
        summaries = []
        sweep: AblationSweep = worker.sweep  # type: ignore[attr-defined]  # both objectives' workers hold one
        for task, state in zip(tasks, states):
            run = SweepRun(con, state.run_id, task, sweep, options, ablation, on_start or _ignore, on_batch or _ignore)
            if state.status == "complete":
                summaries.append(objective.summary(run, "already complete", 0, 0.0))
                continue
            stream = next(o for o in opened if o.run_id == state.run_id)
            started = time.perf_counter()
            with runs.marking_failure(con, state.run_id):
                objective.finish(run)
            seconds = stream.seconds + time.perf_counter() - started
            summaries.append(objective.summary(run, state.outcome, stream.n_todo, seconds))
        return summaries
    finally:
        con.close()


def shard_sweep(
    encoder: LoadedModel,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    ablation: AblationOptions,
    objective: Objective,
    engine: EngineOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> list[ShardSummary]:
    """Sweep static shard `engine.shard` of every task (its units: batches × groups of
    configurations) into `engine.shard_dir`. After `attnwh merge`, the same command without
    the shard options finishes each run from the merged rows."""
    from attnwh.ingest.runs.engine import write_shards

    objective.check(encoder, tasks, ablation)
    worker = sweep_worker(encoder, worker_settings(ablation, objective, tasks))
    groups = config_groups(objective.configurations(encoder), encoder.num_layers, encoder.num_heads)
    plans = [
        (
            run_info("ablation", {"model_id": encoder}, task, options),
            plan_units(
                task.run_key,
                task.encoded,
                task.example_ids,
                options.batch_size,
                {},
                labels=objective.labels(task),
                groups=groups,
            ),
        )
        for task in tasks
    ]
    return write_shards(engine, plans, worker, tasks, on_start, on_batch)


def worker_settings(ablation: AblationOptions, objective: Objective, tasks: Sequence[PreparedTask]) -> dict[str, Any]:
    """Everything a worker needs to sweep besides the model: the sweep's settings and the
    objective's."""
    return ablation.worker_settings() | {"objective": objective.name} | objective.worker_settings(tasks)


def worker_spec(encoder: LoadedModel, objective: Objective, settings: Mapping[str, Any]) -> WorkerSpec:
    """What a Ray worker loads to compute this sweep's units."""
    from attnwh.ingest.runs.engine import WorkerSpec

    return WorkerSpec(
        kind="ablation",
        models={"model_id": encoder.source},
        weights={"model_id": encoder.weights_hash},
        dtype=str(encoder.dtype).removeprefix("torch."),
        settings=settings,
        language_model=objective.language_model,
    )


def done_by_group(
    con: duckdb.DuckDBPyConnection, state: runs.RunState, groups: list[tuple[int, ...]] | None, table: str
) -> dict[int | None, frozenset[int]]:
    """Examples already swept: for the whole sweep (no groups), those marked done; per
    group, those with a row in `table` under the group's first configuration (a group's
    rows are stored together)."""
    if groups is None:
        return {None: state.done}
    found = con.execute(
        f"SELECT DISTINCT config_id, example_id FROM {table} WHERE run_id = ? AND config_id IN (SELECT unnest(?))",
        [state.run_id, [g[0] for g in groups]],
    ).fetchall()
    by_config: dict[int, set[int]] = {}
    for config_id, example_id in found:
        by_config.setdefault(config_id, set()).add(example_id)
    return {g: frozenset(by_config.get(ids[0], set())) for g, ids in enumerate(groups)}


def _ignore(*args: object) -> None:
    pass


def sweep_per_mode(
    encoder: LoadedModel,
    settings: Sequence[AblationOptions],
    options: IngestOptions,
    prepare: Callable[[AblationOptions], Any],
    ingest: Callable[..., list[Any]],
    shard: Callable[..., list[Any]],
    what: str,
    n_configs: int | None = None,
) -> Prepared:
    """One sweep per mode of `settings` as a prepared command (`prepare_task_sweep`,
    `prepare_loss_sweep`): `configs_per_pass` 0 resolved from the device (8 on a GPU, 1 on a
    CPU), each mode's tasks from `prepare(settings)`, stored by `ingest(db, encoder, tasks,
    options, settings, on_start, on_batch, engine)` or sharded by `shard(encoder, tasks,
    options, settings, engine, on_start, on_batch)` mode after mode; `what` heads the count of configurations in
    the header ("3 configurations per task" reads "{what} 3 configurations"): `n_configs`, by
    default the whole sweep's."""
    import dataclasses

    from attnwh.ingest.runs.prepared import Prepared, model_line

    per_pass = settings[0].configs_per_pass or (8 if encoder.device.type == "cuda" else 1)
    settings = [dataclasses.replace(s, configs_per_pass=per_pass) for s in settings]
    prepared = {s.mode: prepare(s) for s in settings}
    if n_configs is None:
        n_configs = 1 + len(encoder.attention_layers) * (encoder.num_heads + 1)
    modes = ", ".join(s.mode for s in settings)
    return Prepared(
        f"{model_line(encoder)}: {what.format(n=n_configs)} and mode ({modes}), {per_pass} per pass, "
        f"prefix cache {'on' if settings[0].prefix_cache else 'off'}",
        lambda db, engine, on_start, on_batch: [
            summary
            for s in settings
            for summary in ingest(db, encoder, prepared[s.mode], options, s, on_start, on_batch, engine)
        ],
        lambda engine, on_start, on_batch: [
            summary
            for s in settings
            for summary in shard(encoder, prepared[s.mode], options, s, engine, on_start, on_batch)
        ],
    )
