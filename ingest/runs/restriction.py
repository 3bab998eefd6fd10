"""Storing `attnwh ingest restriction` runs: which key/value groups of a decoder need the whole
context. Each group is restricted alone to its sinks and a window (`attnwh.ingest.measures.
restriction`), ranked by the change in next-token loss on held-out text; then the k least
harmed are restricted together for a grid of k. Every restriction set's loss is kept per
sequence, with a paired test against the unrestricted model, and the KV-cache bytes it saves.
With needle probes (`attnwh.ingest.sources.probes`), every set is also scored on their
teacher-forced answers: the answer's loss and the share of its tokens the model still
predicts (greedy), so a plan says what a restriction does to retrieval from long context.

A run's examples are its text sequences and needle probes. The ranking's losses go through
the engine (:mod:`attnwh.ingest.runs.engine`) unit by unit, each committed with its done marks:
an interrupted run resumes at the next unit, `--engine ray` computes them on Ray, static
shards (`--shard I/N`) are merged into the run. The plan needs the whole ranking: it follows
here, batch by batch, each batch committed; then the tests and the run's tables complete the
run in one transaction. A stored run with the same identity (weights, sequences, settings) is
kept unless `replace`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from attnwh.errors import AttnwhError, DataError, ModelError, UsageError
from attnwh.ingest.measures import lm_loss
from attnwh.ingest.measures import restriction as rs
from attnwh.ingest.measures.significance import benjamini_hochberg
from attnwh.ingest.model.encoding import EncodedTask
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask
from attnwh.ingest.runs.prepared import Prepared
from attnwh.ingest.runs.shards import Part
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.probes import ProbeSequence
from attnwh.sql import status

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.units import WorkUnit

# Bootstrap resamples of the sequences, and their seed: every set is scored on the same ones.
RESAMPLES = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
# The needle columns of restriction_groups and restriction_plan.
NEEDLE_COLUMNS = ("needle_accuracy", "needle_delta")


@dataclass(frozen=True)
class RestrictionOptions:
    """Settings of a restriction run. `grid`: the k of the plan (None: 0, 10 %, …, 100 % of
    the model's key/value groups); `kv_context` and `kv_dtype`: where and in what the KV
    bytes are counted; `batch_size` sequences and `sets_per_pass` restriction sets per forward
    pass; `attention_memory` (bytes) computes long layers in tiles. `needles` needle probes
    of `context_length` tokens, at `needle_depths` in turn, drawn with `needle_seed`."""

    sinks: int = rs.DEFAULT_SINKS
    window: int = rs.DEFAULT_WINDOW
    context_length: int = 1024
    kv_context: int = 32768
    kv_dtype: str = "bfloat16"
    grid: tuple[int, ...] | None = None
    limit: int | None = None
    batch_size: int = 4
    sets_per_pass: int = 1
    attention_memory: int | None = None
    replace: bool = False
    command: str | None = None
    needles: int = 0
    needle_depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    needle_seed: int = 42
    prefix_cache: bool = True  # False: every set runs the whole model (for checks and benchmarks)


@dataclass(frozen=True)
class Text:
    """The held-out text, cut: each sequence's token ids, and where it came from; the needle
    probes built from the same text (none unless asked for)."""

    dataset: str
    task: str
    split: str
    source: str
    sequences: list[tuple[int, ...]]
    needles: tuple[ProbeSequence, ...] = ()


@dataclass(frozen=True)
class PairedLoss:
    """One restriction set against the unrestricted model over the same sequences."""

    delta: float  # nats per token
    ci_low: float
    ci_high: float
    p_value: float


@dataclass(frozen=True)
class RestrictionSummary:
    run_id: int
    outcome: str  # "complete", "replaced" or "already complete"
    ranking: rs.Ranking | None  # None when already complete
    plan: list[rs.Restricted] | None
    seconds: float = 0.0


def read_text(text: str | None) -> TaskData:
    """The held-out text as documents, before any model loads (a missing file fails at once):
    a plain text file whole, as one document (its paragraphs run on, so sequences reach the
    context length); one document per record of a JSONL, CSV or Parquet file or a dataset;
    by default the bundled `prose` sample, its paragraphs joined into one document."""
    from attnwh.ingest.sources.files import _FILE_FORMATS
    from attnwh.ingest.sources.text import load_sample_text, load_text

    if text is None:
        data = load_sample_text("prose")
        joined = "\n\n".join(doc.text_a for doc in data.examples)
        return replace(data, examples=(Example(0, None, joined, None, None),))
    path = Path(text).expanduser()
    whole = path.is_file() and path.suffix.lower() not in _FILE_FORMATS
    return load_text(text, documents="file" if whole else None)


def needle_documents(text: str | None, data: TaskData) -> list[str]:
    """The documents needle haystacks are cut from (each haystack starts at a random one):
    `data`'s, or for the bundled sample its paragraphs, before :func:`read_text` joined them."""
    from attnwh.ingest.sources.text import load_sample_text

    examples = load_sample_text("prose").examples if text is None else data.examples
    return [e.text_a for e in examples]


def cut_text(data: TaskData, tokenizer: Any, options: RestrictionOptions, documents: Sequence[str] = ()) -> Text:
    """`data` cut into sequences of `options.context_length` tokens (the last of a document
    may be shorter; one that predicts no token is left out), the first `options.limit` of
    them, and `options.needles` needle probes of that length with haystacks from `documents`
    (:func:`needle_documents`)."""
    from attnwh.ingest.sources.probes import needle_probes
    from attnwh.ingest.sources.text import cut_documents

    cut = cut_documents(data, tokenizer, options.context_length)
    sequences = [e.token_ids for e in cut.examples if e.token_ids is not None and len(e.token_ids) > 1]
    if not sequences:
        raise DataError(f"{data.source}: no sequence of two tokens or more")
    needles: tuple[ProbeSequence, ...] = ()
    if options.needles:
        depths, seed = options.needle_depths, options.needle_seed
        try:
            needles = tuple(needle_probes(tokenizer, documents, options.needles, options.context_length, depths, seed))
        except UsageError as error:
            raise UsageError(f"{error}; or measure no needles: --needles 0") from None
    return Text(cut.dataset, cut.task, cut.split, cut.source, sequences[: options.limit], needles)


def default_grid(groups: int) -> list[int]:
    """0, 10 %, 20 %, …, 100 % of `groups`, rounded, without repeats."""
    return sorted({round(groups * tenth / 10) for tenth in range(11)})


def paired_tests(
    baseline: np.ndarray, restricted: np.ndarray, tokens: np.ndarray, resamples: int = RESAMPLES, seed: int = 0
) -> list[PairedLoss]:
    """Each row of `restricted` (sets, sequences) of summed nats against `baseline`
    (sequences,): Δ = Σ (nats − baseline) / Σ tokens, its paired percentile bootstrap interval
    over sequences and the paired sign-flip permutation p of Δ — the comparison the loss
    sweep makes (`lm_loss.compare_losses`), so a restriction's change and a disabled head's
    are tested alike."""
    compared = lm_loss.compare_losses(lm_loss.ALL, baseline, restricted, tokens, resamples, seed, CONFIDENCE)
    return [PairedLoss(r.delta, r.ci_low, r.ci_high, r.p_value) for r in compared]


def run_identity(encoder: LoadedModel, text: Text, options: RestrictionOptions, grid: Sequence[int]) -> dict:
    """What a restriction run's key is made of (`attnwh.sql.runs.run_key`): the sequences'
    tokens stand for the text, the context length, --limit and the tokenizer together, and
    the needle probes' tokens and answers for theirs."""
    digest = hashlib.blake2b(json.dumps(text.sequences).encode(), digest_size=16).hexdigest()
    needles = {}
    if text.needles:
        probes = [[p.token_ids, p.segments["answer"]] for p in text.needles]
        needles["needles"] = hashlib.blake2b(json.dumps(probes).encode(), digest_size=16).hexdigest()
    return {
        **needles,
        "kind": "restriction",
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "sequences": digest,
        "sinks": options.sinks,
        "window": options.window,
        "context_length": options.context_length,
        "kv_context": options.kv_context,
        "kv_dtype": options.kv_dtype,
        "grid": list(grid),
        "limit": options.limit,
        "resamples": RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        "dtype": str(encoder.dtype),
    }


# A set's row labels in restriction_losses: kind, layer, kv_group, k.
SetLabel = tuple[str, int | None, int | None, int | None]
# Per example of a run, in task order: its input (text, needle), its place within that input,
# and the token range scored (a needle's answer; None: every real token but the first).
Place = tuple[str, int, tuple[int, int] | None]


def ranking_sets(layers: Sequence[int], groups: int) -> tuple[list[list[rs.Group]], list[SetLabel]]:
    """The ranking's sets in the order :func:`rs.rank_groups` measures them: nothing, then
    each (layer, group) alone, layer by layer; and their labels."""
    sets: list[list[rs.Group]] = [[]]
    labels: list[SetLabel] = [("unrestricted", None, None, None)]
    for layer in layers:
        for group in range(groups):
            sets.append([(layer, group)])
            labels.append(("group", layer, group, None))
    return sets, labels


class RestrictionWorker:
    """Computes units of a restriction run: each sequence's summed loss, tokens and greedy hits
    under every set of a stage (the ranking's, or the plan's), as restriction_losses rows."""

    def __init__(
        self,
        encoder: LoadedModel,
        options: RestrictionOptions,
        sets: Sequence[Sequence[rs.Group]],
        labels: Sequence[SetLabel],
        places: Mapping[str, Sequence[Place]],
    ) -> None:
        self.encoder, self.options = encoder, options
        self.sets, self.labels, self.places = [set(c) for c in sets], list(labels), dict(places)

    def compute(self, unit: WorkUnit) -> Part:
        encoder, options = self.encoder, self.options
        tick = time.perf_counter()
        pad = encoder.tokenizer.pad_token_id
        batch = unit.collate(0 if pad is None else int(pad), encoder.device)
        places = [self.places[unit.run_key][i] for i in unit.positions]
        scored = batch["attention_mask"].bool().clone()
        for row, (_, _, answer) in enumerate(places):
            if answer is not None:  # a needle probe: its answer's tokens only
                scored[row] = False
                scored[row, answer[0] : answer[1]] = True
        loss = rs.restricted_lm_loss(
            encoder.model,
            batch,
            self.sets,
            options.sinks,
            options.window,
            options.sets_per_pass,
            options.attention_memory,
            scored,
            options.prefix_cache,
            status.on_pass,  # a no-op but in the process of a command that keeps a status
        )
        n_sets, n_rows = len(self.sets), len(places)
        s, r = (a.ravel() for a in np.meshgrid(np.arange(n_sets), np.arange(n_rows), indexing="ij"))
        losses = pa.table(
            {
                "input": [places[i][0] for i in r],
                "kind": [self.labels[i][0] for i in s],
                "layer": pa.array([self.labels[i][1] for i in s], pa.int16()),
                "kv_group": pa.array([self.labels[i][2] for i in s], pa.int16()),
                "k": pa.array([self.labels[i][3] for i in s], pa.int16()),
                "sequence": pa.array([places[i][1] for i in r], pa.int32()),
                "example_id": pa.array(unit.example_ids[r], pa.int64()),
                "nats": pa.array(loss.nats[s, r], pa.float64()),
                "tokens": pa.array(loss.tokens[r], pa.int32()),
                "correct": pa.array(loss.correct[s, r], pa.int32()),
            }
        )
        tables = {"restriction_losses": losses, "run_examples": unit.done_rows()}
        return Part(unit.run_key, unit.name, tables, True, time.perf_counter() - tick, str(encoder.device))


def restriction_task(
    encoder: LoadedModel, text: Text, options: RestrictionOptions, grid: Sequence[int]
) -> tuple[PreparedTask, list[Place]]:
    """The text's sequences, then the needle probes, as one task of the engine (examples with
    their token ids, decoded for display; a needle's answer as its label), and each one's place."""
    tokenizer = encoder.tokenizer
    texts = tokenizer.batch_decode([list(s) for s in text.sequences], skip_special_tokens=True)
    examples = [
        Example(position=i, guid=f"text-{i}", text_a=t, text_b=None, label=None, token_ids=tuple(s))
        for i, (s, t) in enumerate(zip(text.sequences, texts))
    ]
    places: list[Place] = [("text", i, None) for i in range(len(text.sequences))]
    for i, probe in enumerate(text.needles):
        answer = probe.span("answer")
        examples.append(
            Example(
                position=len(places),
                guid=f"needle-{i}",
                text_a=str(tokenizer.decode(list(probe.token_ids), skip_special_tokens=True)),
                text_b=None,
                label=str(tokenizer.decode([probe.token_ids[j] for j in answer])).strip(),
                token_ids=probe.token_ids,
            )
        )
        places.append(("needle", i, (answer.start, answer.stop)))
    data = TaskData(text.dataset, text.task, text.split, tuple(examples), None, text.source)
    lengths = np.array([len(e.token_ids or ()) for e in examples], dtype=np.int64)
    encoded = EncodedTask(tuple(np.asarray(e.token_ids, dtype=np.int64) for e in examples), None, lengths)
    ids = np.array([rows.example_id(data, e) for e in examples], dtype=np.int64)
    identity = run_identity(encoder, text, options, grid)
    return PreparedTask(data, encoded, ids, options.context_length, identity), places


def _ingest_options(options: RestrictionOptions) -> IngestOptions:
    return IngestOptions(
        limit=options.limit,
        seed=BOOTSTRAP_SEED,
        batch_size=options.batch_size,
        replace=options.replace,
        command=options.command,
        thumbnails=0,
    )


def _check_layers(encoder: LoadedModel) -> tuple[list[int], int]:
    """The layers with a key/value cache and the groups per layer, as the config says them;
    refused where they are not the layers whose attention attnwh reads."""
    config = encoder.model.config
    layers, groups = rs.cache_layers(config), rs._layers_and_groups(config)[1]
    if tuple(layers) != encoder.attention_layers:  # the config's hybrid layers, as the check at load found them
        raise ModelError(
            f"{encoder.name}'s config says layers {layers} keep a key/value cache, but attnwh reads attention on "
            f"layers {list(encoder.attention_layers)}: the restriction sweep cannot tell which groups are which"
        )
    return layers, groups


def prepare_restriction(
    model: str,
    text: str | None,
    options: RestrictionOptions,
    device: str = "auto",
    context_length: int | None = None,
    sets_per_pass: int | None = None,
) -> Prepared:
    """`attnwh ingest restriction` of `model` on `text`, checked and set up: the text read (a
    missing file fails before the model loads), the model refused from its config before its
    weights load unless it is a causal language model, then loaded; the context length (by
    default 1024, or the model's limit if lower), the window and the grid checked against it;
    sets per pass by default 4 on a GPU, 1 on a CPU; the text cut into sequences and needles."""
    from attnwh.ingest.model.loading import load_language_model
    from attnwh.ingest.runs.prepared import model_line

    data = read_text(text)
    what = "restricting the context"
    encoder = load_language_model(model, device, what)
    length = context_length or min(1024, encoder.max_length)
    if length > encoder.max_length:
        raise UsageError(f"--context-length {length}: {model} reads at most {encoder.max_length} tokens")
    if length <= options.sinks + options.window:
        raise UsageError(
            f"--context-length {length} is not longer than --sink-tokens + --window ({options.sinks + options.window}): "
            "a restriction would drop nothing"
        )
    per_pass = sets_per_pass or (4 if encoder.device.type == "cuda" else 1)
    options = replace(options, context_length=length, sets_per_pass=per_pass)
    config: Any = encoder.model.config  # Any: torch types a module attribute as Tensor | Module
    groups = int(config.num_hidden_layers) * int(getattr(config, "num_key_value_heads", None) or encoder.num_heads)
    if options.grid is not None and max(options.grid) > groups:
        grid = ",".join(str(k) for k in options.grid)
        raise UsageError(f"--grid {grid}: {model} has {groups} key/value groups in all")
    cut = cut_text(data, encoder.tokenizer, options, needle_documents(text, data))
    probes = f", {len(cut.needles)} needle probes" if cut.needles else ""
    header = (
        f"{model_line(encoder)}: {groups} key/value groups, {len(cut.sequences)} sequences of up to {length} tokens"
        f"{probes}, sinks {options.sinks} + window {options.window}"
    )
    return Prepared.one_run(header, ingest_restriction, shard_restriction, encoder, cut, options)


def ingest_restriction(
    db_path: Path,
    encoder: LoadedModel,
    text: Text,
    options: RestrictionOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    engine: EngineOptions | None = None,
) -> RestrictionSummary:
    """Rank every key/value group of `encoder` (a causal LM) restricted alone, measure the plan
    for the grid of k, test both and store them, with every set's loss per sequence.

    The ranking goes through the engine unit by unit (here, on Ray, or merged from static
    shards), each unit's losses committed with its done marks; the plan, which needs the
    whole ranking, then runs here batch by batch, each batch committed; then the tests and
    the run's tables complete it. An interrupted run resumes where it stopped."""
    from attnwh.ingest.runs.engine import EngineOptions, WorkerSpec, executor_for
    from attnwh.ingest.runs.loop import OpenRun, open_task_run, store_stream
    from attnwh.ingest.runs.units import plan_units
    from attnwh.sql import runs, warehouse

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_restriction")
    layers, groups = _check_layers(encoder)
    grid = list(options.grid) if options.grid is not None else default_grid(len(layers) * groups)
    task, places = restriction_task(encoder, text, options, grid)
    sets, labels = ranking_sets(layers, groups)
    worker = RestrictionWorker(encoder, options, sets, labels, {task.run_key: places})
    spec = WorkerSpec(
        kind="restriction",
        models={"model_id": encoder.source},
        weights={"model_id": encoder.weights_hash},
        dtype=str(encoder.dtype).removeprefix("torch."),
        settings={"options": options, "sets": sets, "labels": labels, "places": {task.run_key: places}},
        language_model=True,
    )
    executor = executor_for(engine, spec, worker, db_path)
    ingest_options = _ingest_options(options)
    con = warehouse.connect(db_path)
    try:
        model_ids = {"model_id": runs.upsert_model(con, encoder.facts())}
        state = open_task_run(con, model_ids, "restriction", encoder, task, ingest_options)
        if state.status == "complete":
            return RestrictionSummary(state.run_id, "already complete", None, None)
        units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {None: state.done})
        label = f"{text.task} · ranking: {len(sets)} sets"
        opened = OpenRun(task.run_key, label, state.run_id, units)
        store_stream(con, executor, [opened], "restriction_losses", on_start, on_batch)
        started = time.perf_counter()
        with runs.marking_failure(con, state.run_id):
            ranking, points = _finish(con, state.run_id, encoder, task, places, options, grid, on_start, on_batch)
        return RestrictionSummary(
            state.run_id, state.outcome, ranking, points, opened.seconds + time.perf_counter() - started
        )
    finally:
        con.close()


