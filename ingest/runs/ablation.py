"""`attnwh ingest ablation`: the full sweep of disabled heads and layers on a fine-tuned
classifier, stored with every per-example prediction and tested for significance.

A run (runs.kind = 'ablation') is one model, task and mode, in two stages:

1. the sweep: the baseline, every head and every whole layer (1 + L×H + L configurations),
   batch by batch. A batch's predictions under every configuration are committed together
   with its run_examples marks, so an interrupted run resumes at the next batch;
2. the finish, once every example is in: each configuration against the baseline on the
   same examples (:mod:`significance`), Benjamini–Hochberg across the head and layer
   configurations per metric; the combinations (every head whose own disabling helped, the
   top-k curve: the k heads whose own disabling helped most, in that order, and every sink
   head of the model, below); gradient importance per head. All of it is written in one
   transaction that completes the run; an interrupted finish is redone from the stored
   predictions.

The helpful heads and the top-k curve are chosen on the same examples they are scored on,
so their p-values are optimistic; they are stored unadjusted and outside the correction, as
is the sinks combination (chosen from attention statistics, not from the scores).

The sink heads (Gu et al. 2025: mean attention to [CLS], [SEP] or punctuation above
`SINK_EPS`) are read from a statistics run of the same weights that holds every example of
the sweep (named query sink_heads_of_run), averaged over exactly those examples: the sweep
runs no statistics of its own. Without such a run, or without a sink head, there is no
sinks combination, and the summary says why (`AblationSummary.sinks_note`).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa
import torch

from attnwh.errors import DataError, ModelError, UsageError
from attnwh.ingest.measures.ablation import (
    AblationSweep,
    Configuration,
    HeadDisabler,
    Scorer,
    classifier_scores,
    combination,
    head_importance_batch,
    sweep_configurations,
)
from attnwh.ingest.measures.metrics import metrics_for
from attnwh.ingest.measures.prompting import label_scores
from attnwh.ingest.measures.significance import PairedResult, benjamini_hochberg, compare_to_baseline
from attnwh.ingest.model import capture
from attnwh.ingest.model.encoding import collate, length_buckets
from attnwh.ingest.model.families import facts_of
from attnwh.ingest.model.loading import LoadedModel, require_every_layer
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask, longest_input, model_identity, prepare_tasks
from attnwh.ingest.runs.prompted import check_language_model, label_ids_of, prompted_task, task_template
from attnwh.ingest.runs.shards import Part
from attnwh.ingest.runs.sweep import ProgressBatch, ProgressStart, SweepRun, ingest_sweep, shard_sweep, sweep_per_mode
from attnwh.ingest.runs.units import WorkUnit
from attnwh.ingest.sources import prompts
from attnwh.ingest.sources.examples import TaskData
from attnwh.ingest.sources.prompts import Prompt, Template
from attnwh.sql import runs, warehouse

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.prepared import Prepared


@dataclass(frozen=True)
class AblationOptions:
    mode: str = "uniform"
    top_k: int = 10  # length of the top-k curve
    n_resamples: int = 1000  # bootstrap resamples and permutations per configuration
    importance: bool = True  # gradient importance per head
    prefix_cache: bool = True  # False: every configuration runs the whole model (for checks)
    configs_per_pass: int = 1  # configurations sharing one forward pass (GPU); 0 in a prepare: from the device
    attention_memory: int | None = None  # bytes of maps alive at once (capture.py); None: from the device

    def identity(self) -> dict[str, object]:
        """What goes into the run key: settings that change the stored rows."""
        return {"mode": self.mode, "top_k": self.top_k, "n_resamples": self.n_resamples, "importance": self.importance}

    def worker_settings(self) -> dict[str, Any]:
        """What a worker needs to sweep (`sweep_worker`)."""
        return {
            "mode": self.mode,
            "prefix_cache": self.prefix_cache,
            "configs_per_pass": self.configs_per_pass,
            "attention_memory": self.attention_memory,
        }


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
    sink_heads: int | None = None  # None: no statistics run of the model holds the sweep's examples
    sinks_delta: float | None = None  # every sink head disabled together (None: no sinks combination)
    sinks_p_value: float | None = None  # unadjusted, as for every combination
    sinks_note: str | None = None  # why there is no sinks combination


# Gu et al.'s threshold on a head's mean attention to a token kind (sink_heads, docs/metrics.md).
SINK_EPS = 0.3
NO_STATISTICS = (
    "no statistics run of this model holds these examples: run `attnwh ingest` on them first for the sinks combination"
)
NO_SINKS = (
    f"no head's mean attention to [CLS], [SEP] (a decoder's first token) or punctuation exceeds {SINK_EPS} on "
    "these examples: "
    "no sinks combination"
)
SINKS_LATER = (
    "a statistics run holding these examples came after this run was finished: --replace redoes it "
    "with the sinks combination"
)


ALPHA = 0.05


NO_HEAD = (
    "a language model has no classification head: give --prompt to read it through a task's prompt, score it by "
    "next-token loss on text (--text FILE, --task prose) or probes (--probe induction, --probe needle), or "
    "fine-tune it with `attnwh finetune`"
)


def check_head_in_config(config: Any, name: str | None) -> None:
    """What :func:`check_classifier` refuses that the config already says, before the weights
    load: a causal language model without a classification head, swept without --prompt."""
    architectures = list(config.architectures or [])
    classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    if not facts_of(config.model_type).encoder and not classifier:
        shown = architectures[0] if architectures else config.model_type
        raise ModelError(f"{name} ({shown}): {NO_HEAD}")


def check_classifier(encoder: LoadedModel, prompted: bool = False) -> None:
    """Ablation scores a task classifier, fine-tuned (an encoder's or a decoder's
    *ForSequenceClassification) or, with `prompted`, a causal language model read through a
    prompt: refuse anything else in one line before anything is written."""
    if prompted:
        check_language_model(encoder, " and sweep a fine-tuned classifier")
        return
    classifier = encoder.architecture.endswith("ForSequenceClassification")
    if encoder.causal and not classifier:
        raise ModelError(f"{encoder.name} ({encoder.architecture}): {NO_HEAD}")
    if not classifier:
        raise ModelError(
            f"{encoder.name} has no classification head ({encoder.architecture}); ablation scores a fine-tuned "
            "classifier: make one with `attnwh finetune`"
        )


def gold_labels(encoder: LoadedModel, data: TaskData, template: Template | None = None) -> tuple[np.ndarray, bool]:
    """The examples' gold labels in the model's own numbering (scores for regression), and
    whether the task is a regression. Label names must match the model's, or the model must
    have default names (LABEL_0, ...) and as many labels as the task. With a prompt's
    `template`, the label ids are the template's (its label words' order)."""
    # A transformers PretrainedConfig; nn.Module's __getattr__ types it as Tensor | Module.
    config: Any = encoder.model.config
    regression = config.num_labels == 1
    golds = [e.label for e in data.examples if e.label is not None]
    if len(golds) != len(data.examples):
        raise DataError(f"{data.task} ({data.split}) has unlabelled examples; ablation needs gold labels")
    if template is not None:
        return np.array(prompts.gold_labels(data, template)), False
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


def ablation_identity(encoder: LoadedModel, ablation: AblationOptions) -> dict[str, object]:
    """The part of an ablation run's identity that names the model, the kind and the
    settings: the one place they are merged."""
    return {**model_identity(encoder, "ablation"), **ablation.identity()}


def prepare_ablation(
    encoder: LoadedModel,
    tasks: Sequence[TaskData],
    options: IngestOptions,
    ablation: AblationOptions,
    prompts_by_task: Sequence[Prompt] | None = None,
) -> list[PreparedTask]:
    """`prepare_tasks` for an ablation sweep with these settings: the run key names them, so
    another mode or top-k is another run. With `prompts_by_task` (one per task, a causal LM),
    each example is its prompt's tokens and the prompt is part of the run key."""
    require_every_layer(encoder, "the ablation sweep")
    prepared = prepare_tasks(encoder, tasks, options, ablation_identity(encoder, ablation))
    if prompts_by_task is not None:
        prepared = [prompted_task(encoder, task, prompt, options) for task, prompt in zip(prepared, prompts_by_task)]
    check_ablation_fits(encoder, prepared, ablation)
    return prepared


