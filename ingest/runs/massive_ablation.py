"""Storing `attnwh ingest massive-ablation` runs: a decoder's massive activations (Sun et al.
2024) set to zero and to their mean at the layer where they first appear, and the next-token
loss of each sequence under each (`attnwh.ingest.measures.massive_ablation`).

The massive activations are found by scanning the run's own sequences, not read from a stored
statistics run: the mean intervention needs each entry's *signed* value in every sequence,
and massive_activations keeps only magnitudes, of the top 8 entries of each example and
layer, on whatever examples that run read. The scan is one forward pass per sequence; it
comes first, before anything is written, so a model without a massive activation at the
thresholds is refused with nothing stored. It is repeated when an interrupted run resumes
(its result is a function of the weights, the sequences and the thresholds, all in the run's
key), but not when a complete run is kept.

The losses then go through the engine (:mod:`attnwh.ingest.runs.engine`) unit by unit, as the
restriction's ranking does: each unit's three losses per sequence committed with its done
marks, so an interrupted run resumes at the next unit, `--engine ray` computes them on Ray,
static shards (`--shard I/N`) are merged into the run. The tests over sequences and the run's
tables then complete the run in one transaction. A stored run with the same identity
(weights, sequences, thresholds) is kept unless `replace`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.errors import AttnwhError, DataError, UsageError
from attnwh.ingest.measures import lm_loss
from attnwh.ingest.measures import massive_ablation as ma
from attnwh.ingest.model.encoding import EncodedTask
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask
from attnwh.ingest.runs.prepared import OnBatch, OnStart, Prepared
from attnwh.ingest.runs.restriction import RestrictionOptions, Text, cut_text, read_text
from attnwh.ingest.runs.shards import Part
from attnwh.ingest.sources.examples import Example, TaskData

if TYPE_CHECKING:
    from pathlib import Path

    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.units import WorkUnit

KIND = "massive_ablation"
# Bootstrap resamples of the sequences and their seed, as the restriction's.
RESAMPLES = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
# The fewest sequences a run takes: the means and the tests are over sequences.
MIN_SEQUENCES = 2


@dataclass(frozen=True)
class MassiveAblationOptions:
    """Settings of a run: the thresholds of a massive entry (|h| > `min_magnitude` and >
    `ratio` × its layer's median |h|), the share of sequences it must be massive in at its
    first layer, `context_length` tokens per sequence, the first `limit` sequences,
    `batch_size` sequences per forward pass."""

    min_magnitude: float = ma.MIN_MAGNITUDE
    ratio: float = ma.RATIO
    min_share: float = ma.MIN_SHARE
    context_length: int = 1024
    limit: int | None = None
    batch_size: int = 4
    replace: bool = False
    command: str | None = None


@dataclass(frozen=True)
class Compared:
    """One intervention against the model as it is, over the same sequences."""

    intervention: str
    loss: float  # nats per token
    delta: float
    ci_low: float | None  # None for the model as it is
    ci_high: float | None
    p_value: float | None


@dataclass(frozen=True)
class MassiveAblationSummary:
    run_id: int
    outcome: str  # "complete", "resumed", "replaced" or "already complete"
    entries: list[ma.Entry] | None  # None when already complete
    compared: list[Compared] | None
    seconds: float = 0.0


def run_identity(encoder: LoadedModel, text: Text, options: MassiveAblationOptions) -> dict:
    """What a run's key is made of (`attnwh.sql.runs.run_key`): the sequences' tokens stand for
    the text, the context length, --limit and the tokenizer together."""
    digest = hashlib.blake2b(json.dumps(text.sequences).encode(), digest_size=16).hexdigest()
    return {
        "kind": KIND,
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "sequences": digest,
        "min_magnitude": options.min_magnitude,
        "ratio": options.ratio,
        "min_share": options.min_share,
        "scan_top_k": ma.SCAN_TOP_K,
        "context_length": options.context_length,
        "limit": options.limit,
        "resamples": RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        "dtype": str(encoder.dtype),
    }


def sequences_task(encoder: LoadedModel, text: Text, options: MassiveAblationOptions) -> PreparedTask:
    """The text's sequences as one task of the engine: examples with their token ids, decoded
    for display; example i is sequence i."""
    texts = encoder.tokenizer.batch_decode([list(s) for s in text.sequences], skip_special_tokens=True)
    examples = tuple(
        Example(position=i, guid=f"text-{i}", text_a=t, text_b=None, label=None, token_ids=tuple(s))
        for i, (s, t) in enumerate(zip(text.sequences, texts, strict=True))
    )
    data = TaskData(text.dataset, text.task, text.split, examples, None, text.source)
    lengths = np.array([len(s) for s in text.sequences], dtype=np.int64)
    encoded = EncodedTask(tuple(np.asarray(s, dtype=np.int64) for s in text.sequences), None, lengths)
    ids = np.array([rows.example_id(data, e) for e in examples], dtype=np.int64)
    return PreparedTask(data, encoded, ids, options.context_length, run_identity(encoder, text, options))


def _ingest_options(options: MassiveAblationOptions) -> IngestOptions:
    return IngestOptions(
        limit=options.limit,
        seed=BOOTSTRAP_SEED,
        batch_size=options.batch_size,
        replace=options.replace,
        command=options.command,
        thumbnails=0,
    )


class MassiveAblationWorker:
    """Computes units of a run: each sequence's summed loss and tokens under every
    intervention, as massive_ablation_losses rows."""

    def __init__(self, encoder: LoadedModel, entries: Sequence[ma.Entry], sites: dict[str, list[list[ma.Site]]]):
        self.encoder, self.entries, self.sites = encoder, list(entries), sites

    def compute(self, unit: WorkUnit) -> Part:
        from attnwh.ingest.measures.ablation import sweep_inputs

        encoder = self.encoder
        tick = time.perf_counter()
        pad = encoder.tokenizer.pad_token_id
        batch = unit.collate(0 if pad is None else int(pad), encoder.device)
        sites = [self.sites[unit.run_key][i] for i in unit.positions]
        nats, tokens = ma.intervention_losses(encoder.model, sweep_inputs(encoder.model, batch), self.entries, sites)
        k, r = (a.ravel() for a in np.meshgrid(np.arange(len(ma.INTERVENTIONS)), np.arange(len(sites)), indexing="ij"))
        losses = pa.table(
            {
                "intervention": [ma.INTERVENTIONS[i] for i in k],
                "sequence": pa.array([unit.positions[i] for i in r], pa.int32()),
                "example_id": pa.array(unit.example_ids[r], pa.int64()),
                "nats": pa.array(nats[k, r], pa.float64()),
                "tokens": pa.array(tokens[r], pa.int32()),
            }
        )
        tables = {"massive_ablation_losses": losses, "run_examples": unit.done_rows()}
        return Part(unit.run_key, unit.name, tables, True, time.perf_counter() - tick, str(encoder.device))


def scan_task(
    encoder: LoadedModel,
    task: PreparedTask,
    options: MassiveAblationOptions,
    on_start: OnStart | None = None,
    on_batch: OnBatch | None = None,
) -> tuple[list[ma.Entry], list[list[ma.Site]], list[ma.Found]]:
    """The task's sequences scanned batch by batch (a bar of its own), the massive activations
    chosen from what was found; UsageError in one line where there is none."""
    from attnwh.ingest.measures.ablation import sweep_inputs
    from attnwh.ingest.model.encoding import TokenKinds
    from attnwh.ingest.runs.units import plan_units

    kinds = TokenKinds(encoder.tokenizer, causal=True)
    pad = encoder.tokenizer.pad_token_id
    units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {})
    if on_start:
        on_start(f"{task.data.task} · scan for massive activations", len(task.example_ids))
    found: list[ma.Found] = []
    largest: list[ma.Largest] = []
    for unit in units:
        batch = unit.collate(0 if pad is None else int(pad), encoder.device)
        masks = tuple(m.to(encoder.device) for m in kinds.masks(batch["input_ids"], batch["attention_mask"]))
        inputs = sweep_inputs(encoder.model, batch)
        more, best = ma.scan_batch(encoder.model, inputs, masks, unit.positions, options.min_magnitude, options.ratio)  # type: ignore[arg-type]
        found += more
        largest += [best] if best is not None else []
        if on_batch:
            on_batch(len(unit.positions))
    n = len(task.example_ids)
    entries, sites = ma.choose_entries(found, n, options.min_share)
    if not entries:
        raise UsageError(_none_found(encoder, options, n, max(largest, key=lambda b: b.ratio, default=None)))
    return entries, sites, found


def _none_found(encoder: LoadedModel, options: MassiveAblationOptions, n: int, best: ma.Largest | None) -> str:
    seen = (
        f"; the largest found: |h| = {best.magnitude:,.1f} at layer {best.layer}, dim {best.dim} ({best.token_kind}), "
        f"{best.ratio:,.0f} × its layer's median"
        if best is not None
        else ""
    )
    return (
        f"{encoder.name} has no massive activation at the thresholds: no hidden dimension of a layer's output "
        f"exceeds {options.min_magnitude:g} and {options.ratio:g} × the layer's median |h| on the same kind of "
        f"token in at least {options.min_share:.0%} of the {n} sequences{seen}; nothing to set to zero or to its "
        "mean (lower --min-magnitude or --ratio to look for smaller ones)"
    )


def prepare_massive_ablation(
    model: str,
    text: str | None,
    options: MassiveAblationOptions,
    device: str = "auto",
    context_length: int | None = None,
) -> Prepared:
    """`attnwh ingest massive-ablation` of `model` on `text`, checked and set up: the text read (a
    missing file fails before the model loads), the model refused from its config before its
    weights load unless it is a causal language model, then loaded; the context length (by
    default 1024, or the model's limit if lower) checked against the model's limit; the text
    cut into sequences as the restriction cuts it."""
    from attnwh.ingest.model.loading import load_language_model
    from attnwh.ingest.runs.prepared import model_line

    data = read_text(text)
    what = "setting its massive activations to zero and to their mean"
    encoder = load_language_model(model, device, what)
    ma.decoder_layers(encoder.model)  # the hooks need one module per layer; a ValueError otherwise
    length = context_length or min(1024, encoder.max_length)
    if length > encoder.max_length:
        raise UsageError(f"--context-length {length}: {model} reads at most {encoder.max_length} tokens")
    options = replace(options, context_length=length)
    cut = cut_text(data, encoder.tokenizer, RestrictionOptions(context_length=length, limit=options.limit, needles=0))
    if len(cut.sequences) < MIN_SEQUENCES:
        raise DataError(
            f"{cut.source}: its text makes {len(cut.sequences)} sequence of up to {length} tokens; a massive "
            f"activation's mean and the tests are over sequences, so at least {MIN_SEQUENCES} are needed: give a "
            "longer text or a shorter --context-length"
        )
    header = (
        f"{model_line(encoder)}: {len(cut.sequences)} sequences of up to {length} tokens; massive when |h| > "
        f"{options.min_magnitude:g} and > {options.ratio:g} × the median in ≥ {options.min_share:.0%} of them"
    )
    return Prepared.one_run(header, ingest_massive_ablation, shard_massive_ablation, encoder, cut, options)


def _spec(encoder: LoadedModel, entries: Sequence[ma.Entry], sites: dict[str, list[list[ma.Site]]]) -> Any:
    from attnwh.ingest.runs.engine import WorkerSpec

    return WorkerSpec(
        kind=KIND,
        models={"model_id": encoder.source},
        weights={"model_id": encoder.weights_hash},
        dtype=str(encoder.dtype).removeprefix("torch."),
        settings={"entries": list(entries), "sites": sites},
        language_model=True,
    )


def ingest_massive_ablation(
    db_path: Path,
    encoder: LoadedModel,
    text: Text,
    options: MassiveAblationOptions,
    on_start: OnStart | None = None,
    on_batch: OnBatch | None = None,
    engine: EngineOptions | None = None,
) -> MassiveAblationSummary:
    """Find `encoder`'s massive activations on the text's sequences, measure every sequence's
    loss as it is, with them set to zero and set to their mean, test both against the model
    as it is and store it all. A complete run with the same identity is kept (unless
    `options.replace`) without scanning; an interrupted one resumes where it stopped."""
    from attnwh.ingest.runs.engine import EngineOptions, executor_for
    from attnwh.ingest.runs.loop import OpenRun, open_task_run, store_stream
    from attnwh.ingest.runs.units import plan_units
    from attnwh.sql import runs, warehouse

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_massive_ablation")
    task = sequences_task(encoder, text, options)
    con = warehouse.connect(db_path)
    try:
        stored = runs.find_run(con, KIND, task.identity)
        if stored is not None and stored.status == "complete" and not options.replace:
            return MassiveAblationSummary(stored.run_id, "already complete", None, None)
        started = time.perf_counter()
        entries, sites, _ = scan_task(encoder, task, options, on_start, on_batch)  # refuses before any write
        scanned = time.perf_counter() - started
        worker = MassiveAblationWorker(encoder, entries, {task.run_key: sites})
        executor = executor_for(engine, _spec(encoder, entries, {task.run_key: sites}), worker, db_path)
        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        state = open_task_run(con, model_ids, KIND, encoder, task, _ingest_options(options))
        units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {None: state.done})
        label = f"{text.task} · {len(ma.INTERVENTIONS)} interventions"
        opened = OpenRun(task.run_key, label, state.run_id, units)
        store_stream(con, executor, [opened], "massive_ablation_losses", on_start, on_batch)
        started = time.perf_counter()
        with runs.marking_failure(con, state.run_id):
            compared = _finish(con, state.run_id, task, entries, sites, options, scanned)
        seconds = scanned + opened.seconds + time.perf_counter() - started
        return MassiveAblationSummary(state.run_id, state.outcome, entries, compared, seconds)
    finally:
        con.close()


def shard_massive_ablation(
    encoder: LoadedModel,
    text: Text,
    options: MassiveAblationOptions,
    engine: EngineOptions,
    on_start: OnStart | None = None,
    on_batch: OnBatch | None = None,
) -> list[ShardSummary]:
    """The scan (every shard makes it whole: the means are over all the sequences), then the
    losses of the units of static shard `engine.shard` into `engine.shard_dir`; after `attnwh
    merge`, the same command without the shard options tests and completes the run."""
    from attnwh.ingest.runs.engine import write_shards
    from attnwh.ingest.runs.loop import run_info
    from attnwh.ingest.runs.units import plan_units

    task = sequences_task(encoder, text, options)
    entries, sites, _ = scan_task(encoder, task, options, on_start, on_batch)
    worker = MassiveAblationWorker(encoder, entries, {task.run_key: sites})
    units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {})
    info = run_info(KIND, {"model_id": encoder}, task, _ingest_options(options))
    return write_shards(engine, [(info, units)], worker, [task], on_start, on_batch)


def compare(nats: np.ndarray, tokens: np.ndarray) -> list[Compared]:
    """Each intervention's loss (nats per token, Σ nats / Σ tokens) from `nats` (interventions,
    sequences) in the order of :data:`INTERVENTIONS`, and each but the first tested against
    the first over sequences: Δ, its paired percentile bootstrap interval and the paired
    sign-flip permutation p, as the loss sweep and the restriction test theirs
    (`lm_loss.compare_losses`)."""
    total = float(tokens.sum())
    base = nats[0]
    tested = lm_loss.compare_losses(lm_loss.ALL, base, nats[1:], tokens, RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE)
    out = [Compared(ma.INTERVENTIONS[0], float(base.sum() / total), 0.0, None, None, None)]
    for name, t in zip(ma.INTERVENTIONS[1:], tested, strict=True):
        out.append(Compared(name, t.value, t.delta, t.ci_low, t.ci_high, t.p_value))
    return out


def _finish(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    task: PreparedTask,
    entries: Sequence[ma.Entry],
    sites: Sequence[Sequence[ma.Site]],
    options: MassiveAblationOptions,
    seconds: float,
) -> list[Compared]:
    """The tests from the stored losses, and the run's tables, completing the run."""
    from attnwh.sql import runs, warehouse

    n = len(task.example_ids)
    found = con.execute(
        "SELECT intervention, sequence, nats, tokens FROM massive_ablation_losses WHERE run_id = ?", [run_id]
    ).fetchall()
    nats = np.full((len(ma.INTERVENTIONS), n), np.nan)
    tokens = np.zeros(n, dtype=np.int64)
    place = {name: k for k, name in enumerate(ma.INTERVENTIONS)}
    for intervention, sequence, value, count in found:
        nats[place[intervention], sequence] = value
        tokens[sequence] = count
    if np.isnan(nats).any():
        raise AttnwhError(f"massive-ablation run {run_id} is missing losses; rerun it with --replace")
    compared = compare(nats, tokens)
    site_rows = [(s, i, p, v) for s, row in enumerate(sites) for i, p, v in row]
    tables: dict[str, dict[str, list]] = {
        "massive_ablation_runs": {
            "min_magnitude": [options.min_magnitude],
            "ratio": [options.ratio],
            "min_share": [options.min_share],
            "context_length": [options.context_length],
            "sequences": [n],
            "tokens": [int(tokens.sum())],
            "resamples": [RESAMPLES],
            "seed": [BOOTSTRAP_SEED],
        },
        "massive_ablation_entries": {
            "layer": [e.layer for e in entries],
            "dim": [e.dim for e in entries],
            "token_kind": [e.token_kind for e in entries],
            "mean_value": [e.mean for e in entries],
            "mean_magnitude": [e.mean_magnitude for e in entries],
            "max_magnitude": [e.max_magnitude for e in entries],
            "mean_median": [e.mean_median for e in entries],
            "sequences": [e.sequences for e in entries],
            "sites": [e.sites for e in entries],
        },
        "massive_ablation_sites": {
            "sequence": [s for s, _, _, _ in site_rows],
            "example_id": [int(task.example_ids[s]) for s, _, _, _ in site_rows],
            "layer": [entries[i].layer for _, i, _, _ in site_rows],
            "dim": [entries[i].dim for _, i, _, _ in site_rows],
            "token_kind": [entries[i].token_kind for _, i, _, _ in site_rows],
            "position": [p for _, _, p, _ in site_rows],
            "value": [v for _, _, _, v in site_rows],
        },
        "massive_ablation_results": {
            "intervention": [c.intervention for c in compared],
            "loss": [c.loss for c in compared],
            "delta": [c.delta for c in compared],
            "ci_low": [c.ci_low for c in compared],
            "ci_high": [c.ci_high for c in compared],
            "p_value": [c.p_value for c in compared],
        },
    }
    with warehouse.transaction(con):
        for table, columns in tables.items():
            count = len(next(iter(columns.values())))
            if count:
                warehouse.insert_arrow(con, table, {"run_id": [run_id] * count, **columns})
        runs.finish_run(con, run_id, "complete", seconds)
    return compared
