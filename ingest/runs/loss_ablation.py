"""`attnwh ingest ablation` on plain text: every head and every layer of a causal language
model disabled in turn, each configuration scored by its next-token loss (:mod:`lm_loss`).

A run (runs.kind = 'ablation', its identity naming the loss objective) is one model, text (or
probe set) and mode, in the two stages of every sweep (:mod:`attnwh.ingest.runs.sweep`), this
module being its objective (:class:`LossObjective`):

1. the sweep: the baseline, every head and every whole layer (1 + L×H + L configurations)
   unit by unit, through the same exact prefix cache (:class:`AblationSweep`, scoring each
   position's next-token cross-entropy). A unit's rows in ablation_losses (one per
   configuration, sequence and span: nats and tokens) are committed with its run_examples
   marks, so an interrupted run resumes at the next unit and never stores a row twice; the
   units run here, on Ray (``--engine ray``) or in static shards (``--shard``) merged later;
2. the finish: each configuration's mean loss per token against the baseline's on the same
   sequences, per span (a paired permutation test and a bootstrap interval, :mod:`lm_loss`),
   Benjamini–Hochberg across the head and layer configurations per span, into ablations
   (metric ``loss`` or ``loss:<span>``), in the transaction that completes the run.

Sequences may carry named spans (half-open token ranges: the probes' ``first`` and
``repeat`` halves, a needle's ``answer``): their loss is stored beside the whole sequence's
(span ``all``), with the tokens the model predicts greedily (``correct``: a pass key's answer
accuracy). There are no combinations, sinks or gradient importance on this objective; sets of
heads asked for (:mod:`head_sets`: the top heads of a role, random heads, a list) are
configurations of kind ``set`` after the sweep's, or, with ``sweep=False``, the only ones
beside the baseline; they are tested as the sweep's, left out of Benjamini–Hochberg.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.errors import DataError, UsageError
from attnwh.ingest.measures.ablation import AblationSweep, Configuration, sweep_configurations
from attnwh.ingest.measures.lm_loss import ALL, compare_losses, metric_name, span_sums, token_losses_and_hits
from attnwh.ingest.measures.significance import PairedResult, benjamini_hochberg
from attnwh.ingest.model.loading import LoadedModel, require_language_model
from attnwh.ingest.runs.ablation import AblationOptions, ablation_identity, check_ablation_fits, config_rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask, prepare_tasks
from attnwh.ingest.runs.shards import Part
from attnwh.ingest.runs.sweep import ProgressBatch, ProgressStart, SweepRun, ingest_sweep, shard_sweep, sweep_per_mode
from attnwh.ingest.runs.units import WorkUnit
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.sql import runs, warehouse

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.head_sets import HeadSets
    from attnwh.ingest.runs.prepared import Prepared
    from attnwh.ingest.sources.probes import ProbeSequence

OBJECTIVE = "loss"
# Bytes of the logits (and their log-softmax) one pass may hold: a batch is cut into pieces
# below it, the vocabulary being large (49,152 entries for SmolLM2).
LOGIT_BUDGET = 512 * 2**20

Spans = Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class LossTask:
    """A prepared task of a loss sweep, its sequences' named spans (task order; empty
    mappings for plain text, whose only span is the whole sequence) and the configurations
    scored (config_id order; None: the whole sweep)."""

    task: PreparedTask
    spans: list[Spans]
    configs: list[Configuration] | None = None


@dataclass(frozen=True)
class LossSummary:
    task: str
    mode: str
    run_id: int
    outcome: str  # complete, resumed, replaced, already complete
    n_sequences: int
    n_tokens: int  # tokens with a loss (span all)
    n_written: int  # sequences swept by this invocation
    baseline: float  # mean loss per token, nats
    worst_head: tuple[int, int, float, float] | None  # layer, head, delta, adjusted p: largest rise
    worst_layer: tuple[int, float, float] | None  # layer, delta, adjusted p
    n_significant: int  # heads and layers with adjusted p < 0.05
    spans: dict[str, float]  # named span: its baseline loss per token
    seconds: float
    # Per set of heads (label, with its draw): Δ loss and its unadjusted p on the span sets
    # are read on (answer where the sequences have one, else all), and the span's accuracy.
    sets: tuple[tuple[str, float, float, float | None], ...] = ()
    set_span: str = ALL
    baseline_accuracy: float | None = None


# What the loss objective needs a language model for, and what else to give.
NEEDS_LANGUAGE_MODEL = (
    "ablation on plain text (scored by next-token loss)",
    "give a language model, or a labelled task for a fine-tuned classifier",
)


def check_language_model(encoder: LoadedModel) -> None:
    """The loss objective reads a causal language model's next-token logits: refuse an
    encoder or a fine-tuned classifier in one line."""
    require_language_model(encoder, *NEEDS_LANGUAGE_MODEL)


def is_text(data: TaskData) -> bool:
    """Plain text (or probes) read for language modelling, which the loss objective scores."""
    return data.text is not None or data.dataset == PROBE_DATASET


PROBE_DATASET = "probe"


def probe_task(
    probes: Sequence[ProbeSequence], kind: str, settings: Mapping[str, object], texts: Sequence[str]
) -> TaskData:
    """Probe sequences as a task whose examples carry their token ids (`texts`: each decoded,
    for display); `settings` (seed, length, …) name its split, so other probes are other
    examples and another run."""
    split = ",".join(f"{k}={v}" for k, v in sorted(settings.items()))
    examples = tuple(
        Example(position=i, guid=f"{kind}:{i}", text_a=text, text_b=None, label=None, token_ids=p.token_ids)
        for i, (p, text) in enumerate(zip(probes, texts))
    )
    return TaskData(PROBE_DATASET, kind, split, examples, None, f"probe:{kind}:{split}")


# Depths of the needle probes, in turn (0: before the haystack, 1: right before the question).
NEEDLE_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def make_probes(
    encoder: LoadedModel,
    kinds: Sequence[str],
    n: int,
    repeat_length: int,
    context_length: int,
    documents: Sequence[str],
    seed: int,
    depths: Sequence[float] | None = None,
) -> list[tuple[TaskData, list[Spans]]]:
    """Per kind ("induction", "needle", "passkey"), `n` probes (`sources/probes.py`) as a task
    and their sequences' spans: induction halves of `repeat_length` random tokens; needles and
    pass keys in haystacks of `context_length` tokens cut from `documents`, at `depths` in turn
    (default :data:`NEEDLE_DEPTHS`)."""
    from attnwh.ingest.sources.probes import induction_probes, needle_probes, passkey_probes

    at = tuple(depths) if depths is not None else NEEDLE_DEPTHS
    made = []
    for kind in kinds:
        if kind == "induction":
            probes = induction_probes(encoder.tokenizer, n, repeat_length, seed)
            settings: dict[str, object] = {"n": n, "length": repeat_length, "seed": seed}
        elif kind in ("needle", "passkey"):
            build = needle_probes if kind == "needle" else passkey_probes
            try:
                probes = build(encoder.tokenizer, documents, n, context_length, at, seed)
            except UsageError as exc:  # the needle's length is the sweep's --max-length
                raise UsageError(str(exc).replace("--context-length", "--max-length")) from None
            settings = {"n": n, "length": context_length, "seed": seed}
            if at != NEEDLE_DEPTHS:  # other depths, other probes (the default keeps earlier runs' keys)
                settings["depths"] = "/".join(f"{d:g}" for d in at)
        else:
            raise ValueError(f"unknown probe kind {kind!r}")
        spans: list[Spans] = [p.segments for p in probes]
        texts = encoder.tokenizer.batch_decode([list(p.token_ids) for p in probes])
        made.append((probe_task(probes, kind, settings, texts), spans))
    return made


def prepare_loss_ablation(
    encoder: LoadedModel,
    tasks: Sequence[TaskData],
    options: IngestOptions,
    ablation: AblationOptions,
    spans: Sequence[Sequence[Spans] | None] | None = None,
    configs: Sequence[Configuration] | None = None,
    sets: HeadSets | None = None,
) -> list[LossTask]:
    """`prepare_tasks` for a loss sweep: plain text cut into sequences (or probes, with
    `spans`, one mapping per example of each task), the objective in the run key; `configs`
    (from `sets`, :mod:`head_sets`) the configurations scored where not the whole sweep, also
    in the run key. Refuses, before anything is written, a model that is no causal language
    model, a task that is no plain text and a sequence too short to have a loss."""
    check_language_model(encoder)
    for data in tasks:
        if not is_text(data):
            raise DataError(
                f"{data.task} is a labelled task: ablation scores a language model's loss on plain text "
                "(--text, or --task prose); give --prompt to read a labelled task through a prompt"
            )
    # No combinations or importance here: their settings stay out of the run key.
    identity = {k: v for k, v in ablation_identity(encoder, ablation).items() if k not in ("top_k", "importance")}
    identity["objective"] = OBJECTIVE
    if sets is not None and not sets.default and configs is not None:
        # Other sets, or none of the sweep, are another run; the plain sweep keeps its key.
        identity["configurations"] = {
            "sweep": sets.sweep,
            "sets": [[c.label, c.draw, c.roles_run, c.disabled] for c in configs if c.kind == "set"],
        }
    prepared = prepare_tasks(encoder, tasks, options, identity)
    out = []
    for i, task in enumerate(prepared):
        if int(task.encoded.n_tokens.max()) < 2:
            raise DataError(f"{task.data.task}: every sequence is a single token, so none has a next-token loss")
        given = spans[i] if spans is not None else None
        if given is not None:
            # After sampling (--limit), the examples left keep their spans by position.
            given = [given[e.position] for e in task.data.examples]
        prepared_task = dataclasses.replace(task, identity={**task.identity, "spans": given is not None})
        chosen = list(configs) if configs is not None else None
        out.append(
            LossTask(prepared_task, list(given) if given is not None else [{} for _ in task.data.examples], chosen)
        )
    check_ablation_fits(encoder, [t.task for t in out], dataclasses.replace(ablation, importance=False))
    return out


class LossWorker:
    """Computes units of a loss sweep: every configuration's nats, tokens and greedy hits per
    sequence and span; `configs` the configurations (default: the whole sweep)."""

    def __init__(
        self,
        sweep: AblationSweep,
        spans: Mapping[str, Sequence[Spans]],
        configs: Sequence[Configuration] | None = None,
    ) -> None:
        sweep.scorer = token_losses_and_hits
        self.sweep = sweep
        self.spans = spans
        encoder = sweep.encoder
        self.configs = (
            list(configs) if configs is not None else sweep_configurations(encoder.attention_layers, encoder.num_heads)
        )
        config: Any = encoder.model.config
        self.vocab = int(getattr(config, "vocab_size", 0) or len(encoder.tokenizer))

    def rows_per_pass(self, length: int) -> int:
        """Rows one pass may hold: the attention budget's, and the logits' (:data:`LOGIT_BUDGET`)."""
        per_row = length * self.vocab * 8 * self.sweep.configs_per_pass
        return max(1, min(self.sweep.max_rows(length), LOGIT_BUDGET // per_row))

    def compute(self, unit: WorkUnit) -> Part:
        encoder = self.sweep.encoder
        tick = time.perf_counter()
        spans = self.spans[unit.run_key]
        # A unit of one group of configurations (Ray, static shards) sweeps those alone.
        ids = np.asarray(unit.configs if unit.configs is not None else range(len(self.configs)), dtype=np.int32)
        configs = [self.configs[i] for i in ids]
        tables = []
        for piece in unit.split(self.rows_per_pass(int(unit.n_tokens.max()))):
            batch = piece.collate(encoder.tokenizer.pad_token_id, encoder.device)
            # (configurations, rows, 2 × positions): each row's losses, then its greedy hits.
            scored = self.sweep.logits(batch, configs)
            scored = scored.reshape(*scored.shape[:2], 2, -1)
            names, nats, tokens, correct = span_sums(
                scored[:, :, 0], piece.n_tokens.tolist(), [spans[p] for p in piece.positions], scored[:, :, 1]
            )
            tables.append(loss_rows(ids, piece.example_ids, names, nats, tokens, correct))
        return Part(
            unit.run_key,
            unit.name,
            {
                "ablation_configs": config_rows(self.sweep.mode, self.configs, 0),
                "ablation_losses": pa.concat_tables(tables),
                "run_examples": unit.done_rows(),
            },
            len(ids) == len(self.configs),
            time.perf_counter() - tick,
            str(encoder.device),
        )


def loss_rows(
    config_ids: np.ndarray,
    example_ids: np.ndarray,
    names: Sequence[str],
    nats: np.ndarray,
    tokens: np.ndarray,
    correct: np.ndarray,
) -> pa.Table:
    """ablation_losses rows (without run_id) of nats and greedy hits (configurations, spans,
    rows) and tokens (spans, rows); a span a sequence does not have is left out."""
    c, s, r = np.meshgrid(np.arange(len(config_ids)), np.arange(len(names)), np.arange(len(example_ids)), indexing="ij")
    # The whole sequence's row is always there (0 tokens for a sequence of one token).
    keep = np.broadcast_to((tokens > 0) | (np.asarray(names) == ALL)[:, None], nats.shape)
    return pa.table(
        {
            "config_id": pa.array(np.asarray(config_ids)[c[keep]], pa.int32()),
            "example_id": pa.array(np.asarray(example_ids)[r[keep]], pa.int64()),
            "span": pa.array(np.asarray(names, dtype=object)[s[keep]], pa.string()),
            "nats": pa.array(nats[keep], pa.float64()),
            "tokens": pa.array(np.broadcast_to(tokens[None], nats.shape)[keep], pa.int32()),
            "correct": pa.array(correct[keep], pa.int32()),
        }
    )


class LossObjective:
    """A sweep scored by next-token loss on text or probes, per sequence and named span."""

    name = "loss"
    table = "ablation_losses"
    language_model = True

    def __init__(self, loss_tasks: Sequence[LossTask]) -> None:
        self.spans = {t.task.run_key: t.spans for t in loss_tasks}
        # One sweep's tasks share their configurations (one list per prepare).
        self.configs = loss_tasks[0].configs if loss_tasks else None

    def configurations(self, encoder: LoadedModel) -> list[Configuration]:
        if self.configs is not None:
            return list(self.configs)
        return sweep_configurations(encoder.attention_layers, encoder.num_heads)

    def check(self, encoder: LoadedModel, tasks: Sequence[PreparedTask], ablation: AblationOptions) -> None:
        check_language_model(encoder)
        if any(task.identity.get("objective") != OBJECTIVE for task in tasks):
            raise ValueError("loss sweeps must be prepared by prepare_loss_ablation")

    def labels(self, task: PreparedTask) -> np.ndarray | None:
        return None

    def worker_settings(self, tasks: Sequence[PreparedTask]) -> dict[str, Any]:
        """Each run's spans, per sequence in task order, and the configurations scored."""
        return {"spans": {task.run_key: self.spans[task.run_key] for task in tasks}, "configs": self.configs}

    def describe(self, task: PreparedTask, ablation: AblationOptions, n_configs: int) -> str:
        return f"{task.data.task} · {ablation.mode} · loss: {n_configs} configurations"

    def finish(self, run: SweepRun) -> None:
        singles = self.configurations(run.sweep.encoder)
        finish_loss_run(run.con, run.run_id, run.task, singles, run.ablation, run.options.seed)

    def summary(self, run: SweepRun, outcome: str, n_written: int, seconds: float) -> LossSummary:
        return loss_summary(run.con, run.run_id, run.task, run.ablation, outcome, n_written, seconds)