def scorer_for(label_ids: Sequence[int] | None) -> Scorer:
    """What a configuration's scores are: a classifier's logits, or, with the label words'
    token ids, a prompted LM's logits of those words at each row's last real token."""
    if label_ids is None:
        return classifier_scores
    return functools.partial(label_scores, label_ids=tuple(label_ids))


def check_ablation_fits(encoder: LoadedModel, tasks: Sequence[PreparedTask], ablation: AblationOptions) -> None:
    """Refuse, before anything is written, inputs whose maps cannot fit the attention memory
    budget: the sweep's where the family keeps them whole (DeBERTa, MPNet), and gradient
    importance's, which keeps every layer's maps for the backward pass."""
    longest = longest_input(tasks)
    if not longest:
        return
    budget = ablation.attention_memory or capture.default_budget(encoder.device)
    heads, layers = encoder.num_heads, encoder.num_layers
    fix = "lower --max-length or raise --attention-memory"
    if capture.batch_rows(budget, heads, longest, HeadDisabler(ablation.mode), encoder.tiles) == 0:
        raise UsageError(
            f"an input of {longest} tokens needs more attention memory than the budget of {budget / 2**20:.0f} MiB "
            f"({encoder.family} keeps its maps whole here); {fix}"
        )
    if ablation.importance and layers * capture.map_bytes(1, heads, longest, longest) > budget:
        raise UsageError(
            f"gradient importance keeps every layer's maps of an input for the backward pass: {longest} tokens need "
            f"more than the attention memory budget of {budget / 2**20:.0f} MiB; give --no-importance, or {fix}"
        )


