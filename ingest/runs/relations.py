"""Storing `attnwh ingest relations` runs: one run per input file (task `dependencies` for a
CoNLL-U file, `frames` for a FrameNet file), computed unit by unit through the engine
(:mod:`attnwh.ingest.runs.engine`) like a statistics run: an interrupted run resumes at the
next unit, static shards (`--shard I/N`) merge into the run, `--engine ray` computes it.

A relations run's rows are aggregates over all its sentences (counts per relation, head and
layer; means and percentiles over annotations), so a unit stores its running totals
(relation_sums) rather than rows per example. Once every unit is stored, the totals are summed
in the units' order, which is the same however the units were computed, so a resumed, merged
or Ray run gets the one-process rows exactly; the run's tables are written from the sums and
the sums deleted, in one transaction. The finish needs no model, so `attnwh merge` completes
a whole run itself.

A stored run with the same identity (model weights, file contents, --limit, --seed and what is
measured) is kept unless `replace`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.errors import AttnwhError, DataError
from attnwh.ingest.measures import frames
from attnwh.ingest.measures.dependencies import RelationCounts, RelationsResult, Sentence
from attnwh.ingest.measures.features import FeatureCounts
from attnwh.ingest.measures.frames import FrameCounts, FrameData, FrameLinks, FramesResult
from attnwh.ingest.runs.prepared import Prepared
from attnwh.ingest.runs.shards import Part

if TYPE_CHECKING:  # this module loads without torch, so a bad file fails at once
    from attnwh.ingest.model.loading import LoadedModel
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.loop import IngestOptions, PreparedTask
    from attnwh.ingest.runs.units import WorkUnit

# Sentences per unit of work, whatever --batch-size is: the units, and so the order in which
# their totals are summed, depend on the sentences alone, so a rerun with another batch size
# still resumes a run without counting a sentence twice.
UNIT_SENTENCES = 64
# The frame filters' settings, part of a frames run's identity.
FRAME_FILTERS = [frames.MAX_SENTENCE_WORDS, frames.MAX_ELEMENT_WORDS, frames.MIN_DISTANCE]


@dataclass(frozen=True)
class RelationsSummary:
    run_id: int
    outcome: str  # "complete", "resumed", "replaced" or "already complete"
    result: RelationsResult | FramesResult | None  # None when already complete
    task: str = "dependencies"


def run_identity(encoder: LoadedModel, path: Path, limit: int | None, seed: int, **extra: object) -> dict[str, object]:
    """What a relations run's key is made of (`attnwh.sql.runs.run_key`)."""
    return {
        "kind": "relations",
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "file": hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest(),
        "limit": limit,
        "seed": seed,
        "dtype": str(encoder.dtype),
        **extra,
    }


@dataclass(frozen=True)
class RelationsOptions:
    """Settings of a relations run: the seeded --limit sample, sentences per forward pass,
    --replace, and the command line recorded with the run."""

    limit: int | None = None
    seed: int = 42
    batch_size: int = 32
    replace: bool = False
    command: str | None = None


@dataclass(frozen=True)
class RelationsInput:
    """One run's input as a worker reads it: the CoNLL-U sentences (task `dependencies`), or
    the FrameNet sentences and their annotations (task `frames`), in the task's order."""

    task: str  # dependencies | frames
    sentences: tuple[Sentence, ...] = ()
    frames: FrameData | None = None
    by_sentence: tuple[tuple[FrameLinks, ...], ...] = ()  # frames: each example's annotations


# -- running totals ------------------------------------------------------------------------

# Fields of the counts classes that size them rather than count.
_SIZES = ("layers", "heads", "causal")
SumRow = tuple[str, str, str, str, list[int], list[float]]  # counts, field, key, dtype, shape, numbers


