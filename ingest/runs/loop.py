"""The ingest loop: run encoders over tasks and write per-head rows batch by batch.

The loop (runs, resume, replace, transactions, progress) is shared by every kind of run;
what a batch produces comes from a :class:`BatchCapture`: head statistics here
(:class:`StatisticsCapture`), attention change between two models in `ingest/measures/change.py`.
Everything that can be wrong with the input (model, data, lengths) is checked before the
warehouse is opened, so bad input leaves the file untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb
import numpy as np
import pyarrow as pa
import torch

from attnwh.errors import AttnwhError, DataError, UsageError
from attnwh.ingest.measures.massive import scan
from attnwh.ingest.measures.mixing import HEAD_COLUMNS, LAYER_COLUMNS, ContextMixing
from attnwh.ingest.measures.patterns import MAP_MAX_TOKENS
from attnwh.ingest.measures.prompting import forward_label_scores
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS, HeadStatistics, value_norm_grams
from attnwh.ingest.model import capture
from attnwh.ingest.model.encoding import EncodedTask, TokenKinds, encode_task
from attnwh.ingest.model.loading import LoadedModel, forward_inputs
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.units import CaptureWorker, WorkUnit, plan_units
from attnwh.ingest.sources.examples import TaskData
from attnwh.sql import runs, warehouse

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions, Executor, ShardSummary
    from attnwh.ingest.runs.prepared import Prepared


@dataclass(frozen=True)
class IngestOptions:
    limit: int | None = None  # examples per task, seeded sample; None = all
    seed: int = 42
    max_length: int | None = None  # None = the model's limit
    truncate: bool = True  # False: an over-long example is an error
    batch_size: int = 32
    replace: bool = False  # redo a run that is already complete
    command: str | None = None  # recorded with the run
    thumbnails: int = 20  # examples per run whose maps are kept as 32 x 32 thumbnails (seeded)
    value_zeroing: str | None = None  # statistics runs: "layer" or "head" (value_zeroing.py); None: off
    attention_memory: int | None = None  # bytes of maps alive at once (capture.py); None: sized from the device
    mixing: bool = True  # statistics runs: context mixing after residual and LayerNorm (mixing.py)
    massive: bool = True  # statistics runs: massive activations (massive.py)
    map_tokens: int = MAP_MAX_TOKENS  # thumbnail-sample examples up to this long keep whole maps


@dataclass(frozen=True)
class RunSummary:
    task: str
    run_id: int
    outcome: str  # "complete", "resumed", "replaced" or "already complete"
    n_examples: int
    n_written: int  # examples written by this invocation
    n_truncated: int
    rows_written: int
    seconds: float
    accuracy: float | None = None  # a run read through a prompt: its answers' accuracy (scores)


# Called after each batch with the number of examples it held.
ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class PreparedTask:
    data: TaskData
    encoded: EncodedTask
    example_ids: np.ndarray
    max_length: int
    identity: dict[str, object]  # what the run key is made of (`attnwh.sql.runs.run_key`), kind included

    @property
    def kind(self) -> str:
        return str(self.identity["kind"])

    @property
    def run_key(self) -> str:
        return runs.run_key(self.kind, self.identity)


def model_identity(encoder: LoadedModel, kind: str = "statistics") -> dict[str, object]:
    """The part of a run's identity that names the model(s) and the kind of run."""
    return {"kind": kind, "weights": encoder.weights_hash, "name": encoder.name}


def too_long_advice(max_length: int, model_limit: int, longest: int) -> str:
    """What can be done about inputs of up to `longest` tokens refused under --no-truncate at
    `max_length`, for a model that takes at most `model_limit`: raising --max-length only
    where the model's positions reach that far (past them it is refused too)."""
    cut = f"drop --no-truncate to cut them at {max_length} tokens"
    if longest <= model_limit:
        return f"raise --max-length to {longest} (this model takes up to {model_limit}) or {cut}"
    if max_length < model_limit:
        cut += f" (or at {model_limit} with --max-length {model_limit})"
    return (
        f"{cut}; this model reads at most {model_limit} tokens, so keeping them whole needs one with "
        "longer positions (ModernBERT reads 8,192)"
    )