class TaskObjective:
    """A sweep scored by the task's metric on gold labels: a fine-tuned classifier's logits,
    or a causal language model's label words read through the task's prompt."""

    name = "task"
    table = "ablation_predictions"

    def __init__(self) -> None:
        self.language_model = False
        self._golds: dict[str, tuple[np.ndarray, bool]] = {}

    def check(self, encoder: LoadedModel, tasks: Sequence[PreparedTask], ablation: AblationOptions) -> None:
        """Gold labels of every task, all checked before anything is written."""
        wanted = ablation_identity(encoder, ablation)
        if any({k: task.identity.get(k) for k in wanted} != wanted for task in tasks):
            raise ValueError("ablation tasks must be prepared by prepare_ablation with the same model and settings")
        prompted = {task_template(task) is not None for task in tasks}
        if len(prompted) > 1:
            raise ValueError("the tasks of one sweep are all read through prompts or none is")
        check_classifier(encoder, prompted == {True})
        # A prompted sweep reads the label words' logits: its workers load the language-model head.
        self.language_model = prompted == {True}
        self._golds = {task.run_key: gold_labels(encoder, task.data, task_template(task)) for task in tasks}

    def labels(self, task: PreparedTask) -> np.ndarray | None:
        return self._golds[task.run_key][0]

    def configurations(self, encoder: LoadedModel) -> list[Configuration]:
        """The baseline, every head and every layer (the combinations are added at the finish)."""
        return sweep_configurations(encoder.attention_layers, encoder.num_heads)

    def worker_settings(self, tasks: Sequence[PreparedTask]) -> dict[str, Any]:
        """Each run's label words where a prompt is read."""
        return {"label_ids": {task.run_key: label_ids_of(task) for task in tasks}}

    def describe(self, task: PreparedTask, ablation: AblationOptions, n_configs: int) -> str:
        return f"{task.data.task} · {ablation.mode}: {n_configs} configurations"

    def finish(self, run: SweepRun) -> None:
        _finish(run, *self._golds[run.task.run_key])

    def summary(self, run: SweepRun, outcome: str, n_written: int, seconds: float) -> AblationSummary:
        return _summary(run.con, run.run_id, run.task, run.ablation, outcome, n_written, seconds)


def ingest_ablation(
    db_path: Path,
    encoder: LoadedModel,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    ablation: AblationOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
    engine: EngineOptions | None = None,
) -> list[AblationSummary]:
    """Sweep, test and store every prepared task (prepared by `prepare_ablation` with the
    same settings); returns one summary per task. `engine` sweeps on Ray (the finish runs
    here, from the stored predictions); by default, everything runs here."""
    return ingest_sweep(db_path, encoder, tasks, options, ablation, TaskObjective(), on_start, on_batch, engine)