def shard_restriction(
    encoder: LoadedModel,
    text: Text,
    options: RestrictionOptions,
    engine: EngineOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[ShardSummary]:
    """The ranking's units of static shard `engine.shard`, into `engine.shard_dir`; after
    `attnwh merge`, the same command without the shard options measures the plan, tests
    and completes the run."""
    from attnwh.ingest.runs.engine import write_shards
    from attnwh.ingest.runs.loop import run_info
    from attnwh.ingest.runs.units import plan_units

    layers, groups = _check_layers(encoder)
    grid = list(options.grid) if options.grid is not None else default_grid(len(layers) * groups)
    task, places = restriction_task(encoder, text, options, grid)
    sets, labels = ranking_sets(layers, groups)
    worker = RestrictionWorker(encoder, options, sets, labels, {task.run_key: places})
    units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {})
    info = run_info("restriction", {"model_id": encoder}, task, _ingest_options(options))
    return write_shards(engine, [(info, units)], worker, [task], on_start, on_batch)


def _finish(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    encoder: LoadedModel,
    task: PreparedTask,
    places: Sequence[Place],
    options: RestrictionOptions,
    grid: Sequence[int],
    on_start: Callable[[str, int], None] | None,
    on_batch: Callable[[int], None] | None,
) -> tuple[rs.Ranking, list[rs.Restricted]]:
    """The plan from the stored ranking, measured batch by batch (each batch committed, so an
    interrupted finish resumes), then the tests and the run's tables, completing the run."""
    from attnwh.ingest.runs.units import plan_units
    from attnwh.sql import runs, warehouse

    started = time.perf_counter()
    layers, groups = _check_layers(encoder)
    n_sets = 1 + len(layers) * groups
    place = {layer: i for i, layer in enumerate(layers)}

    def ranked_row(kind: str, layer: int | None, group: int | None, k: int | None) -> int:
        # As `ranking_sets` orders them: nothing, then each group alone, layer by layer.
        return 0 if kind == "unrestricted" else 1 + place[int(layer or 0)] * groups + int(group or 0)

    ranked = _stored(con, run_id, places, ("unrestricted", "group"), n_sets, ranked_row)
    ranking = rs.rank_groups(lambda sets: ranked["text"], layers, groups)
    order = ranking.order()
    chosen = [sorted(order[:k]) for k in grid]
    worker = RestrictionWorker(
        encoder, options, chosen, [("plan", None, None, k) for k in grid], {task.run_key: places}
    )
    have = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT example_id FROM restriction_losses WHERE run_id = ? AND kind = 'plan'", [run_id]
        ).fetchall()
    }
    units = plan_units(task.run_key, task.encoded, task.example_ids, options.batch_size, {None: frozenset(have)})
    if units and on_start:
        on_start(f"{task.data.task} · plan: {len(grid)} sets", sum(len(u.positions) for u in units))
    for unit in units:
        part = worker.compute(unit)
        with warehouse.transaction(con):
            warehouse.insert_arrow(
                con, "restriction_losses", rows.with_run_id(part.tables["restriction_losses"], run_id)
            )
            runs.add_seconds(con, run_id, part.seconds)
        if on_batch:
            on_batch(len(unit.positions))
    position = {k: i for i, k in enumerate(grid)}
    planned = _stored(con, run_id, places, ("plan",), len(grid), lambda kind, la, g, k: position[int(k or 0)])
    points = rs.plan(lambda sets: planned["text"], ranking, grid)
    needles = (ranked["needle"], planned["needle"]) if "needle" in ranked else None
    tables = _tables(encoder.model.config, ranking, points, options, (ranked["text"], planned["text"]), needles)
    with warehouse.transaction(con):
        for table, columns in tables.items():
            n = len(next(iter(columns.values())))
            warehouse.insert_arrow(con, table, {"run_id": [run_id] * n, **columns})
        runs.finish_run(con, run_id, "complete", time.perf_counter() - started)
    return ranking, points