def sum_rows(name: str, counts: object) -> list[SumRow]:
    """The running totals of a counts object (RelationCounts, FeatureCounts, FrameCounts), one
    row per field and, for a field per relation or feature, per key."""
    out: list[SumRow] = []
    for f in dataclasses.fields(counts):  # type: ignore[arg-type]
        if f.name in _SIZES:
            continue
        value = getattr(counts, f.name)
        for key, v in value.items() if isinstance(value, dict) else [("", value)]:
            array = np.asarray(v)
            dtype = "int64" if np.issubdtype(array.dtype, np.integer) else "float64"
            out.append((name, f.name, key, dtype, list(array.shape), array.astype(np.float64).ravel().tolist()))
    return out


def add_sums(counts: object, found: Sequence[SumRow]) -> None:
    """Add stored running totals (:func:`sum_rows`, in the units' order) into `counts`."""
    for _, field, key, dtype, shape, numbers in found:
        array = np.asarray(numbers, dtype=np.float64).astype(dtype).reshape(shape)
        value: Any = array.item() if not shape else array
        current = getattr(counts, field)
        if isinstance(current, dict):
            current[key] = current[key] + value if key in current else value
        else:
            setattr(counts, field, current + value)


def _sums_table(unit: str, rows: Sequence[SumRow]) -> pa.Table:
    names, fields, keys, dtypes, shapes, numbers = zip(*rows) if rows else ((),) * 6
    return pa.table(
        {
            "unit": pa.array([unit] * len(rows), pa.string()),
            "counts": pa.array(names, pa.string()),
            "field": pa.array(fields, pa.string()),
            "key": pa.array(keys, pa.string()),
            "dtype": pa.array(dtypes, pa.string()),
            "shape": pa.array(shapes, pa.list_(pa.int32())),
            "numbers": pa.array(numbers, pa.list_(pa.float64())),
        }
    )


# -- units ---------------------------------------------------------------------------------


class RelationsWorker:
    """Computes units of relations runs: the running totals of a unit's sentences, as
    relation_sums rows. `inputs` holds each run's input, by run key."""

    def __init__(self, encoder: LoadedModel, inputs: Mapping[str, RelationsInput], batch_size: int) -> None:
        self.encoder, self.inputs, self.batch_size = encoder, dict(inputs), batch_size

    def compute(self, unit: WorkUnit) -> Part:
        from attnwh.ingest.measures import dependencies

        tick = time.perf_counter()
        given = self.inputs[unit.run_key]
        rows: list[SumRow]
        if given.task == "dependencies":
            chosen = [given.sentences[i] for i in unit.positions]
            result = dependencies.measure(self.encoder, chosen, self.batch_size)
            rows = sum_rows("dependencies", result.counts)
            if result.features is not None:
                rows += sum_rows("features", result.features)
            rows.append(("run", "skipped", "", "int64", [], [float(result.n_skipped)]))
        else:
            assert given.frames is not None
            links = [link for i in unit.positions for link in given.by_sentence[i]]
            measured = frames.measure_frames(self.encoder, frames.subset(given.frames, links), self.batch_size)
            rows = sum_rows("frames", measured.counts)
            rows.append(("run", "annotations", "", "int64", [], [float(len(links))]))
            # The same in every unit: the finish takes the first unit's.
            rows += [("filters", step, "", "int64", [], [float(n)]) for step, n in given.frames.filters.items()]
        tables = {"relation_sums": _sums_table(unit.name, rows), "run_examples": unit.done_rows()}
        return Part(unit.run_key, unit.name, tables, True, time.perf_counter() - tick, str(self.encoder.device))


def dependencies_task(encoder: LoadedModel, path: Path, sentences: Sequence[Sentence], limit: int | None, seed: int):
    """The CoNLL-U sentences as a task of the engine, and the worker's input."""
    identity = run_identity(encoder, path, limit, seed, measures="dependencies+features")
    task = _word_task(encoder, path, "dependencies", [s.words for s in sentences], identity)
    return task, RelationsInput("dependencies", sentences=tuple(sentences))