def ingest_loss_ablation(
    db_path: Path,
    encoder: LoadedModel,
    loss_tasks: Sequence[LossTask],
    options: IngestOptions,
    ablation: AblationOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
    engine: EngineOptions | None = None,
) -> list[LossSummary]:
    """Sweep, test and store every task prepared by `prepare_loss_ablation` with the same
    settings; returns one summary per task. `engine` sweeps on Ray (the tests run here,
    from the stored losses); by default, everything runs here."""
    tasks = [t.task for t in loss_tasks]
    objective = LossObjective(loss_tasks)
    return ingest_sweep(db_path, encoder, tasks, options, ablation, objective, on_start, on_batch, engine)


def shard_loss_ablation(
    encoder: LoadedModel,
    loss_tasks: Sequence[LossTask],
    options: IngestOptions,
    ablation: AblationOptions,
    engine: EngineOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> list[ShardSummary]:
    """Sweep static shard `engine.shard` of every task into `engine.shard_dir`; after `attnwh
    merge`, the same command without the shard options tests and completes each run."""
    tasks = [t.task for t in loss_tasks]
    return shard_sweep(encoder, tasks, options, ablation, LossObjective(loss_tasks), engine, on_start, on_batch)


def stored_losses(
    con: duckdb.DuckDBPyConnection, run_id: int, example_ids: np.ndarray, n_configs: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per span: nats (configurations, sequences) and tokens (sequences), sequences in task
    order; a sequence without the span counts 0 tokens and 0 nats."""
    found = con.execute(
        "SELECT span, config_id, example_id, nats, tokens FROM ablation_losses WHERE run_id = ? AND config_id < ?",
        [run_id, n_configs],
    ).fetchnumpy()
    position = {eid: i for i, eid in enumerate(example_ids.tolist())}
    columns = np.array([position[e] for e in found["example_id"].tolist()], dtype=np.int64)
    out = {}
    for span in sorted(set(found["span"].tolist())):
        rows_of = found["span"] == span
        nats = np.zeros((n_configs, len(example_ids)))
        tokens = np.zeros(len(example_ids), dtype=np.int64)
        nats[found["config_id"][rows_of], columns[rows_of]] = found["nats"][rows_of]
        tokens[columns[rows_of]] = found["tokens"][rows_of]
        out[span] = (nats, tokens)
    if ALL not in out or (found["span"] == ALL).sum() != n_configs * len(example_ids):
        raise RuntimeError(f"ablation run {run_id} is missing losses; rerun with --replace")
    return out


def finish_loss_run(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    task: PreparedTask,
    singles: Sequence[Any],
    ablation: AblationOptions,
    seed: int,
) -> None:
    """Test every configuration against the baseline, per span, and complete the run, in one
    transaction (an interrupted finish is redone from the stored rows)."""
    started = time.perf_counter()
    tested = [i for i, c in enumerate(singles) if c.kind in ("head", "layer")]
    n = len(task.example_ids)
    score_rows = []
    for span, (nats, tokens) in stored_losses(con, run_id, task.example_ids, len(singles)).items():
        results = compare_losses(span, nats[0], nats, tokens, ablation.n_resamples, seed)
        adjusted = dict(zip(tested, benjamini_hochberg(np.array([results[i].p_value for i in tested]))))
        score_rows += [
            _score_row(run_id, i, r, adjusted.get(i), n, ablation.n_resamples) for i, r in enumerate(results)
        ]
    with warehouse.transaction(con):
        con.executemany("INSERT INTO ablations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", score_rows)
        runs.finish_run(con, run_id, "complete", time.perf_counter() - started)


def _score_row(
    run_id: int, config_id: int, r: PairedResult, p_adjusted: float | None, n: int, n_resamples: int
) -> tuple[object, ...]:
    scores = (r.metric, r.value, r.baseline, r.delta, r.ci_low, r.ci_high, r.p_value, p_adjusted, r.test)
    return (run_id, config_id, *scores, n, n_resamples)


def loss_summary(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    task: PreparedTask,
    ablation: AblationOptions,
    outcome: str,
    n_written: int,
    seconds: float,
) -> LossSummary:
    """The headline of a complete loss run, read back from the warehouse by the named query
    loss_ablation: the head and the layer whose disabling raised the loss most."""
    from attnwh.sql.queries import get_query, run_query

    found = run_query(con, get_query("loss_ablation"), {"run": run_id}).to_pylist()
    whole = [r for r in found if r["span"] == ALL]
    heads = [r for r in whole if r["kind"] == "head"]
    layers = [r for r in whole if r["kind"] == "layer"]
    worst_head = max(heads, key=lambda r: r["delta"], default=None)
    worst_layer = max(layers, key=lambda r: r["delta"], default=None)
    base = next((r for r in whole if r["kind"] == "baseline"), None)
    n_tokens = warehouse.one_row(
        con,
        "SELECT coalesce(sum(tokens), 0) FROM ablation_losses WHERE run_id = ? AND config_id = 0 AND span = ?",
        [run_id, ALL],
    )[0]
    spans = {r["span"]: r["loss"] for r in found if r["kind"] == "baseline" and r["span"] != ALL}
    # Sets are read on the answer where the sequences have one (probes), else on the whole text.
    set_span = "answer" if "answer" in spans else ALL
    on_span = [r for r in found if r["span"] == set_span]
    sets = tuple(
        (r["label"] + (f" #{r['draw']}" if r["draw"] is not None else ""), r["delta"], r["p_value"], r["accuracy"])
        for r in on_span
        if r["kind"] == "set"
    )
    base_accuracy = next((r["accuracy"] for r in on_span if r["kind"] == "baseline"), None)
    return LossSummary(
        task=task.data.task,
        mode=ablation.mode,
        run_id=run_id,
        outcome=outcome,
        n_sequences=len(task.example_ids),
        n_tokens=int(n_tokens),
        n_written=n_written,
        baseline=float("nan") if base is None else base["loss"],
        worst_head=None
        if worst_head is None
        else (worst_head["layer"], worst_head["head"], worst_head["delta"], worst_head["q_value"]),
        worst_layer=None
        if worst_layer is None
        else (worst_layer["layer"], worst_layer["delta"], worst_layer["q_value"]),
        n_significant=sum(1 for r in heads + layers if (r["q_value"] or 1.0) < 0.05),
        spans=spans,
        seconds=seconds,
        sets=sets,
        set_span=set_span,
        baseline_accuracy=base_accuracy,
    )


__all__ = [
    "OBJECTIVE",
    "LossSummary",
    "LossObjective",
    "LossTask",
    "LossWorker",
    "check_language_model",
    "make_probes",
    "ingest_loss_ablation",
    "is_text",
    "metric_name",
    "prepare_loss_ablation",
    "probe_task",
    "shard_loss_ablation",
]


def prepare_loss_sweep(
    model: str,
    tasks: Sequence[TaskData],
    settings: Sequence[AblationOptions],
    options: IngestOptions,
    *,
    device: str = "auto",
    probes: Sequence[str] = (),
    repeat_length: int | None = None,
    depths: Sequence[float] | None = None,
    sets: HeadSets | None = None,
    db: Path | None = None,
) -> Prepared:
    """`attnwh ingest ablation` scored by next-token loss, one sweep per mode of `settings`:
    on the plain-text `tasks`, or on `probes` (induction, needle, passkey; `options.limit` of
    each, 20 by default, needles and pass keys cut from `tasks`' documents at
    `options.max_length` tokens, by default the model's limit up to 256, at `depths` in turn),
    checked and set up: the model refused from its config before its weights load unless it is
    a causal language model, then loaded, the probes built and every sequence checked. `sets`
    (:mod:`head_sets`) adds sets of heads, or scores only them (a top set read from the
    warehouse at `db`). `configs_per_pass` 0 in `settings`: 8 on a GPU, 1 on a CPU."""
    from attnwh.ingest.model.loading import load_model, read_config, require_language_model_in_config

    require_language_model_in_config(read_config(model), model, *NEEDS_LANGUAGE_MODEL)  # before the weights load
    encoder = load_model(model, device, language_model=True)
    check_language_model(encoder)
    configs = None
    if sets is not None and not sets.default:
        from attnwh.ingest.runs import head_sets

        layers, heads = encoder.attention_layers, encoder.num_heads
        chosen = head_sets.set_configurations(sets, layers, heads, options.seed, db, encoder.weights_hash, model)
        configs = head_sets.configurations(sets, layers, heads, chosen)
    swept, spans = list(tasks), None
    if probes:
        documents = [e.text_a for t in tasks for e in t.examples]
        length = options.max_length or min(encoder.max_length, 256)
        if length > encoder.max_length:
            raise UsageError(f"--max-length {length} is over {encoder.name}'s limit of {encoder.max_length} tokens")
        made = make_probes(
            encoder, list(probes), options.limit or 20, repeat_length or 32, length, documents, options.seed, depths
        )
        swept, spans = [t for t, _ in made], [s for _, s in made]
    return sweep_per_mode(
        encoder,
        settings,
        options,
        lambda ablation: prepare_loss_ablation(encoder, swept, options, ablation, spans, configs, sets),
        ingest_loss_ablation,
        shard_loss_ablation,
        "next-token loss under {n} configurations per text",
        len(configs) if configs is not None else None,
    )