def _stored(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    places: Sequence[Place],
    kinds: Sequence[str],
    n_sets: int,
    row_of: Callable[[str, int | None, int | None, int | None], int],
) -> dict[str, rs.SequenceLoss]:
    """The stored losses of the sets of `kinds`, per input, as (sets, sequences): a row's set
    is `row_of(kind, layer, kv_group, k)`. Raises where one is missing."""
    found = con.execute(
        "SELECT input, kind, layer, kv_group, k, sequence, nats, tokens, correct FROM restriction_losses "
        "WHERE run_id = ? AND kind IN (SELECT unnest(?))",
        [run_id, list(kinds)],
    ).fetchall()
    sizes: dict[str, int] = {}
    for input, _, _ in places:
        sizes[input] = sizes.get(input, 0) + 1
    out = {
        input: rs.SequenceLoss(np.full((n_sets, n), np.nan), np.zeros(n, np.int64), np.zeros((n_sets, n), np.int64))
        for input, n in sizes.items()
    }
    for input, kind, layer, group, k, sequence, nats, tokens, correct in found:
        row = row_of(kind, layer, group, k)
        out[input].nats[row, sequence] = nats
        out[input].tokens[sequence] = tokens
        out[input].correct[row, sequence] = correct
    for loss in out.values():
        if np.isnan(loss.nats).any():
            raise AttnwhError(f"restriction run {run_id} is missing losses; rerun it with --replace")
    return out


