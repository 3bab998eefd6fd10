"""Storing `attnwh ingest loss-curve` runs: a causal language model's next-token loss at every
position of long text, per sequence, from which the in-context learning score of Olsson et
al. (2022) is read (the named queries `loss_by_position` and `icl_score`).

The text is read and cut as the restriction's (`restriction.read_text`, the bundled prose by
default, its paragraphs joined), but only sequences of exactly `context_length` tokens are
kept: a position's mean is then over the same sequences at every position, so the curve is
not bent by short tail sequences dropping out. Position t (0-based, the tokenizer's BOS at 0
where it adds one) holds ℓ_t = −log softmax(z_{t−1})[x_t], the loss of token t given the t
tokens before it (`lm_loss.token_losses`); position 0 has none and is not stored.

A run's examples are its sequences. They go through the engine (:mod:`attnwh.ingest.runs.
engine`) unit by unit, each unit's losses committed with its done marks: an interrupted run
resumes at the next unit, `--engine ray` computes them on Ray, static shards (`--shard I/N`)
merge into the run with `attnwh merge`, which completes it (nothing is left to finish: the
tests are SQL over the stored rows). A stored run with the same identity (weights, the
sequences' tokens, settings) is kept unless `replace`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import torch

from attnwh.errors import DataError, UsageError
from attnwh.ingest.measures import lm_loss
from attnwh.ingest.model.encoding import EncodedTask
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask
from attnwh.ingest.runs.prepared import Prepared
from attnwh.ingest.runs.shards import Part
from attnwh.ingest.sources.examples import TaskData

if TYPE_CHECKING:
    from pathlib import Path

    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.units import WorkUnit

KIND = "loss_curve"
TABLE = "position_losses"
DEFAULT_CONTEXT = 512
# Olsson et al.'s positions, 0-based token indices (docs/whole-context.md#in-context-learning-score):
# the score needs a context of LATE + 1 tokens.
EARLY, LATE = 50, 500


@dataclass(frozen=True)
class LossCurveOptions:
    """Settings of a loss-curve run: sequences of exactly `context_length` tokens, at most
    `limit` of them (the first), `batch_size` per forward pass."""

    context_length: int = DEFAULT_CONTEXT
    limit: int | None = None
    batch_size: int = 4
    replace: bool = False
    command: str | None = None


@dataclass(frozen=True)
class LossCurveSummary:
    run_id: int
    outcome: str  # "complete", "resumed", "replaced" or "already complete"
    sequences: int
    context_length: int
    seconds: float = 0.0


def cut_sequences(data: TaskData, tokenizer: object, context_length: int, limit: int | None) -> TaskData:
    """`data`'s documents cut into sequences of `context_length` tokens (special tokens
    included), only those of exactly that length, the first `limit`; a text that makes none
    is refused in one line."""
    from attnwh.ingest.sources.text import cut_documents

    cut = cut_documents(data, tokenizer, context_length)  # type: ignore[arg-type]
    whole = [e for e in cut.examples if e.token_ids is not None and len(e.token_ids) == context_length]
    if not whole:
        longest = max((len(e.token_ids or ()) for e in cut.examples), default=0)
        raise DataError(
            f"{data.source}: no sequence of {context_length} tokens (its longest document makes {longest}); "
            "give a longer --text or a shorter --context-length"
        )
    kept = tuple(replace(e, position=i) for i, e in enumerate(whole[:limit]))
    return replace(cut, examples=kept)


def run_identity(encoder: LoadedModel, sequences: Sequence[Sequence[int]], options: LossCurveOptions) -> dict:
    """What a run's key is made of (`attnwh.sql.runs.run_key`): the sequences' tokens stand
    for the text, the tokenizer, the context length and --limit together."""
    digest = hashlib.blake2b(json.dumps([list(s) for s in sequences]).encode(), digest_size=16).hexdigest()
    return {
        "kind": KIND,
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "sequences": digest,
        "context_length": options.context_length,
        "limit": options.limit,
        "dtype": str(encoder.dtype),
    }


def loss_curve_task(encoder: LoadedModel, cut: TaskData, options: LossCurveOptions) -> PreparedTask:
    """The cut sequences as one task of the engine (examples with their token ids)."""
    examples = cut.examples
    lengths = np.array([len(e.token_ids or ()) for e in examples], dtype=np.int64)
    encoded = EncodedTask(tuple(np.asarray(e.token_ids, dtype=np.int64) for e in examples), None, lengths)
    ids = np.array([rows.example_id(cut, e) for e in examples], dtype=np.int64)
    identity = run_identity(encoder, [e.token_ids or () for e in examples], options)
    return PreparedTask(cut, encoded, ids, options.context_length, identity)


class LossCurveWorker:
    """Computes units of a loss-curve run: every position's next-token loss of each sequence,
    as position_losses rows (a sequence's number is its place in the run's task)."""

    def __init__(self, encoder: LoadedModel) -> None:
        self.encoder = encoder

    def compute(self, unit: WorkUnit) -> Part:
        encoder = self.encoder
        tick = time.perf_counter()
        pad = encoder.tokenizer.pad_token_id
        batch = unit.collate(0 if pad is None else int(pad), encoder.device)
        with torch.inference_mode():
            losses = lm_loss.token_losses(encoder.model, batch).double().cpu().numpy()
        ids = batch["input_ids"].cpu().numpy()
        # Position 0 predicts nothing: rows start at 1. Sequences are all of one length, so
        # nothing is padded; the mask still bounds a row, should one ever be shorter.
        real = batch["attention_mask"].bool().cpu().numpy()
        r, t = np.nonzero(real[:, 1:])
        t = t + 1
        table = pa.table(
            {
                "example_id": pa.array(unit.example_ids[r], pa.int64()),
                "sequence": pa.array(np.asarray(unit.positions, dtype=np.int32)[r], pa.int32()),
                "position": pa.array(t, pa.int32()),
                "token_id": pa.array(ids[r, t], pa.int64()),
                "loss": pa.array(losses[r, t], pa.float64()),
            }
        )
        tables = {TABLE: table, "run_examples": unit.done_rows()}
        return Part(unit.run_key, unit.name, tables, True, time.perf_counter() - tick, str(encoder.device))


def _ingest_options(options: LossCurveOptions) -> IngestOptions:
    return IngestOptions(
        limit=options.limit,
        batch_size=options.batch_size,
        replace=options.replace,
        command=options.command,
        thumbnails=0,
    )


def prepare_loss_curve(
    model: str, text: str | None, options: LossCurveOptions, device: str = "auto", context_length: int | None = None
) -> Prepared:
    """`attnwh ingest loss-curve` of `model` on `text`, checked and set up: the text read (a
    missing file fails before the model loads), the model refused from its config before its
    weights load unless it is a causal language model, then loaded; the context length (by
    default 512, or the model's limit if lower) checked against the model's limit; the text
    cut into sequences of exactly that length (one at least)."""
    from attnwh.ingest.model.loading import load_language_model
    from attnwh.ingest.runs.prepared import model_line
    from attnwh.ingest.runs.restriction import read_text

    data = read_text(text)
    what = "a loss curve"
    encoder = load_language_model(model, device, what)
    length = context_length or min(DEFAULT_CONTEXT, encoder.max_length)
    if length > encoder.max_length:
        raise UsageError(f"--context-length {length}: {model} reads at most {encoder.max_length} tokens")
    if length < 2:
        raise UsageError(f"--context-length {length}: a sequence needs 2 tokens for one loss")
    options = replace(options, context_length=length)
    cut = cut_sequences(data, encoder.tokenizer, length, options.limit)
    score = "" if length > LATE else f" (too short for the ICL score at position {LATE}: --context-length {LATE + 1})"
    header = f"{model_line(encoder)}: {len(cut.examples)} sequences of {length} tokens{score}"
    return Prepared.one_run(header, ingest_loss_curve, shard_loss_curve, encoder, cut, options)


def ingest_loss_curve(
    db_path: Path,
    encoder: LoadedModel,
    cut: TaskData,
    options: LossCurveOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    engine: EngineOptions | None = None,
) -> LossCurveSummary:
    """Store every position's next-token loss of `encoder` (a causal LM) on the sequences of
    `cut`, unit by unit through the engine, each unit committed with its done marks; the
    run is complete once every sequence is stored. An interrupted run resumes."""
    from attnwh.ingest.runs.engine import EngineOptions, WorkerSpec, executor_for
    from attnwh.ingest.runs.loop import OpenRun, check_whole, open_task_run, store_stream
    from attnwh.ingest.runs.units import plan_units
    from attnwh.sql import runs, warehouse

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_loss_curve")
    task = loss_curve_task(encoder, cut, options)
    worker = LossCurveWorker(encoder)
    spec = WorkerSpec(
        kind=KIND,
        models={"model_id": encoder.source},
        weights={"model_id": encoder.weights_hash},
        dtype=str(encoder.dtype).removeprefix("torch."),
        language_model=True,
    )
    executor = executor_for(engine, spec, worker, db_path)
    n = len(cut.examples)
    con = warehouse.connect(db_path)
    try:
        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        state = open_task_run(con, model_ids, KIND, encoder, task, _ingest_options(options))
        if state.status == "complete":
            return LossCurveSummary(state.run_id, "already complete", n, options.context_length)
        units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {None: state.done})
        opened = OpenRun(task.run_key, f"{cut.task} · loss by position", state.run_id, units)
        store_stream(con, executor, [opened], TABLE, on_start, on_batch)
        with runs.marking_failure(con, state.run_id):
            runs.finish_run(con, state.run_id, check_whole(con, state.run_id, n))
        return LossCurveSummary(state.run_id, state.outcome, n, options.context_length, opened.seconds)
    finally:
        con.close()


def shard_loss_curve(
    encoder: LoadedModel,
    cut: TaskData,
    options: LossCurveOptions,
    engine: EngineOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[ShardSummary]:
    """The units of static shard `engine.shard`, into `engine.shard_dir`; `attnwh merge`
    stores them and completes the run once every shard is merged."""
    from attnwh.ingest.runs.engine import write_shards
    from attnwh.ingest.runs.loop import run_info
    from attnwh.ingest.runs.units import plan_units

    task = loss_curve_task(encoder, cut, options)
    units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {})
    info = run_info(KIND, {"model_id": encoder}, task, _ingest_options(options))
    return write_shards(engine, [(info, units)], LossCurveWorker(encoder), [task], on_start, on_batch)