def prepare_tasks(
    encoder: LoadedModel,
    tasks: Sequence[TaskData],
    options: IngestOptions,
    identity: Mapping[str, object] | None = None,
) -> list[PreparedTask]:
    """Sample, tokenize (with `encoder`'s tokenizer) and check every task; raises before
    anything is written. `identity` (default: `model_identity(encoder)`) goes into each
    run's identity, so runs of other models or kinds never resume each other."""
    max_length = options.max_length or encoder.max_length
    if max_length > encoder.max_length:
        raise UsageError(f"--max-length {max_length} exceeds the model's limit of {encoder.max_length} tokens")
    if max_length < 4:
        raise UsageError("--max-length must be at least 4 tokens")
    prepared = []
    for full in tasks:
        # Plain text is cut into sequences of this tokenizer's tokens first (`sources/text.py`).
        data = full.cut(encoder.tokenizer, max_length).sample(options.limit, options.seed)
        if not data.examples:
            raise DataError(f"task {data.task} ({data.split}) has no examples")
        encoded = encode_task(encoder.tokenizer, data, max_length)
        too_long = np.flatnonzero(encoded.truncated)
        if len(too_long) and not options.truncate:
            first = data.examples[too_long[0]]
            longest = int(encoded.n_tokens_full[too_long].max())
            raise DataError(
                f"{len(too_long)} example(s) of {data.task} are longer than {max_length} tokens "
                f"(first: row {first.position}, {encoded.n_tokens_full[too_long[0]]} tokens; longest: {longest}); "
                + too_long_advice(max_length, encoder.max_length, longest)
            )
        ids = np.array([rows.example_id(data, e) for e in data.examples], dtype=np.int64)
        run_identity = {
            **(identity if identity is not None else model_identity(encoder)),
            "data": [data.dataset, data.task, data.split],
            "examples": hashlib.blake2b(ids.tobytes(), digest_size=16).hexdigest(),
            "max_length": max_length,
            "dtype": str(encoder.dtype),
        }
        if options.value_zeroing and run_identity["kind"] == "statistics":
            # Only when on, so the keys of runs without it stay what they were.
            run_identity["value_zeroing"] = options.value_zeroing
        left_out = [name for name, on in (("mixing", options.mixing), ("massive", options.massive)) if not on]
        if left_out and run_identity["kind"] == "statistics":
            # Likewise only when a lens is left out: a run with every lens keeps its key.
            run_identity["without"] = left_out
        if options.map_tokens != MAP_MAX_TOKENS and run_identity["kind"] == "statistics":
            run_identity["map_tokens"] = options.map_tokens
        prepared.append(PreparedTask(data, encoded, ids, max_length, run_identity))
    return prepared


class BatchCapture(Protocol):
    """What one kind of run computes per batch, and where it goes."""

    encoder: LoadedModel  # batches are tokenized, padded and placed for this model
    kind: str  # runs.kind
    table: str  # the table of per (example, layer, head) rows
    columns: tuple[str, ...]  # its value columns, in the order of the last axis of `run`

    def models(self) -> dict[str, LoadedModel]:
        """The runs columns naming models (model_id, base_model_id) and their encoders."""
        ...

    def settings(self) -> dict[str, Any]:
        """What a worker needs besides the models to build the same capture (JSON-able)."""
        ...

    def begin_unit(self, unit: WorkUnit) -> None:
        """The unit (or piece of one) whose batch `run` reads next: its run and gold labels."""
        ...

    def run(self, batch: dict[str, torch.Tensor], thumbnail_rows: Sequence[int] = ()) -> np.ndarray:
        """Values (batch, layer, head, len(columns)) of one collated batch; batch rows in
        `thumbnail_rows` are the run's thumbnail sample (a capture may ignore them)."""
        ...

    def extra_rows(self, example_ids: np.ndarray) -> dict[str, pa.Table]:
        """Rows of other tables from the last batch (without run_id), written with it ({}
        when none)."""
        ...

    budget: int  # the attention memory budget in bytes

    def max_rows(self, length: int) -> int:
        """How many examples of `length` tokens one batch may hold under the budget (0: not
        even one)."""
        ...


def longest_input(tasks: Sequence[PreparedTask]) -> int:
    """The most tokens of any input of `tasks` (0: none)."""
    return max((int(t.encoded.n_tokens.max()) for t in tasks if len(t.encoded.n_tokens)), default=0)


