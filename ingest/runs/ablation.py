"""`attnwh ingest ablation`: the full sweep of disabled heads and layers on a fine-tuned
classifier, stored with every per-example prediction and tested for significance.

A run (runs.kind = 'ablation') is one model, task and mode, in two stages:

1. the sweep: the baseline, every head and every whole layer (1 + L×H + L configurations),
   batch by batch. A batch's predictions under every configuration are committed together
   with its run_examples marks, so an interrupted run resumes at the next batch;
2. the finish, once every example is in: each configuration against the baseline on the
   same examples (:mod:`significance`), Benjamini–Hochberg across the head and layer
   configurations per metric; the combinations (every head whose own disabling helped, and
   the top-k curve: the k heads whose own disabling helped most, in that order); gradient
   importance per head. All of it is written in one transaction that completes the run; an
   interrupted finish is redone from the stored predictions.

Combinations are chosen on the same examples they are scored on, so their p-values are
optimistic; they are stored unadjusted and outside the correction.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import torch

from attnwh.errors import DataError, ModelError
from attnwh.ingest.encoder.encoding import collate, length_buckets
from attnwh.ingest.encoder.loading import EncoderModel
from attnwh.ingest.measures.ablation import (
    AblationSweep,
    Configuration,
    combination,
    head_importance_batch,
    sweep_configurations,
)
from attnwh.ingest.measures.metrics import metrics_for
from attnwh.ingest.measures.significance import PairedResult, benjamini_hochberg, compare_to_baseline
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask, model_identity, open_task_run, prepare_tasks
from attnwh.ingest.sources.examples import TaskData
from attnwh.sql import runs, warehouse


@dataclass(frozen=True)
class AblationOptions:
    mode: str = "uniform"
    top_k: int = 10  # length of the top-k curve
    n_resamples: int = 1000  # bootstrap resamples and permutations per configuration
    importance: bool = True  # gradient importance per head
    prefix_cache: bool = True  # False: every configuration runs the whole model (for checks)
    configs_per_pass: int = 1  # configurations sharing one forward pass (GPU)

    def identity(self) -> dict[str, object]:
        """What goes into the run key: settings that change the stored rows."""
        return {"mode": self.mode, "top_k": self.top_k, "n_resamples": self.n_resamples, "importance": self.importance}


@dataclass(frozen=True)
class AblationSummary:
    task: str
    mode: str
    run_id: int
    outcome: str  # complete, resumed, replaced, already complete
    n_examples: int
    n_written: int  # examples swept by this invocation
    metric: str
    baseline: float
    best_head: tuple[int, int, float, float] | None  # layer, head, delta, adjusted p
    best_layer: tuple[int, float, float] | None  # layer, delta, adjusted p
    n_helpful: int  # heads whose disabling raised the main metric
    n_significant: int  # of those, with adjusted p < 0.05
    helpful_delta: float | None  # all helpful heads disabled together
    seconds: float


ProgressStart = Callable[[str, int], None]
ProgressBatch = Callable[[int], None]
ALPHA = 0.05


def check_classifier(encoder: EncoderModel) -> None:
    """Ablation scores a task classifier: refuse a bare encoder before anything is written."""
    if not encoder.architecture.endswith("ForSequenceClassification"):
        raise ModelError(
            f"{encoder.name} has no classification head ({encoder.architecture}); ablation scores a fine-tuned "
            "classifier: make one with `attnwh finetune`"
        )


def gold_labels(encoder: EncoderModel, data: TaskData) -> tuple[np.ndarray, bool]:
    """The examples' gold labels in the model's own numbering (scores for regression), and
    whether the task is a regression. Label names must match the model's, or the model must
    have default names (LABEL_0, ...) and as many labels as the task."""
    # A transformers PretrainedConfig; nn.Module's __getattr__ types it as Tensor | Module.
    config: Any = encoder.model.config
    regression = config.num_labels == 1
    golds = [e.label for e in data.examples if e.label is not None]
    if len(golds) != len(data.examples):
        raise DataError(f"{data.task} ({data.split}) has unlabelled examples; ablation needs gold labels")
    task_labels = data.labels
    if regression != (task_labels is None):
        kind = "a regression" if regression else f"a {config.num_labels}-class"
        raise DataError(
            f"{encoder.name} is {kind} model, but {data.task} is {'not ' if regression else ''}a regression task"
        )
    if task_labels is None:  # a regression model, after the check above
        return np.array([float(label) for label in golds]), True
    names = [str(config.id2label[i]) for i in range(config.num_labels)]
    if set(names) == set(task_labels):
        index = {name: i for i, name in enumerate(names)}
    elif all(re.fullmatch(r"LABEL_\d+", n) for n in names) and len(names) == len(task_labels):
        index = {name: i for i, name in enumerate(task_labels)}
    else:
        raise DataError(
            f"the labels of {encoder.name} ({', '.join(names)}) do not match those of {data.task} "
            f"({', '.join(task_labels)}); was it fine-tuned on this task?"
        )
    return np.array([index[label] for label in golds]), False


def ablation_identity(encoder: EncoderModel, ablation: AblationOptions) -> dict[str, object]:
    """The part of an ablation run's identity that names the model, the kind and the
    settings: the one place they are merged."""
    return {**model_identity(encoder, "ablation"), **ablation.identity()}


def prepare_ablation(
    encoder: EncoderModel, tasks: Sequence[TaskData], options: IngestOptions, ablation: AblationOptions
) -> list[PreparedTask]:
    """`prepare_tasks` for an ablation sweep with these settings: the run key names them, so
    another mode or top-k is another run."""
    return prepare_tasks(encoder, tasks, options, ablation_identity(encoder, ablation))


def ingest_ablation(
    db_path: Path,
    encoder: EncoderModel,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    ablation: AblationOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> list[AblationSummary]:
    """Sweep, test and store every prepared task (prepared by `prepare_ablation` with the
    same settings); returns one summary per task."""
    wanted = ablation_identity(encoder, ablation)
    if any({k: task.identity.get(k) for k in wanted} != wanted for task in tasks):
        raise ValueError("ablation tasks must be prepared by prepare_ablation with the same model and settings")
    check_classifier(encoder)
    golds = [gold_labels(encoder, task.data) for task in tasks]  # all checked before writing
    sweep = AblationSweep(encoder, ablation.mode, ablation.prefix_cache, ablation.configs_per_pass)
    con = warehouse.connect(db_path)
    try:
        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        return [
            _run_task(con, model_ids, sweep, task, gold, options, ablation, on_start or _ignore, on_batch or _ignore)
            for task, gold in zip(tasks, golds)
        ]
    finally:
        con.close()


def _ignore(*args: object) -> None:
    pass


def _run_task(
    con: duckdb.DuckDBPyConnection,
    model_ids: dict[str, int],
    sweep: AblationSweep,
    task: PreparedTask,
    gold: tuple[np.ndarray, bool],
    options: IngestOptions,
    ablation: AblationOptions,
    on_start: ProgressStart,
    on_batch: ProgressBatch,
) -> AblationSummary:
    encoder = sweep.encoder
    labels, regression = gold
    state = open_task_run(con, model_ids, "ablation", encoder, task, options)
    singles = sweep_configurations(encoder.num_layers, encoder.num_heads)
    if state.status == "complete":
        return _summary(con, state.run_id, task, ablation, "already complete", 0, 0.0)
    _insert_configs(con, state.run_id, ablation.mode, singles, 0)
    todo = [i for i, eid in enumerate(task.example_ids.tolist()) if eid not in state.done]
    started = time.perf_counter()
    on_start(f"{task.data.task} · {ablation.mode}: {len(singles)} configurations", len(todo))
    with runs.marking_failure(con, state.run_id):
        for indices in length_buckets(task.encoded.n_tokens, todo, options.batch_size):
            tick = time.perf_counter()
            batch = collate(task.encoded, indices, encoder.tokenizer.pad_token_id, encoder.device)
            predictions = _predictions(sweep.logits(batch, singles), regression)
            ids = task.example_ids[indices]
            rows.write_batch(
                con,
                state.run_id,
                "ablation_predictions",
                _prediction_rows(state.run_id, 0, ids, predictions, labels[indices], regression),
                ids,
                task.encoded.n_tokens[indices],
                task.encoded.n_tokens_full[indices],
                time.perf_counter() - tick,
            )
            on_batch(len(indices))
        _finish(con, state.run_id, sweep, task, labels, regression, singles, options, ablation, on_start, on_batch)
    return _summary(con, state.run_id, task, ablation, state.outcome, len(todo), time.perf_counter() - started)


def _predictions(logits: np.ndarray, regression: bool) -> np.ndarray:
    """(configurations, batch) class ids, or scores for regression."""
    return logits[..., 0].astype(np.float64) if regression else logits.argmax(-1).astype(np.float64)


def _prediction_rows(
    run_id: int,
    first_config: int,
    example_ids: np.ndarray,
    predictions: np.ndarray,
    labels: np.ndarray,
    regression: bool,
) -> dict[str, np.ndarray]:
    configs, batch = predictions.shape
    return {
        "run_id": np.full(configs * batch, run_id, dtype=np.int32),
        "config_id": np.repeat(np.arange(first_config, first_config + configs, dtype=np.int32), batch),
        "example_id": np.tile(example_ids, configs),
        "prediction": predictions.reshape(-1),
        "correct": pa.nulls(configs * batch, pa.bool_()) if regression else (predictions == labels).reshape(-1),
    }


def _insert_configs(
    con: duckdb.DuckDBPyConnection, run_id: int, mode: str, configs: Sequence[Configuration], first: int
) -> None:
    table = pa.table(
        {
            "run_id": pa.array([run_id] * len(configs), pa.int32()),
            "config_id": pa.array(range(first, first + len(configs)), pa.int32()),
            "kind": [c.kind for c in configs],
            "mode": [mode] * len(configs),
            "layer": pa.array([c.layer for c in configs], pa.int16()),
            "head": pa.array([c.head for c in configs], pa.int16()),
            "k": pa.array([c.k for c in configs], pa.int16()),
            "n_disabled": pa.array([len(c.heads) for c in configs], pa.int16()),
            "disabled": [c.label for c in configs],
        }
    )
    # Idempotent: a resumed run finds its configurations already there.
    warehouse.insert_arrow(con, "ablation_configs", table, or_ignore=True)


def _stored_predictions(
    con: duckdb.DuckDBPyConnection, run_id: int, example_ids: np.ndarray, n_configs: int
) -> np.ndarray:
    """(configurations, examples) predictions of the sweep, examples in task order."""
    found = con.execute(
        "SELECT config_id, example_id, prediction FROM ablation_predictions WHERE run_id = ? AND config_id < ?",
        [run_id, n_configs],
    ).fetchnumpy()
    position = {eid: i for i, eid in enumerate(example_ids.tolist())}
    out = np.full((n_configs, len(example_ids)), np.nan)
    out[found["config_id"], [position[e] for e in found["example_id"].tolist()]] = found["prediction"]
    if np.isnan(out).any():
        raise RuntimeError(f"ablation run {run_id} is missing predictions; rerun with --replace")
    return out


def _finish(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    sweep: AblationSweep,
    task: PreparedTask,
    labels: np.ndarray,
    regression: bool,
    singles: list[Configuration],
    options: IngestOptions,
    ablation: AblationOptions,
    on_start: ProgressStart,
    on_batch: ProgressBatch,
) -> None:
    started = time.perf_counter()
    encoder = sweep.encoder
    metrics = metrics_for(task.data.task, regression)
    predictions = _stored_predictions(con, run_id, task.example_ids, len(singles))
    results = compare_to_baseline(metrics, labels, predictions[0], predictions, ablation.n_resamples, options.seed)
    tested = [i for i, c in enumerate(singles) if c.kind in ("head", "layer")]
    adjusted = {
        m: dict(zip(tested, benjamini_hochberg(np.array([results[i][j].p_value for i in tested]))))
        for j, m in enumerate(metrics)
    }

    # Combinations, ranked by each head's own effect on the main metric.
    heads = [i for i, c in enumerate(singles) if c.kind == "head"]
    ranked = sorted(heads, key=lambda i: (-results[i][0].delta, results[i][0].p_value, singles[i].heads))
    helpful = [i for i in ranked if results[i][0].delta > 0]
    combos = [
        combination("top_k", [singles[i].heads[0] for i in ranked[:k]], k=k)
        for k in range(1, min(ablation.top_k, len(ranked)) + 1)
    ]
    if len(helpful) >= 2:
        combos.insert(0, combination("helpful", [singles[i].heads[0] for i in helpful], k=len(helpful)))
    batches = list(length_buckets(task.encoded.n_tokens, range(len(labels)), options.batch_size))
    combo_predictions = np.empty((len(combos), len(labels)))
    if combos:
        on_start(f"{task.data.task} · {ablation.mode}: {len(combos)} combinations", len(labels))
        for indices in batches:
            batch = collate(task.encoded, indices, encoder.tokenizer.pad_token_id, encoder.device)
            combo_predictions[:, indices] = _predictions(sweep.logits(batch, combos), regression)
            on_batch(len(indices))
    combo_results = (
        compare_to_baseline(metrics, labels, predictions[0], combo_predictions, ablation.n_resamples, options.seed)
        if combos
        else []
    )

    importance = None
    if ablation.importance:
        on_start(f"{task.data.task}: gradient importance", len(labels))
        importance = np.zeros((encoder.num_layers, encoder.num_heads))
        for indices in batches:
            batch = collate(task.encoded, indices, encoder.tokenizer.pad_token_id, encoder.device)
            dtype = torch.float32 if regression else torch.long
            targets = torch.as_tensor(labels[indices], dtype=dtype, device=encoder.device)
            importance += head_importance_batch(encoder, batch, targets, regression)
            on_batch(len(indices))
        importance /= len(labels)

    n = len(labels)
    first_combo = len(singles)

    def score_row(config_id: int, r: PairedResult, p_adjusted: float | None) -> tuple[object, ...]:
        scores = (r.metric, r.value, r.baseline, r.delta, r.ci_low, r.ci_high, r.p_value, p_adjusted, r.test)
        return (run_id, config_id, *scores, n, ablation.n_resamples)

    # p_adjusted only for the single heads and layers, the family the correction is over.
    score_rows = [score_row(i, r, adjusted[r.metric].get(i)) for i, row in enumerate(results) for r in row]
    score_rows += [score_row(first_combo + i, r, None) for i, row in enumerate(combo_results) for r in row]
    with warehouse.transaction(con):
        _insert_configs(con, run_id, ablation.mode, combos, first_combo)
        if combos:
            warehouse.insert_arrow(
                con,
                "ablation_predictions",
                _prediction_rows(run_id, first_combo, task.example_ids, combo_predictions, labels, regression),
            )
        con.executemany("INSERT INTO ablations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", score_rows)
        if importance is not None:
            norms = np.linalg.norm(importance, axis=1, keepdims=True)
            normalized = np.divide(importance, norms, out=np.zeros_like(importance), where=norms > 0)
            con.executemany(
                "INSERT INTO head_importance VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (run_id, l, h, float(importance[l, h]), float(normalized[l, h]), n)
                    for l in range(encoder.num_layers)
                    for h in range(encoder.num_heads)
                ],
            )
        runs.finish_run(con, run_id, "complete", time.perf_counter() - started)


def _summary(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    task: PreparedTask,
    ablation: AblationOptions,
    outcome: str,
    n_written: int,
    seconds: float,
) -> AblationSummary:
    """The headline of a complete run on its main metric, read back from the warehouse by the
    named query ablation_summary (the choices of best head and layer are made there)."""
    from attnwh.sql.queries import get_query, run_query

    metric = metrics_for(task.data.task, task.data.labels is None)[0]
    found = run_query(con, get_query("ablation_summary"), {"run": run_id, "metric": metric}).to_pylist()
    row = found[0] if found else {}
    best_head = (
        None
        if row.get("best_head") is None
        else (row["best_head_layer"], row["best_head"], row["best_head_delta"], row["best_head_p_adjusted"])
    )
    best_layer = (
        None
        if row.get("best_layer") is None
        else (row["best_layer"], row["best_layer_delta"], row["best_layer_p_adjusted"])
    )
    return AblationSummary(
        task=task.data.task,
        mode=ablation.mode,
        run_id=run_id,
        outcome=outcome,
        n_examples=len(task.data.examples),
        n_written=n_written,
        metric=metric,
        baseline=row.get("baseline", float("nan")),
        best_head=best_head,
        best_layer=best_layer,
        n_helpful=row.get("n_helpful", 0),
        n_significant=row.get("n_significant", 0),
        helpful_delta=row.get("helpful_delta"),
        seconds=seconds,
    )