def _tables(
    config: object,
    ranking: rs.Ranking,
    points: list[rs.Restricted],
    options: RestrictionOptions,
    texts: tuple[rs.SequenceLoss, rs.SequenceLoss],
    needles: tuple[rs.SequenceLoss, rs.SequenceLoss] | None = None,
) -> dict[str, dict[str, list]]:
    """The rows of restriction_runs, restriction_groups and restriction_plan from the losses
    measured on the text (`texts`) and the needle probes' answers (`needles`),
    each under the ranking's sets (nothing, then each group alone, layer by layer) and the plan's."""
    tokens = texts[0].tokens
    base = ranking.baseline.nats
    singles = paired_tests(base, np.stack([r.nats for r in ranking.groups]), tokens, RESAMPLES, BOOTSTRAP_SEED)
    q = benjamini_hochberg(np.array([t.p_value for t in singles]))
    planned = paired_tests(base, np.stack([p.nats for p in points]), tokens, RESAMPLES, BOOTSTRAP_SEED)
    s, w, dtype = options.sinks, options.window, options.kv_dtype

    def saved(chosen: Collection[rs.Group], context: int) -> int:
        return rs.kv_bytes_saved(config, chosen, context, s, w, dtype)

    _, groups = rs._layers_and_groups(config)
    place = {layer: i for i, layer in enumerate(rs.cache_layers(config))}

    def alone(group: rs.Group) -> int:
        """The row of `group` among the ranking's sets (attention layer by attention layer)."""
        return 1 + place[group[0]] * groups + group[1]

    ranked_rows = [alone(r.groups[0]) for r in ranking.groups]
    needle_runs, needle_groups, needle_plan = _needle_columns(needles, ranked_rows, len(points), options)
    n = len(tokens)
    return {
        "restriction_runs": {
            "sinks": [s],
            "window": [w],
            "context_length": [options.context_length],
            "kv_context": [options.kv_context],
            "kv_dtype": [dtype],
            "sequences": [n],
            "tokens": [int(tokens.sum())],
            "loss": [ranking.baseline.loss],
            "kv_bytes": [rs.kv_cache_bytes(config, options.kv_context, dtype)],
            "kv_bytes_run": [rs.kv_cache_bytes(config, options.context_length, dtype)],
            "resamples": [RESAMPLES],
            "seed": [BOOTSTRAP_SEED],
            **needle_runs,
        },
        "restriction_groups": {
            "layer": [r.groups[0][0] for r in ranking.groups],
            "kv_group": [r.groups[0][1] for r in ranking.groups],
            "rank": list(range(1, len(ranking.groups) + 1)),
            "loss": [r.loss for r in ranking.groups],
            "delta": [r.increase for r in ranking.groups],
            "ci_low": [t.ci_low for t in singles],
            "ci_high": [t.ci_high for t in singles],
            "p_value": [t.p_value for t in singles],
            "p_adjusted": [float(v) for v in q],
            "kv_bytes_saved": [saved(r.groups, options.kv_context) for r in ranking.groups],
            **needle_groups,
        },
        "restriction_plan": {
            "k": [len(p.groups) for p in points],
            "groups": [[{"layer": la, "kv_group": g} for la, g in p.groups] for p in points],
            "loss": [p.loss for p in points],
            "delta": [p.increase for p in points],
            "ci_low": [t.ci_low for t in planned],
            "ci_high": [t.ci_high for t in planned],
            "p_value": [t.p_value for t in planned],
            "kv_bytes_saved": [saved(p.groups, options.kv_context) for p in points],
            "kv_bytes_saved_run": [saved(p.groups, options.context_length) for p in points],
            **needle_plan,
        },
    }