def shard_ablation(
    encoder: LoadedModel,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    ablation: AblationOptions,
    engine: EngineOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> list[ShardSummary]:
    """Sweep static shard `engine.shard` of every task into `engine.shard_dir`. After `attnwh
    merge`, the same command without --shard finishes each run (significance, combinations,
    importance)."""
    return shard_sweep(encoder, tasks, options, ablation, TaskObjective(), engine, on_start, on_batch)


class SweepWorker:
    """Computes units of an ablation sweep: predictions under the unit's configurations."""

    def __init__(self, sweep: AblationSweep, label_ids: Mapping[str, Sequence[int] | None] | None = None) -> None:
        self.sweep = sweep
        encoder = sweep.encoder
        self.configs = sweep_configurations(encoder.attention_layers, encoder.num_heads)
        config: Any = encoder.model.config
        # Each run's label words (by run key) where it reads a prompt: scored by them, never a regression.
        self.label_ids = dict(label_ids or {})
        self.regression = config.num_labels == 1 and not any(self.label_ids.values())

    def compute(self, unit: WorkUnit) -> Part:
        encoder = self.sweep.encoder
        tick = time.perf_counter()
        ids = list(unit.configs) if unit.configs is not None else list(range(len(self.configs)))
        if unit.labels is None:
            raise ValueError("an ablation unit needs its gold labels")
        configs = [self.configs[i] for i in ids]
        self.sweep.scorer = scorer_for(self.label_ids.get(unit.run_key))
        # A batch of long inputs is swept in pieces whose maps fit the attention memory budget.
        pieces = unit.split(self.sweep.max_rows(int(unit.n_tokens.max())))
        logits = np.concatenate(
            [self.sweep.logits(p.collate(encoder.tokenizer.pad_token_id, encoder.device), configs) for p in pieces],
            axis=1,
        )
        predictions = _predictions(logits, self.regression)
        tables = {
            "ablation_configs": config_rows(self.sweep.mode, self.configs, 0),
            "ablation_predictions": prediction_rows(ids, unit.example_ids, predictions, unit.labels, self.regression),
            "run_examples": unit.done_rows(),
        }
        covers = len(ids) == len(self.configs)
        return Part(unit.run_key, unit.name, tables, covers, time.perf_counter() - tick, str(encoder.device))


def _predictions(logits: np.ndarray, regression: bool) -> np.ndarray:
    """(configurations, batch) class ids, or scores for regression."""
    return logits[..., 0].astype(np.float64) if regression else logits.argmax(-1).astype(np.float64)


def prediction_rows(
    config_ids: Sequence[int],
    example_ids: np.ndarray,
    predictions: np.ndarray,
    labels: np.ndarray,
    regression: bool,
) -> pa.Table:
    """ablation_predictions rows (without run_id) of predictions shaped (configurations,
    batch), the configurations being `config_ids`."""
    configs, batch = predictions.shape
    return pa.table(
        {
            "config_id": np.repeat(np.asarray(config_ids, dtype=np.int32), batch),
            "example_id": np.tile(np.asarray(example_ids, dtype=np.int64), configs),
            "prediction": predictions.reshape(-1),
            "correct": pa.nulls(configs * batch, pa.bool_()) if regression else (predictions == labels).reshape(-1),
        }
    )


def config_rows(mode: str, configs: Sequence[Configuration], first: int) -> pa.Table:
    """ablation_configs rows (without run_id), numbered from `first`."""
    return pa.table(
        {
            "config_id": pa.array(range(first, first + len(configs)), pa.int32()),
            "kind": [c.kind for c in configs],
            "mode": [mode] * len(configs),
            "layer": pa.array([c.layer for c in configs], pa.int16()),
            "head": pa.array([c.head for c in configs], pa.int16()),
            "k": pa.array([c.k for c in configs], pa.int16()),
            "n_disabled": pa.array([len(c.heads) for c in configs], pa.int16()),
            "disabled": [c.disabled for c in configs],
            "label": pa.array([c.label for c in configs], pa.string()),
            "draw": pa.array([c.draw for c in configs], pa.int16()),
            "roles_run": pa.array([c.roles_run for c in configs], pa.int32()),
        }
    )


def insert_configs(
    con: duckdb.DuckDBPyConnection, run_id: int, mode: str, configs: Sequence[Configuration], first: int
) -> None:
    # Idempotent: a resumed run finds its configurations already there.
    warehouse.insert_arrow(
        con, "ablation_configs", rows.with_run_id(config_rows(mode, configs, first), run_id), or_ignore=True
    )


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


def _finish(run: SweepRun, labels: np.ndarray, regression: bool) -> None:
    """Significance, the combinations and gradient importance of a whole sweep, in the
    transaction that completes the run (redone from the stored predictions if interrupted)."""
    con, run_id, sweep, task = run.con, run.run_id, run.sweep, run.task
    options, ablation, on_start, on_batch = run.options, run.ablation, run.on_start, run.on_batch
    singles = sweep_configurations(sweep.encoder.attention_layers, sweep.encoder.num_heads)
    started = time.perf_counter()
    encoder = sweep.encoder
    scorer = sweep.scorer = scorer_for(label_ids_of(task))
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
    # Last, so that the other combinations keep the configuration ids they had before it.
    sinks = sink_heads(con, run_id)
    if sinks:
        combos.append(combination("sinks", sinks, k=len(sinks)))
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
            importance += head_importance_batch(encoder, batch, targets, regression, scorer)
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
        insert_configs(con, run_id, ablation.mode, combos, first_combo)
        if combos:
            warehouse.insert_arrow(
                con,
                "ablation_predictions",
                rows.with_run_id(
                    prediction_rows(
                        range(first_combo, first_combo + len(combos)),
                        task.example_ids,
                        combo_predictions,
                        labels,
                        regression,
                    ),
                    run_id,
                ),
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


def sink_heads(con: duckdb.DuckDBPyConnection, run_id: int) -> list[tuple[int, int]] | None:
    """The (layer, head) pairs the named query sink_heads_of_run marks as sink heads of
    ablation run `run_id` at `SINK_EPS`; None when no statistics run holds its examples."""
    from attnwh.sql.queries import get_query, run_query

    found = run_query(con, get_query("sink_heads_of_run"), {"run": run_id, "eps": SINK_EPS}).to_pylist()
    if not found:
        return None
    return [(r["layer"], r["head"]) for r in found if r["sink"]]


def _sinks_summary(
    con: duckdb.DuckDBPyConnection, run_id: int, metric: str
) -> tuple[int | None, float | None, float | None, str | None]:
    """Sink heads, the stored sinks combination's delta and p on `metric`, and, without a
    combination, why: read back, so a run found complete says the same as when it finished."""
    stored = warehouse.first_row(
        con,
        "SELECT n_disabled, delta, p_value FROM ablation_results WHERE run_id = ? AND kind = 'sinks' AND metric = ?",
        [run_id, metric],
    )
    if stored is not None:
        return stored[0], stored[1], stored[2], None
    heads = sink_heads(con, run_id)
    if heads is None:
        return None, None, None, NO_STATISTICS
    return len(heads), None, None, NO_SINKS if not heads else SINKS_LATER


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
    n_sinks, sinks_delta, sinks_p, sinks_note = _sinks_summary(con, run_id, metric)
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
        sink_heads=n_sinks,
        sinks_delta=sinks_delta,
        sinks_p_value=sinks_p,
        sinks_note=sinks_note,
    )


def prepare_task_sweep(
    model: str | LoadedModel,
    loaded: Sequence[TaskData] | None,
    settings: Sequence[AblationOptions],
    options: IngestOptions,
    *,
    device: str = "auto",
    prompted: bool = False,
    load_sample: Callable[[list[str] | None], list[TaskData]] | None = None,
    make_prompts: Callable[[Sequence[TaskData]], list[Any]] | None = None,
) -> Prepared:
    """`attnwh ingest ablation` of a classifier (or, `prompted`, of a causal language model read
    through each task's prompt), one sweep per mode of `settings`, checked and set up: the
    classifier head refused from the config before the weights load, then the model loaded and
    checked; `loaded` None (the bundled sample without --task): `load_sample` gives the task the
    model was fine-tuned on by `attnwh finetune`, else both sample tasks; `make_prompts` renders
    every task's prompt; every task's gold labels checked before anything is written.
    `configs_per_pass` 0 in `settings`: 8 on a GPU, 1 on a CPU. `model` may be loaded already."""

    from attnwh.ingest.model.loading import read_config
    from attnwh.ingest.runs.prepared import loaded as loaded_model
    from attnwh.ingest.sources.files import SAMPLE_TASKS

    if not prompted and isinstance(model, str):
        check_head_in_config(read_config(model), model)  # before the weights load
    encoder = loaded_model(model, device, language_model=prompted)
    check_classifier(encoder, prompted)
    if loaded is None:
        assert load_sample is not None
        # On the bundled sample, a model made by `attnwh finetune` is swept on its own task.
        tuned_on = (encoder.lineage or {}).get("task")
        loaded = load_sample([tuned_on] if tuned_on in SAMPLE_TASKS else None)
    prompts = make_prompts(loaded) if make_prompts is not None else None

    def prepare(ablation: AblationOptions) -> list[PreparedTask]:
        tasks = prepare_ablation(encoder, loaded, options, ablation, prompts)
        for p in tasks:
            gold_labels(encoder, p.data, task_template(p))  # label mismatches fail before anything is written
        return tasks

    what = "{n} configurations per task"
    return sweep_per_mode(encoder, settings, options, prepare, ingest_ablation, shard_ablation, what)