def frames_task(encoder: LoadedModel, path: Path, data: FrameData, limit: int | None, seed: int):
    """The sentences of the FrameNet annotations as a task of the engine (one example per
    sentence, its annotations measured together), and the worker's input."""
    by_sentence: dict[int, list[FrameLinks]] = {}
    for link in data.links:
        by_sentence.setdefault(link.sentence, []).append(link)
    wanted = sorted(by_sentence)
    identity = run_identity(encoder, path, limit, seed, measures="frames", filters=FRAME_FILTERS)
    task = _word_task(encoder, path, "frames", [data.sentences[i] for i in wanted], identity)
    if task.encoded.truncated.all():
        raise DataError(f"{path}: no annotation can be measured (every sentence is too long for {encoder.name})")
    links = tuple(tuple(by_sentence[i]) for i in wanted)
    return task, RelationsInput("frames", frames=data, by_sentence=links)


def _word_task(
    encoder: LoadedModel, path: Path, task: str, words: Sequence[Sequence[str]], identity: dict[str, object]
) -> PreparedTask:
    """Sentences of words as a task: examples (the words joined by spaces), token ids as the
    model sees them (cut at its limit: a longer sentence is skipped by the measure, and counted
    as truncated) and stable example ids."""
    from attnwh.ingest.measures.wordlevel import encode_words, token_limit
    from attnwh.ingest.model.encoding import EncodedTask
    from attnwh.ingest.runs import rows
    from attnwh.ingest.runs.loop import PreparedTask
    from attnwh.ingest.sources.examples import Example, TaskData

    path = Path(path)
    if not words:
        raise DataError(f"{path}: no sentence to measure")
    examples = tuple(Example(i, None, " ".join(w), None, None) for i, w in enumerate(words))
    data = TaskData(path.name, task, path.stem, examples, None, str(path))
    ids = encode_words(encoder.tokenizer, [list(w) for w in words])[0]["input_ids"]
    limit = token_limit(encoder)
    encoded = EncodedTask(
        tuple(np.asarray(i[:limit], dtype=np.int64) for i in ids),
        None,
        np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids)),
    )
    example_ids = np.array([rows.example_id(data, e) for e in examples], dtype=np.int64)
    return PreparedTask(data, encoded, example_ids, encoder.max_length, identity)


def _ingest_options(options: RelationsOptions) -> IngestOptions:
    from attnwh.ingest.runs.loop import IngestOptions

    return IngestOptions(
        limit=options.limit,
        seed=options.seed,
        batch_size=options.batch_size,
        replace=options.replace,
        command=options.command,
        thumbnails=0,
    )


def prepare_relations(
    model: str | None,
    conllu: Path | None,
    framenet: Path | None,
    options: RelationsOptions,
    device: str = "auto",
) -> Prepared:
    """`attnwh ingest relations`, one run per file given, checked and set up: the files read
    (a missing or malformed one, or a FrameNet file none of whose annotations passes the
    filters, fails before the model loads) and sampled (`options.limit`, `options.seed`),
    the model loaded and checked to read attention on every layer."""
    from attnwh.errors import UsageError
    from attnwh.ingest.measures import dependencies
    from attnwh.ingest.sources.examples import seeded_sample

    if conllu is None and framenet is None:
        raise UsageError("give --conllu FILE, --framenet FILE or both")
    for kind, path in (("CoNLL-U", conllu), ("FrameNet", framenet)):
        if path is not None and not path.is_file():
            raise DataError(f"{kind} file {path} does not exist")
    sentences = frame_data = None
    if conllu is not None:
        sentences = seeded_sample(dependencies.read_conllu(conllu), options.limit, options.seed)
    if framenet is not None:
        frame_data = frames.read_frames(framenet)
        frame_data = frames.subset(frame_data, seeded_sample(frame_data.links, options.limit, options.seed))
    from attnwh.ingest.model.loading import load_model, require_every_layer  # torch: after the files' checks
    from attnwh.ingest.runs.prepared import model_line

    encoder = load_model(model, device, "float32")
    require_every_layer(encoder, "relations")
    inputs, read = [], []
    if conllu is not None and sentences is not None:
        inputs.append(dependencies_task(encoder, conllu, sentences, options.limit, options.seed))
        read.append(f"{len(sentences)} sentences of {conllu.name}")
    if framenet is not None and frame_data is not None:
        inputs.append(frames_task(encoder, framenet, frame_data, options.limit, options.seed))
        read.append(f"{len(frame_data.links)} frame annotations of {framenet.name}")
    return Prepared(
        f"{model_line(encoder)}; {' and '.join(read)}",
        lambda db, engine, on_start, on_batch: ingest_relations(
            db, encoder, inputs, options, on_start, on_batch, engine
        ),
        lambda engine, on_start, on_batch: shard_relations(encoder, inputs, options, engine, on_start, on_batch),
    )