def check_fits(capture: BatchCapture, tasks: Sequence[PreparedTask]) -> None:
    """Refuse, before anything is written, inputs whose attention maps cannot fit the
    capture's attention memory budget even one example at a time."""
    longest = longest_input(tasks)
    if longest and capture.max_rows(longest) == 0:
        family = capture.encoder.family
        raise UsageError(
            f"an input of {longest} tokens needs more attention memory than the budget of "
            f"{capture.budget / 2**20:.0f} MiB ({family} keeps its maps whole here); "
            "lower --max-length or raise --attention-memory"
        )


def ingest_statistics(
    db_path: Path,
    encoder: LoadedModel,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: ProgressCallback | None = None,
    engine: EngineOptions | None = None,
) -> list[RunSummary]:
    """Write head statistics of every prepared task into the warehouse at `db_path`.

    A run with the same model, examples and settings as a stored one resumes it (or, if it
    is complete, is skipped unless `options.replace`). `on_start(task, n_todo)` and
    `on_batch(n)` report progress. `engine` runs the batches on Ray, or writes one static
    shard of them (see :mod:`attnwh.ingest.runs.engine`); by default, here.
    """
    return ingest_runs(
        db_path, StatisticsCapture.for_options(encoder, options, tasks), tasks, options, on_start, on_batch, engine
    )


def ingest_runs(
    db_path: Path,
    capture: BatchCapture,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: ProgressCallback | None = None,
    engine: EngineOptions | None = None,
) -> list[RunSummary]:
    """Write what `capture` computes for every prepared task, one run per task, with the
    resume and replace rules of :func:`ingest_statistics`."""
    from attnwh.ingest.runs.engine import EngineOptions, capture_spec, executor_for

    engine = engine or EngineOptions()
    if engine.shard is not None:
        raise ValueError("a static shard writes no warehouse: use shard_runs")
    check_fits(capture, tasks)
    executor = executor_for(engine, capture_spec(capture), CaptureWorker(capture), db_path)
    con = warehouse.connect(db_path)
    try:
        model_ids = {column: runs.upsert_model(con, e.facts()) for column, e in capture.models().items()}
        states = [open_task_run(con, model_ids, capture.kind, capture.encoder, task, options) for task in tasks]
        opened = [
            OpenRun(task.run_key, task.data.task, state.run_id, _plan(task, options, state.done))
            for task, state in zip(tasks, states)
            if state.status != "complete"
        ]
        store_stream(con, executor, opened, capture.table, on_start, on_batch)
        summaries = []
        for task, state in zip(tasks, states):
            data = task.data
            n_truncated = int(task.encoded.truncated.sum())
            accuracy = warehouse.first_row(
                con, "SELECT value FROM scores WHERE run_id = ? AND metric = 'accuracy'", [state.run_id]
            )
            if state.status == "complete":
                summaries.append(
                    RunSummary(
                        data.task,
                        state.run_id,
                        "already complete",
                        len(data.examples),
                        0,
                        n_truncated,
                        0,
                        0.0,
                        accuracy[0] if accuracy else None,
                    )
                )
                continue
            run = next(o for o in opened if o.run_id == state.run_id)
            with runs.marking_failure(con, state.run_id):
                runs.finish_run(con, state.run_id, check_whole(con, state.run_id, len(data.examples)))
                runs.store_prompt_scores(con, state.run_id)  # a run read through a prompt: its accuracy
            accuracy = warehouse.first_row(
                con, "SELECT value FROM scores WHERE run_id = ? AND metric = 'accuracy'", [state.run_id]
            )
            summaries.append(
                RunSummary(
                    data.task,
                    state.run_id,
                    state.outcome,
                    len(data.examples),
                    run.n_todo,
                    n_truncated,
                    run.n_rows,
                    run.seconds,
                    accuracy[0] if accuracy else None,
                )
            )
        return summaries
    finally:
        con.close()


@dataclass
class OpenRun:
    """A run being written: its units still to compute, and what storing them came to."""

    run_key: str
    label: str  # its progress bar's name
    run_id: int
    units: list[WorkUnit]
    n_rows: int = 0  # rows stored in the run's main table
    seconds: float = 0.0  # from its first part to its last

    @property
    def n_todo(self) -> int:
        """Examples still to compute (each counted once, whatever the groups)."""
        return len({i for u in self.units for i in u.positions})

    @property
    def total(self) -> int:
        """Its progress bar's total: examples, once per group of configurations."""
        return sum(len(u.positions) for u in self.units)