def _needle_columns(
    needles: tuple[rs.SequenceLoss, rs.SequenceLoss] | None, rows: list[int], plans: int, options: RestrictionOptions
) -> tuple[dict[str, list], dict[str, list], dict[str, list]]:
    """The needle columns of restriction_runs, restriction_groups (the groups' `rows` among the
    ranking's sets, in rank order) and restriction_plan (`plans` points): the answers' greedy
    accuracy and their loss change, over all the probes' answer tokens; NULL without needles."""
    runs: dict[str, list]
    if needles is None:
        runs = {"needles": [0]} | {c: [None] for c in ("needle_tokens", "needle_loss", "needle_accuracy")}
        runs |= {"needle_seed": [None], "needle_depths": [None]}
        return runs, {c: [None] * len(rows) for c in NEEDLE_COLUMNS}, {c: [None] * plans for c in NEEDLE_COLUMNS}
    ranked, planned = needles
    answer_tokens = int(ranked.tokens.sum())

    def accuracy(loss: rs.SequenceLoss, row: int) -> float:
        return float(loss.correct[row].sum() / answer_tokens)

    def delta(loss: rs.SequenceLoss, row: int) -> float:
        return float((loss.nats[row].sum() - ranked.nats[0].sum()) / answer_tokens)

    runs = {
        "needles": [len(ranked.tokens)],
        "needle_tokens": [answer_tokens],
        "needle_loss": [float(ranked.nats[0].sum() / answer_tokens)],
        "needle_accuracy": [accuracy(ranked, 0)],
        "needle_seed": [options.needle_seed],
        "needle_depths": [list(options.needle_depths)],
    }
    groups: dict[str, list] = {
        "needle_accuracy": [accuracy(ranked, r) for r in rows],
        "needle_delta": [delta(ranked, r) for r in rows],
    }
    plan: dict[str, list] = {
        "needle_accuracy": [accuracy(planned, r) for r in range(plans)],
        "needle_delta": [delta(planned, r) for r in range(plans)],
    }
    return runs, groups, plan