def ingest_relations(
    db_path: Path,
    encoder: LoadedModel,
    inputs: Sequence[tuple[PreparedTask, RelationsInput]],
    options: RelationsOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    engine: EngineOptions | None = None,
) -> list[RelationsSummary]:
    """One run per input (:func:`dependencies_task`, :func:`frames_task`): skip a complete one
    (unless `options.replace`), resume an interrupted one, else measure it unit by unit and
    finish it from the stored totals. `engine` computes the units on Ray; a static shard
    goes through :func:`shard_relations`."""
    from attnwh.ingest.model.loading import require_every_layer
    from attnwh.ingest.runs.engine import EngineOptions, WorkerSpec, executor_for
    from attnwh.ingest.runs.loop import OpenRun, open_task_run, store_stream
    from attnwh.ingest.runs.units import plan_units
    from attnwh.sql import runs, warehouse

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_relations")
    require_every_layer(encoder, "relations")
    given = {task.run_key: input for task, input in inputs}
    worker = RelationsWorker(encoder, given, options.batch_size)
    spec = WorkerSpec(
        kind="relations",
        models={"model_id": encoder.source},
        weights={"model_id": encoder.weights_hash},
        dtype=str(encoder.dtype).removeprefix("torch."),
        settings={"inputs": given, "batch_size": options.batch_size},
    )
    executor = executor_for(engine, spec, worker, db_path)
    ingest_options = _ingest_options(options)
    con = warehouse.connect(db_path)
    try:
        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        states = [open_task_run(con, model_ids, "relations", encoder, task, ingest_options) for task, _ in inputs]
        opened = [
            OpenRun(
                task.run_key,
                task.data.task,
                state.run_id,
                plan_units(task.run_key, task.encoded, task.example_ids, UNIT_SENTENCES, {None: state.done}),
            )
            for (task, _), state in zip(inputs, states)
            if state.status != "complete"
        ]
        store_stream(con, executor, opened, "relation_sums", on_start, on_batch)
        summaries = []
        for (task, _), state in zip(inputs, states):
            if state.status == "complete":
                summaries.append(RelationsSummary(state.run_id, "already complete", None, task.data.task))
                continue
            with runs.marking_failure(con, state.run_id):
                result = finish_relations(con, state.run_id)
            summaries.append(RelationsSummary(state.run_id, state.outcome, result, task.data.task))
        return summaries
    finally:
        con.close()


