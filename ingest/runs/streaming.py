"""Storing `attnwh ingest streaming` runs: StreamingLLM's experiment (Xiao et al. 2023). For
each context length L and each number of sinks S, the next-token loss per sequence of L tokens
of held-out text with every key/value group restricted to S sinks + a window of W
(`attnwh.ingest.measures.streaming`), beside the model as it is.

Unlike `attnwh ingest restriction`, nothing is ranked: one set (every group) per S, so the run
costs 1 + |S| passes per sequence, not one per group. The text is read and cut as the
restriction's is (`read_text`, `cut_text`), once per L, keeping the sequences of exactly L
tokens; a run's examples are the sequences of every length.

The losses go through the engine (:mod:`attnwh.ingest.runs.engine`) unit by unit, each
committed with its done marks: an interrupted run resumes at the next unit, `--engine ray`
computes them on Ray, static shards (`--shard I/N`) merge into the run. Then the paired tests
over sequences and the run's results table complete the run in one transaction. A stored run
with the same identity (weights, sequences, settings) is kept unless `replace`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.errors import AttnwhError, DataError, UsageError
from attnwh.ingest.measures import lm_loss
from attnwh.ingest.measures import streaming as ms
from attnwh.ingest.model.encoding import EncodedTask
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask
from attnwh.ingest.runs.prepared import Prepared
from attnwh.ingest.runs.restriction import (
    BOOTSTRAP_SEED,
    CONFIDENCE,
    RESAMPLES,
    RestrictionOptions,
    cut_text,
    read_text,
)
from attnwh.ingest.runs.shards import Part
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.sql import status

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.units import WorkUnit

# StreamingLLM's settings: no sink (window attention), one, and the four Xiao et al. keep.
DEFAULT_SINKS = (0, 1, 4)
DEFAULT_WINDOW = 64
DEFAULT_LENGTHS = (256, 512, 1024)


@dataclass(frozen=True)
class StreamingOptions:
    """Settings of a streaming run: the numbers of sinks S, the window W, the context lengths
    L; at most `limit` sequences per length; `batch_size` sequences and `sets_per_pass`
    settings per forward pass; `attention_memory` (bytes) computes long layers in tiles."""

    sinks: tuple[int, ...] = DEFAULT_SINKS
    window: int = DEFAULT_WINDOW
    context_lengths: tuple[int, ...] = DEFAULT_LENGTHS
    limit: int | None = None
    batch_size: int = 4
    sets_per_pass: int = 1
    attention_memory: int | None = None
    replace: bool = False
    command: str | None = None


@dataclass(frozen=True)
class StreamingText:
    """The held-out text cut once per context length: the sequences of exactly L tokens."""

    dataset: str
    task: str
    split: str
    source: str
    sequences: dict[int, list[tuple[int, ...]]]  # context length -> its sequences


@dataclass(frozen=True)
class StreamingSummary:
    run_id: int
    outcome: str  # "complete", "resumed", "replaced" or "already complete"
    sequences: int  # over every length
    seconds: float = 0.0


def cut_lengths(data: TaskData, tokenizer: Any, options: StreamingOptions) -> StreamingText:
    """`data` cut into sequences of each context length, as the restriction cuts it, the
    first `options.limit` of exactly L tokens each (a shorter last piece would mix lengths
    into one L). Refuses a text that makes no sequence of some L."""
    sequences = {}
    for length in options.context_lengths:
        cut = cut_text(data, tokenizer, RestrictionOptions(context_length=length))
        whole = [s for s in cut.sequences if len(s) == length]
        if not whole:
            longest = max(len(s) for s in cut.sequences)
            raise DataError(
                f"{data.source}: its text makes no sequence of {length} tokens (at most {longest}); "
                "give a longer --text or shorter --context-lengths"
            )
        sequences[length] = whole[: options.limit]
    return StreamingText(cut.dataset, cut.task, cut.split, data.source, sequences)


# Per example of a run, in task order: its context length and its place among that length's sequences.
Place = tuple[int, int]


def run_identity(encoder: LoadedModel, text: StreamingText, options: StreamingOptions) -> dict:
    """What a streaming run's key is made of (`attnwh.sql.runs.run_key`): the sequences'
    tokens stand for the text, the lengths, --limit and the tokenizer together."""
    cut = {str(length): seqs for length, seqs in text.sequences.items()}
    digest = hashlib.blake2b(json.dumps(cut, sort_keys=True).encode(), digest_size=16).hexdigest()
    return {
        "kind": "streaming",
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "sequences": digest,
        "sinks": list(options.sinks),
        "window": options.window,
        "context_lengths": list(options.context_lengths),
        "limit": options.limit,
        "resamples": RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        "dtype": str(encoder.dtype),
    }


class StreamingWorker:
    """Computes units of a streaming run: each sequence's summed loss per bucket of query
    positions, for the model as it is and every group restricted to each S, as
    streaming_losses rows."""

    def __init__(self, encoder: LoadedModel, options: StreamingOptions, places: Mapping[str, Sequence[Place]]) -> None:
        self.encoder, self.options, self.places = encoder, options, dict(places)

    def compute(self, unit: WorkUnit) -> Part:
        encoder, options = self.encoder, self.options
        tick = time.perf_counter()
        pad = encoder.tokenizer.pad_token_id
        places = [self.places[unit.run_key][i] for i in unit.positions]
        tables = []
        # A length at a time: the position buckets are a length's own.
        for length in sorted({length for length, _ in places}):
            rows_of = [r for r, (at, _) in enumerate(places) if at == length]
            batch = _rows(unit, rows_of).collate(0 if pad is None else int(pad), encoder.device)
            edges = ms.position_edges(length, options.window)
            loss = ms.streaming_loss(
                encoder.model,
                batch,
                options.sinks,
                options.window,
                edges,
                options.sets_per_pass,
                options.attention_memory,
                status.on_pass,  # a no-op but in the process of a command that keeps a status
            )
            settings = [None, *options.sinks]
            s, r, b = (a.ravel() for a in np.meshgrid(*map(np.arange, loss.nats.shape), indexing="ij"))
            tables.append(
                pa.table(
                    {
                        "example_id": pa.array(unit.example_ids[rows_of][r], pa.int64()),
                        "context_length": pa.array(np.full(len(r), length), pa.int32()),
                        "sequence": pa.array([places[rows_of[i]][1] for i in r], pa.int32()),
                        "sinks": pa.array([settings[i] for i in s], pa.int16()),
                        "position_from": pa.array([edges[i] for i in b], pa.int32()),
                        "position_to": pa.array([edges[i + 1] for i in b], pa.int32()),
                        "nats": pa.array(loss.nats[s, r, b], pa.float64()),
                        "tokens": pa.array(loss.tokens[r, b], pa.int32()),
                    }
                )
            )
        parts = {"streaming_losses": pa.concat_tables(tables), "run_examples": unit.done_rows()}
        return Part(unit.run_key, unit.name, parts, True, time.perf_counter() - tick, str(encoder.device))


def _rows(unit: WorkUnit, chosen: Sequence[int]) -> WorkUnit:
    """The unit with only its rows `chosen` (for collating them)."""
    return replace(
        unit,
        positions=tuple(unit.positions[i] for i in chosen),
        example_ids=unit.example_ids[list(chosen)],
        input_ids=tuple(unit.input_ids[i] for i in chosen),
        token_type_ids=None,
        n_tokens_full=unit.n_tokens_full[list(chosen)],
    )


def streaming_task(
    encoder: LoadedModel, text: StreamingText, options: StreamingOptions
) -> tuple[PreparedTask, list[Place]]:
    """Every length's sequences as one task of the engine (examples with their token ids,
    decoded for display), and each one's place."""
    tokenizer = encoder.tokenizer
    examples: list[Example] = []
    places: list[Place] = []
    for length, sequences in text.sequences.items():
        decoded = tokenizer.batch_decode([list(s) for s in sequences], skip_special_tokens=True)
        for i, (s, t) in enumerate(zip(sequences, decoded, strict=True)):
            examples.append(Example(len(examples), f"L{length}-{i}", t, None, None, token_ids=tuple(s)))
            places.append((length, i))
    data = TaskData(text.dataset, text.task, text.split, tuple(examples), None, text.source)
    lengths = np.array([len(e.token_ids or ()) for e in examples], dtype=np.int64)
    encoded = EncodedTask(tuple(np.asarray(e.token_ids, dtype=np.int64) for e in examples), None, lengths)
    ids = np.array([rows.example_id(data, e) for e in examples], dtype=np.int64)
    identity = run_identity(encoder, text, options)
    return PreparedTask(data, encoded, ids, max(options.context_lengths), identity), places