def store_stream(
    con: duckdb.DuckDBPyConnection,
    executor: Executor,
    opened: Sequence[OpenRun],
    table: str,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: ProgressCallback | None = None,
) -> None:
    """Compute the units of every open run with `executor`, in one stream (one Ray pipeline
    for all tasks), and store each part as it comes. Parts come back in the units' order, so
    each run's bar starts with its first part. An exception (Ctrl-C included) marks the runs
    interrupted or failed; what was stored stays, and a rerun resumes from it."""
    by_key = {run.run_key: run for run in opened}
    order = [run for run in opened if run.units]
    # A run's clock and bar start when its first unit starts computing (the stream's start,
    # or the end of the run before it), not when its first part comes back: otherwise the
    # first unit's time is left out, and the bar's rate and the summary's differ.
    left = {run.run_key: {u.name for u in run.units} for run in order}
    started: dict[str, float] = {}

    def begin(index: int) -> None:
        if index < len(order) and order[index].run_key not in started:
            started[order[index].run_key] = time.perf_counter()
            if on_start:
                on_start(order[index].label, order[index].total)

    with runs.marking_failure(con, *(run.run_id for run in opened)):
        begin(0)
        for part in executor.map([u for run in order for u in run.units]):
            run = by_key[part.run_key]
            begin(order.index(run))  # a part ahead of its turn (several workers) starts its run
            rows.store_part(con, run.run_id, part)
            run.n_rows += part.tables[table].num_rows
            run.seconds = time.perf_counter() - started[run.run_key]
            if on_batch:
                on_batch(part.n_examples)
            waiting = left[run.run_key]
            if waiting:
                waiting.discard(part.name)
                if not waiting:
                    begin(order.index(run) + 1)


def shard_runs(
    capture: BatchCapture,
    tasks: Sequence[PreparedTask],
    options: IngestOptions,
    engine: EngineOptions,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: ProgressCallback | None = None,
) -> list[ShardSummary]:
    """Compute static shard `engine.shard` of every task's run and write it to
    `engine.shard_dir`, for `attnwh merge` (see `engine.write_shards`)."""
    from attnwh.ingest.runs.engine import write_shards

    check_fits(capture, tasks)
    plans = [(run_info(capture.kind, capture.models(), task, options), _plan(task, options, {})) for task in tasks]
    return write_shards(engine, plans, CaptureWorker(capture), tasks, on_start, on_batch)


def _plan(task: PreparedTask, options: IngestOptions, done: frozenset[int] | dict) -> list[WorkUnit]:
    from attnwh.ingest.runs.prompted import prompt_labels

    thumbnails = rows.thumbnail_sample(task.example_ids, options.thumbnails, options.seed)
    finished = done if isinstance(done, dict) else {None: done}
    return plan_units(
        task.run_key,
        task.encoded,
        task.example_ids,
        options.batch_size,
        finished,
        thumbnails=thumbnails,
        labels=prompt_labels(task),  # a prompt's gold labels, for the correctness of its answers
    )