def shard_relations(
    encoder: LoadedModel,
    inputs: Sequence[tuple[PreparedTask, RelationsInput]],
    options: RelationsOptions,
    engine: EngineOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[ShardSummary]:
    """The units of static shard `engine.shard` of every run, into `engine.shard_dir`;
    `attnwh merge` then stores them and finishes each whole run."""
    from attnwh.ingest.model.loading import require_every_layer
    from attnwh.ingest.runs.engine import write_shards
    from attnwh.ingest.runs.loop import run_info
    from attnwh.ingest.runs.units import plan_units

    require_every_layer(encoder, "relations")
    worker = RelationsWorker(encoder, {task.run_key: input for task, input in inputs}, options.batch_size)
    tasks = [task for task, _ in inputs]
    plans = [
        (
            run_info("relations", {"model_id": encoder}, task, _ingest_options(options)),
            plan_units(task.run_key, task.encoded, task.example_ids, UNIT_SENTENCES, {}),
        )
        for task in tasks
    ]
    return write_shards(engine, plans, worker, tasks, on_start, on_batch)


# -- finishing -----------------------------------------------------------------------------


def finish_relations(con: duckdb.DuckDBPyConnection, run_id: int) -> RelationsResult | FramesResult:
    """Sum the run's stored totals in the units' order, write its tables from them, delete
    the totals and mark the run complete, in one transaction. Raises where a unit is missing.
    Needs no model: the run's model row says its layers, heads and whether it is causal."""
    from attnwh.ingest.runs.loop import check_whole
    from attnwh.sql import runs, warehouse

    started = time.perf_counter()
    task, n_examples, layers, heads, causal, seconds = warehouse.one_row(
        con,
        "SELECT r.task, r.n_examples, m.num_layers, m.num_heads, m.causal, coalesce(r.seconds, 0) "
        "FROM runs AS r JOIN models AS m USING (model_id) WHERE r.run_id = ?",
        [run_id],
    )
    check_whole(con, run_id, n_examples)
    stored = con.execute(
        "SELECT counts, field, key, dtype, shape, numbers FROM relation_sums WHERE run_id = ? "
        "ORDER BY unit, counts, field, key",
        [run_id],
    ).fetchall()
    by_counts: dict[str, list[SumRow]] = {}
    for row in stored:
        by_counts.setdefault(row[0], []).append(row)
    if not stored:
        raise AttnwhError(f"relations run {run_id} holds no totals; rerun it with --replace")
    totals: dict[str, int] = {}
    for _, field, _, _, _, numbers in by_counts.get("run", []):
        totals[field] = totals.get(field, 0) + int(numbers[0])
    result: RelationsResult | FramesResult
    if task == "frames":
        counts = FrameCounts(layers, heads, causal)
        add_sums(counts, by_counts.get("frames", []))
        if counts.n == 0:
            raise DataError(f"run {run_id}: no annotation could be measured (sentences too long for the model)")
        skipped = totals["annotations"] - counts.n
        result = FramesResult(counts, totals["annotations"], skipped, seconds)
        filters = _frame_filters(by_counts.get("filters", []), n_examples, counts.n)
        tables = {"frame_heads": counts.rows(), "frame_filters": filters}
    else:
        relation_counts = RelationCounts(layers, heads, causal)
        add_sums(relation_counts, by_counts.get("dependencies", []))
        features = FeatureCounts(layers, heads)
        add_sums(features, by_counts.get("features", []))
        skipped = totals["skipped"]
        result = RelationsResult(relation_counts, n_examples, skipped, seconds, features)
        tables = {
            "dependency_heads": relation_counts.head_rows(),
            "dependency_baselines": relation_counts.baseline_rows(),
        }
        if features.n_sentences:
            tables["feature_attention"] = features.rows()
    with warehouse.transaction(con):
        for table, columns in tables.items():
            n = len(next(iter(columns.values())))
            warehouse.insert_arrow(con, table, {"run_id": pa.array([run_id] * n, pa.int32()), **columns})
        con.execute("DELETE FROM relation_sums WHERE run_id = ?", [run_id])
        # Skipped: longer than the model's limit or a decoder's sliding window (frames: or
        # no linked word with pieces).
        con.execute("UPDATE runs SET n_truncated = ? WHERE run_id = ?", [skipped, run_id])
        runs.finish_run(con, run_id, "complete", time.perf_counter() - started)
    return result


def _frame_filters(found: Sequence[SumRow], sentences: int, measured: int) -> dict[str, list]:
    """The frame_filters row: what the paper's filters dropped (every unit holds the same
    counts; the first unit's are taken), the sentences and the annotations measured, and the
    filters' settings."""
    steps: dict[str, list] = {}
    for _, field, _, _, _, numbers in found:
        steps.setdefault(field, [int(numbers[0])])
    return {
        **{step: steps[step] for step in frames.FILTER_STEPS},
        "sentences": [sentences],
        "measured": [measured],
        "max_sentence_words": [frames.MAX_SENTENCE_WORDS],
        "max_element_words": [frames.MAX_ELEMENT_WORDS],
        "min_distance": [frames.MIN_DISTANCE],
    }