def _ingest_options(options: StreamingOptions) -> IngestOptions:
    return IngestOptions(
        limit=options.limit,
        seed=BOOTSTRAP_SEED,
        batch_size=options.batch_size,
        replace=options.replace,
        command=options.command,
        thumbnails=0,
    )


def prepare_streaming(
    model: str,
    text: str | None,
    options: StreamingOptions,
    device: str = "auto",
    context_lengths: Sequence[int] | None = None,
    sets_per_pass: int | None = None,
) -> Prepared:
    """`attnwh ingest streaming` of `model` on `text`, checked and set up: the text read (a
    missing file fails before the model loads), the model refused from its config before its
    weights load unless it is a causal language model, then loaded; the context lengths (by
    default 256, 512 and 1024 where the model reads them) checked against the model's limit
    and against S + W; the text cut into sequences of each length."""
    from attnwh.ingest.model.loading import load_language_model
    from attnwh.ingest.runs.prepared import model_line

    if not options.sinks:
        raise UsageError("--sink-tokens: give at least one number of sinks, such as 0,1,4")
    data = read_text(text)
    what = "streaming with sinks and a window"
    encoder = load_language_model(model, device, what)
    if context_lengths:
        lengths = tuple(context_lengths)
        over = [n for n in lengths if n > encoder.max_length]
        if over:
            raise UsageError(f"--context-lengths {over[0]}: {model} reads at most {encoder.max_length} tokens")
    else:
        lengths = tuple(n for n in DEFAULT_LENGTHS if n <= encoder.max_length) or (encoder.max_length,)
    kept = max(options.sinks) + options.window
    if min(lengths) <= kept:
        raise UsageError(
            f"--context-lengths {min(lengths)} is not longer than --sink-tokens + --window ({kept}): "
            "the cache would evict nothing"
        )
    per_pass = sets_per_pass or (2 if encoder.device.type == "cuda" else 1)
    options = replace(options, context_lengths=lengths, sets_per_pass=per_pass)
    cut = cut_lengths(data, encoder.tokenizer, options)
    counts = ", ".join(f"{len(s)} of {n}" for n, s in cut.sequences.items())
    header = (
        f"{model_line(encoder)}: sequences of each length ({counts} tokens), every key/value group restricted to "
        f"sinks {','.join(map(str, options.sinks))} + window {options.window}"
    )
    return Prepared.one_run(header, ingest_streaming, shard_streaming, encoder, cut, options)