class StatisticsCapture:
    """Runs batches through the model and returns their head statistics, pattern features
    and pattern types (batch, layer, head, column); the observer and token classifier are
    set up once. In the same pass it reduces the context mixing after residual and
    LayerNorm (post-LN models, `mixing.py`) and scans each layer's output for massive
    activations (`massive.py`); with `value_zeroing` ("layer" or "head") it also runs value
    zeroing (`value_zeroing.py`, n recomputations of each layer). Batch rows named in
    `run(..., thumbnail_rows)` also leave thumbnails of their maps. :meth:`extra_rows`
    returns all those rows. `mixing=False` and `massive=False` leave them out (`--no-mixing`,
    `--no-massive`). `attention_memory` (bytes; default: sized from the device,
    `capture.default_budget`) bounds the maps alive at once: long layers are observed in
    tiles and batches of long inputs split (:meth:`max_rows`). Thumbnail rows of at most
    `map_tokens` real tokens also keep their whole maps (`--map-tokens`). `label_ids` (run key:
    the label words' token ids) reads the answer of the runs read through a prompt in the same
    pass (`prompt_predictions`; the model must be loaded with its language-model head)."""

    kind = "statistics"
    table = "head_stats"
    columns = OBSERVED_COLUMNS

    def __init__(
        self,
        encoder: LoadedModel,
        value_zeroing: str | None = None,
        mixing: bool = True,
        massive: bool = True,
        attention_memory: int | None = None,
        map_tokens: int = MAP_MAX_TOKENS,
        label_ids: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        self.encoder = encoder
        self.label_ids = {key: tuple(ids) for key, ids in (label_ids or {}).items()}
        self._unit: WorkUnit | None = None  # the unit being read (`begin_unit`)
        self._answers: np.ndarray | None = None  # the last batch's label-word logits (prompted runs)
        self.attention_memory = attention_memory
        self.budget = attention_memory or capture.default_budget(encoder.device)
        outputs = encoder.outputs
        grams = value_norm_grams({m: o.dense for m, o in outputs.items()}, encoder.num_heads)
        mixer = ContextMixing(outputs, encoder.num_heads) if mixing and ContextMixing.applies(outputs) else None
        self.observer = HeadStatistics(grams, len(encoder.attention_layers), mixing=mixer, map_tokens=map_tokens)
        self.kinds = TokenKinds(encoder.tokenizer, causal=encoder.causal)
        self.massive = massive
        self.value_zeroing = value_zeroing
        self._zeroing = None
        self._vz_null: list[int] = []
        if value_zeroing is not None:
            from attnwh.ingest.measures.value_zeroing import VZ_COLUMNS, ValueZeroing

            self._zeroing = ValueZeroing(encoder, value_zeroing, memory=self.budget)
            # A decoder has no [SEP] and no visible next token: NULL, as in head_stats.
            self._vz_null = [VZ_COLUMNS.index(c) for c in rows.CAUSAL_NULL_VZ_COLUMNS] if encoder.causal else []
        self._massive: dict[str, np.ndarray] | None = None  # the last batch's scan
        self._tokens: dict[int, list[str]] = {}  # the last batch's real tokens, by row
        self._zeroed: np.ndarray | None = None  # the last batch's value-zeroing shares

    @classmethod
    def for_options(
        cls, encoder: LoadedModel, options: IngestOptions, tasks: Sequence[PreparedTask] = ()
    ) -> StatisticsCapture:
        """The capture of a statistics run with `options`' lenses and budget; `tasks` read
        through a prompt have their answers read too."""
        from attnwh.ingest.runs.prompted import label_ids_by_run

        return cls(
            encoder,
            value_zeroing=options.value_zeroing,
            mixing=options.mixing,
            massive=options.massive,
            attention_memory=options.attention_memory,
            map_tokens=options.map_tokens,
            label_ids=label_ids_by_run(tasks),
        )

    def models(self) -> dict[str, LoadedModel]:
        return {"model_id": self.encoder}

    def settings(self) -> dict[str, Any]:
        return {
            "value_zeroing": self.value_zeroing,
            "mixing": self.observer.mixing is not None,
            "massive": self.massive,
            "attention_memory": self.attention_memory,
            "map_tokens": self.observer.map_tokens,
            "label_ids": {key: list(ids) for key, ids in self.label_ids.items()},
        }

    def begin_unit(self, unit: WorkUnit) -> None:
        self._unit = unit

    def max_rows(self, length: int) -> int:
        return capture.batch_rows(self.budget, self.encoder.num_heads, length, self.observer, self.encoder.tiles)

    @torch.inference_mode()
    def run(self, batch: dict[str, torch.Tensor], thumbnail_rows: Sequence[int] = ()) -> np.ndarray:
        """Statistics of one collated batch (see `encoding.collate`)."""
        key_mask = batch["attention_mask"].bool()
        masks = self.kinds.masks(batch["input_ids"], batch.get("attention_mask"))
        self.observer.begin(key_mask, *masks, thumbnail_rows=list(thumbnail_rows))
        ids = batch["input_ids"]
        self._tokens = {  # of the rows whose whole maps are kept
            r: list(self.encoder.tokenizer.convert_ids_to_tokens(ids[r][key_mask[r]].tolist()))
            for r in self.observer.map_rows
        }
        mixing = self.observer.mixing
        label_ids = self.label_ids.get(self._unit.run_key) if self._unit is not None else None
        inputs = forward_inputs(self.encoder.model, batch)
        self._answers = None
        with (
            capture.attention_memory(self.budget),
            capture.observing(self.observer),
            mixing.hooks() if mixing else contextlib.nullcontext(),
        ):
            if label_ids is None:
                out = self.encoder.model(**inputs, output_hidden_states=self.massive)
            else:  # the prompt's answer from the same pass, projected to the vocabulary at the last tokens only
                scores, out = forward_label_scores(
                    self.encoder.model, inputs, label_ids, output_hidden_states=self.massive
                )
                self._answers = scores.float().cpu().numpy()
        self._massive = scan(out.hidden_states[1:], key_mask, *masks) if self.massive else None
        self._zeroed = self._zeroing.run(batch, key_mask, *masks) if self._zeroing is not None else None
        if self._zeroed is not None:
            self._zeroed[..., self._vz_null] = np.nan
        values = self.observer.collect()
        if self.encoder.causal:  # no [SEP] and no attendable next token: NULL in head_stats
            values[..., [OBSERVED_COLUMNS.index(c) for c in rows.CAUSAL_NULL_COLUMNS]] = np.nan
        # A layer without a learned sink has no sink share (NULL, not the rounding of 1 - 1).
        no_sink = [not f.learned_sink for f in self.encoder.layers if f.read] or [True] * values.shape[1]
        values[:, np.array(no_sink), :, OBSERVED_COLUMNS.index("to_learned_sink")] = np.nan
        return values

    def extra_rows(self, example_ids: np.ndarray) -> dict[str, pa.Table]:
        """The last batch's head_mixing and layer_mixing rows (post-LN models; value zeroing's
        columns when on), massive_activations rows, and pattern_thumbnails rows of its
        thumbnail rows, with pattern_maps and example_tokens rows for the short ones."""
        out: dict[str, pa.Table] = {}
        mixed = self.observer.collect_mixing()
        zeroed = self._zeroed
        heads = rows.mixing_rows(
            example_ids, mixed[0] if mixed else None, HEAD_COLUMNS, zeroed if self.value_zeroing == "head" else None
        )
        layers = rows.mixing_rows(
            example_ids,
            mixed[1] if mixed else None,
            LAYER_COLUMNS,
            zeroed[:, :, 0] if zeroed is not None and self.value_zeroing == "layer" else None,
        )
        out.update({name: t for name, t in (("head_mixing", heads), ("layer_mixing", layers)) if t is not None})
        if self._massive is not None:
            out["massive_activations"] = rows.massive_rows(example_ids, self._massive)
        chosen, lengths, thumbs = self.observer.collect_thumbnails()
        if chosen:
            out["pattern_thumbnails"] = rows.thumbnail_rows(example_ids[chosen], lengths, thumbs)
        whole, maps = self.observer.collect_maps()
        if whole:
            out["pattern_maps"] = rows.map_rows(example_ids[whole], maps)
            out["example_tokens"] = rows.token_rows(example_ids[whole], [self._tokens[r] for r in whole])
        if self._answers is not None:
            from attnwh.ingest.runs.prompted import prediction_rows

            unit = self._unit
            labels = unit.labels if unit is not None and unit.labels is not None else None
            if labels is None:
                labels = np.full(len(example_ids), -1, dtype=np.int64)
            out["prompt_predictions"] = prediction_rows(example_ids, self._answers, labels)
        return out


def run_fields(encoder: LoadedModel, task: PreparedTask, options: IngestOptions) -> dict[str, object]:
    """The runs columns of a task's run besides its models, kind, key and status."""
    data = task.data
    return {
        "dataset": data.dataset,
        "task": data.task,
        "split": data.split,
        "source": data.source,
        "example_limit": options.limit,
        "seed": options.seed,
        "max_length": task.max_length,
        "n_examples": len(data.examples),
        "n_truncated": int(task.encoded.truncated.sum()),
        "device": str(encoder.device),
        "dtype": str(encoder.dtype).removeprefix("torch."),
        "batch_size": options.batch_size,
        "versions": json.dumps(rows.library_versions()),
        "command": options.command,
        # The prompt a causal LM was read through (part of the identity): NULL for other runs.
        "prompt": json.dumps(task.identity["prompt"]) if "prompt" in task.identity else None,
    }


def run_info(
    kind: str, models: Mapping[str, LoadedModel], task: PreparedTask, options: IngestOptions
) -> dict[str, object]:
    """A run's description for a shard folder (`shards.write_run_info`): what `attnwh merge`
    creates the run from."""
    encoder = models["model_id"]
    return {
        "run_key": task.run_key,
        "kind": kind,
        "identity": task.identity,
        "fields": run_fields(encoder, task, options),
        "models": {column: e.facts() for column, e in models.items()},
        "n_examples": len(task.data.examples),
    }


def check_whole(con: duckdb.DuckDBPyConnection, run_id: int, n_examples: int) -> str:
    """'complete' when the run holds every one of its examples; otherwise raises (a unit
    that never came back must not leave a run that looks whole)."""
    n_done = warehouse.one_row(con, "SELECT count(*) FROM run_examples WHERE run_id = ?", [run_id])[0]
    if n_done != n_examples:
        raise AttnwhError(f"run {run_id} holds {n_done} of its {n_examples} examples; rerun the command to resume it")
    return "complete"


def open_task_run(
    con: duckdb.DuckDBPyConnection,
    model_ids: dict[str, int],
    kind: str,
    encoder: LoadedModel,
    task: PreparedTask,
    options: IngestOptions,
) -> runs.RunState:
    """Store the task's examples and find, resume or create its run (kind `kind`), in one
    transaction."""
    with warehouse.transaction(con):
        rows.insert_examples(con, task.data, task.example_ids.tolist())
        return runs.create_run(
            con, kind, task.identity, {**model_ids, **run_fields(encoder, task, options)}, replace=options.replace
        )


def prepare_statistics(
    model: str | LoadedModel | None,
    loaded: Sequence[TaskData],
    options: IngestOptions,
    device: str = "auto",
    dtype: str = "float32",
    prompts: Sequence[Any] | None = None,
) -> Prepared:
    """`attnwh ingest` of `model` on the `loaded` tasks, checked and set up: the model loaded
    (read through `prompts`, one per task, a causal language model with its head, checked to
    be one), every task sampled, tokenized and checked to fit the attention memory."""
    from attnwh.ingest.runs.prepared import Prepared, model_line
    from attnwh.ingest.runs.prepared import loaded as loaded_model

    encoder = loaded_model(model, device, dtype, language_model=prompts is not None)
    if prompts is not None:
        from attnwh.ingest.runs.prompted import check_language_model, prompted_task

        check_language_model(encoder, "")
    prepared = prepare_tasks(encoder, loaded, options)
    if prompts is not None:
        prepared = [prompted_task(encoder, task, p, options) for task, p in zip(prepared, prompts, strict=True)]
    capture_ = StatisticsCapture.for_options(encoder, options, prepared)
    check_fits(capture_, prepared)
    return Prepared(
        f"{model_line(encoder)}, {options.max_length or encoder.max_length} tokens max",
        lambda db, engine, on_start, on_batch: ingest_runs(db, capture_, prepared, options, on_start, on_batch, engine),
        lambda engine, on_start, on_batch: shard_runs(capture_, prepared, options, engine, on_start, on_batch),
    )


def prepare_compare(
    base: str | LoadedModel | None,
    tuned: str | LoadedModel,
    loaded: Sequence[TaskData],
    options: IngestOptions,
    device: str = "auto",
    dtype: str = "float32",
) -> Prepared:
    """`attnwh ingest compare` of `base` and `tuned` on the `loaded` tasks, checked and set up:
    both models loaded and checked to have the same layers and heads, every task sampled,
    tokenized and checked to fit."""
    from attnwh.ingest.measures.change import ChangeCapture, check_compatible, prepare_comparison
    from attnwh.ingest.runs.prepared import Prepared, model_line
    from attnwh.ingest.runs.prepared import loaded as loaded_model

    base_model = loaded_model(base, device, dtype)
    tuned_model = loaded_model(tuned, device, dtype)
    check_compatible(base_model, tuned_model)
    prepared = prepare_comparison(base_model, tuned_model, loaded, options)
    capture_ = ChangeCapture(base_model, tuned_model, options.attention_memory)
    check_fits(capture_, prepared)
    return Prepared(
        f"[bold]{base_model.name}[/] → {model_line(tuned_model)}, {prepared[0].max_length} tokens max",
        lambda db, engine, on_start, on_batch: ingest_runs(db, capture_, prepared, options, on_start, on_batch, engine),
        lambda engine, on_start, on_batch: shard_runs(capture_, prepared, options, engine, on_start, on_batch),
    )