def ingest_streaming(
    db_path: Path,
    encoder: LoadedModel,
    text: StreamingText,
    options: StreamingOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    engine: EngineOptions | None = None,
) -> StreamingSummary:
    """Measure every sequence of `text` as it is and under each S, unit by unit through the
    engine (each unit's losses committed with its done marks), then test each S against the
    model as it is and against the fewest sinks, and complete the run."""
    from attnwh.ingest.runs.engine import EngineOptions, WorkerSpec, executor_for
    from attnwh.ingest.runs.loop import OpenRun, open_task_run, store_stream
    from attnwh.ingest.runs.units import plan_units
    from attnwh.sql import runs, warehouse

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_streaming")
    task, places = streaming_task(encoder, text, options)
    worker = StreamingWorker(encoder, options, {task.run_key: places})
    spec = WorkerSpec(
        kind="streaming",
        models={"model_id": encoder.source},
        weights={"model_id": encoder.weights_hash},
        dtype=str(encoder.dtype).removeprefix("torch."),
        settings={"options": options, "places": {task.run_key: places}},
        language_model=True,
    )
    executor = executor_for(engine, spec, worker, db_path)
    con = warehouse.connect(db_path)
    try:
        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        state = open_task_run(con, model_ids, "streaming", encoder, task, _ingest_options(options))
        if state.status == "complete":
            return StreamingSummary(state.run_id, "already complete", len(places))
        units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {None: state.done})
        label = f"{text.task} · streaming: {1 + len(options.sinks)} settings"
        opened = OpenRun(task.run_key, label, state.run_id, units)
        store_stream(con, executor, [opened], "streaming_losses", on_start, on_batch)
        started = time.perf_counter()
        with runs.marking_failure(con, state.run_id):
            finish_streaming(con, state.run_id, options, len(places))
        return StreamingSummary(
            state.run_id, state.outcome, len(places), opened.seconds + time.perf_counter() - started
        )
    finally:
        con.close()


def shard_streaming(
    encoder: LoadedModel,
    text: StreamingText,
    options: StreamingOptions,
    engine: EngineOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[ShardSummary]:
    """The units of static shard `engine.shard`, into `engine.shard_dir`; after `attnwh
    merge`, the same command without the shard options tests and completes the run."""
    from attnwh.ingest.runs.engine import write_shards
    from attnwh.ingest.runs.loop import run_info
    from attnwh.ingest.runs.units import plan_units

    task, places = streaming_task(encoder, text, options)
    worker = StreamingWorker(encoder, options, {task.run_key: places})
    units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {})
    info = run_info("streaming", {"model_id": encoder}, task, _ingest_options(options))
    return write_shards(engine, [(info, units)], worker, [task], on_start, on_batch)


def finish_streaming(con: duckdb.DuckDBPyConnection, run_id: int, options: StreamingOptions, examples: int) -> None:
    """The run's results from its stored losses (each sequence's nats summed over its
    buckets), tested over sequences, stored with the run marked complete in one transaction."""
    from attnwh.ingest.runs.loop import check_whole
    from attnwh.sql import runs, warehouse

    started = time.perf_counter()
    check_whole(con, run_id, examples)
    found = con.execute(
        "SELECT context_length, sequence, sinks, sum(nats), sum(tokens) FROM streaming_losses "
        "WHERE run_id = ? GROUP BY ALL ORDER BY ALL",
        [run_id],
    ).fetchall()
    columns = results(found, options)
    with warehouse.transaction(con):
        n = len(columns["context_length"])
        warehouse.insert_arrow(con, "streaming_results", {"run_id": [run_id] * n, **columns})
        runs.finish_run(con, run_id, "complete", time.perf_counter() - started)


def results(summed: Sequence[tuple[int, int, int | None, float, int]], options: StreamingOptions) -> dict[str, list]:
    """streaming_results' columns from each (context length, sequence, sinks or None for the
    model as it is)'s summed nats and tokens: per length and S, the loss, the model as it is's,
    Δ with its paired bootstrap interval and sign-flip p over sequences; and S against the
    fewest sinks of the run (S = 0: window attention) likewise."""
    by: dict[tuple[int, int | None], dict[int, float]] = {}
    tokens: dict[int, dict[int, int]] = {}
    for length, sequence, sinks, summed_nats, n in summed:
        by.setdefault((length, sinks), {})[sequence] = float(summed_nats)
        tokens.setdefault(length, {})[sequence] = int(n)
    fewest = min(options.sinks)
    out: dict[str, list] = {c: [] for c in RESULT_COLUMNS}
    for length in sorted(tokens):
        order = sorted(tokens[length])
        count = np.array([tokens[length][s] for s in order], dtype=np.float64)

        def nats(sinks: int | None, length: int = length, order: list[int] = order) -> np.ndarray:
            if (length, sinks) not in by or set(by[(length, sinks)]) != set(order):
                raise AttnwhError(f"streaming run is missing losses at {length} tokens; rerun it with --replace")
            return np.array([by[(length, sinks)][s] for s in order])

        base = nats(None)
        restricted = np.stack([nats(s) for s in options.sinks])
        tested = lm_loss.compare_losses(lm_loss.ALL, base, restricted, count, RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE)
        versus = lm_loss.compare_losses(
            lm_loss.ALL, nats(fewest), restricted, count, RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE
        )
        for sinks, test, other in zip(options.sinks, tested, versus, strict=True):
            compared = sinks != fewest
            values = {
                "context_length": length,
                "sinks": sinks,
                "window": options.window,
                "sequences": len(order),
                "tokens": int(count.sum()),
                "loss": test.value,
                "baseline_loss": test.baseline,
                "delta": test.delta,
                "ci_low": test.ci_low,
                "ci_high": test.ci_high,
                "p_value": test.p_value,
                "versus_sinks": fewest if compared else None,
                "versus_delta": other.delta if compared else None,
                "versus_ci_low": other.ci_low if compared else None,
                "versus_ci_high": other.ci_high if compared else None,
                "versus_p_value": other.p_value if compared else None,
            }
            for column, value in values.items():
                out[column].append(value)
    return out


RESULT_COLUMNS = (
    "context_length",
    "sinks",
    "window",
    "sequences",
    "tokens",
    "loss",
    "baseline_loss",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "versus_sinks",
    "versus_delta",
    "versus_ci_low",
    "versus_ci_high",
    "versus_p_value",
)
