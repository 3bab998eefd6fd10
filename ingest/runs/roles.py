"""Storing `attnwh ingest roles` runs: one run per probe kind (task `induction` or `needle`),
its probes (role_probes) and its scores (head_roles) stored unit by unit through the engine
(:mod:`attnwh.ingest.runs.engine`), as a statistics run's: an interrupted run resumes with the
probes it lacks, static shards merge into it, Ray computes it. Its settings (role_settings)
are stored with the run. A stored run with the same identity (model weights, probe kind and
settings, seed, local window and, for needles, the text) is kept unless `replace`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch

from attnwh.ingest.measures import roles
from attnwh.ingest.model import capture
from attnwh.ingest.model.loading import LoadedModel
from attnwh.ingest.runs.loop import PreparedTask
from attnwh.ingest.runs.prepared import Prepared
from attnwh.ingest.sources import probes
from attnwh.ingest.sources.examples import Example, TaskData

if TYPE_CHECKING:
    from attnwh.ingest.runs.engine import EngineOptions, ShardSummary
    from attnwh.ingest.runs.units import WorkUnit

ROLE_TEXT_DEFAULT = "prose"
# The probe kinds a head-roles run reads (the loss sweep also reads pass keys).
ROLE_KINDS = ("induction", "needle", "random", "text")
# Probe kinds read from the user's text (or the prose sample), and their defaults' lengths.
TEXT_KINDS = ("needle", "text")
# Gu et al. (2025) measured sinks on inputs of 64 tokens.
SINK_LENGTH_DEFAULT = 64


@dataclass(frozen=True)
class RoleSettings:
    """What one probe kind's run is made of, besides the model."""

    kind: str  # induction | needle | random | text
    examples: int
    seed: int
    local_window: int
    repeat_length: int | None = None  # induction
    context_length: int | None = None  # needle, random, text: tokens per probe
    depths: tuple[float, ...] | None = None  # needle
    text_name: str | None = None  # needle, text: the sample's name or the file's path
    documents: tuple[str, ...] = ()  # needle, text: the haystack's documents

    @property
    def text_hash(self) -> str | None:
        if self.kind not in TEXT_KINDS:
            return None
        joined = "\n\n".join(self.documents).encode()
        return hashlib.blake2b(joined, digest_size=16).hexdigest()

    def identity(self, encoder: LoadedModel) -> dict[str, object]:
        """The run's identity (`attnwh.sql.runs.run_key`)."""
        return {
            "kind": "roles",
            "weights": encoder.weights_hash,
            "name": encoder.name,
            "dtype": str(encoder.dtype),
            "probe": self.kind,
            "examples": self.examples,
            "seed": self.seed,
            "local_window": self.local_window,
            "repeat_length": self.repeat_length,
            "context_length": self.context_length,
            "depths": list(self.depths) if self.depths is not None else None,
            "text": self.text_hash,
        }

    def row(self) -> dict[str, Any]:
        """The run's role_settings row (without run_id), and its seed."""
        return {
            "kind": self.kind,
            "local_window": self.local_window,
            "repeat_length": self.repeat_length,
            "context_length": self.context_length,
            "depths": list(self.depths) if self.depths is not None else None,
            "text_hash": self.text_hash,
            "seed": self.seed,
        }

    def build(self, encoder: LoadedModel) -> list[probes.ProbeSequence]:
        """The run's probes, from the model's tokenizer."""
        if self.kind == "induction":
            return probes.induction_probes(encoder.tokenizer, self.examples, self.repeat_length or 0, self.seed)
        if self.kind == "random":
            return probes.random_probes(encoder.tokenizer, self.examples, self.context_length or 0, self.seed)
        if self.kind == "text":
            return probes.text_probes(
                encoder.tokenizer, self.documents, self.examples, self.context_length or 0, self.seed
            )
        return probes.needle_probes(
            encoder.tokenizer, self.documents, self.examples, self.context_length or 0, self.depths or (), self.seed
        )


@dataclass(frozen=True)
class RolesSummary:
    run_id: int
    kind: str
    outcome: str  # "complete", "resumed", "replaced" or "already complete"
    n_probes: int
    n_written: int  # probes scored by this invocation
    seconds: float | None  # None when already complete


class RolesCapture:
    """Scores of every head on a batch of probes (:class:`roles.RoleScores`), as a capture of
    the engine: a roles run goes unit by unit like a statistics run, so it resumes, shards and
    runs on Ray. `probes` holds each run's probes (by run key, in task order): a unit names
    its probes by position, and the scores need their segments (halves, needle, answer)."""

    kind = "roles"
    table = "head_roles"
    columns = roles.ROLE_COLUMNS

    def __init__(
        self,
        encoder: LoadedModel,
        probes: Mapping[str, Sequence[probes.ProbeSequence]],
        run_settings: Mapping[str, Mapping[str, Any]],
        local_window: int = roles.DEFAULT_LOCAL_WINDOW,
        attention_memory: int | None = None,
    ) -> None:
        self.encoder = encoder
        # Per run key: its probes, and its role_settings row (with its seed).
        self.probes, self.run_settings = dict(probes), dict(run_settings)
        self.local_window, self.attention_memory = local_window, attention_memory
        self.budget = attention_memory or capture.default_budget(encoder.device)
        self.observer = roles.RoleScores(len(encoder.attention_layers), local_window)
        self._run_key = ""
        self._positions: tuple[int, ...] = ()

    def models(self) -> dict[str, LoadedModel]:
        return {"model_id": self.encoder}

    def settings(self) -> dict[str, Any]:
        return {
            "probes": self.probes,
            "run_settings": self.run_settings,
            "local_window": self.local_window,
            "attention_memory": self.attention_memory,
        }

    def begin_unit(self, unit: WorkUnit) -> None:
        self._run_key, self._positions = unit.run_key, unit.positions

    def max_rows(self, length: int) -> int:
        return capture.batch_rows(self.budget, self.encoder.num_heads, length, self.observer, tiles=True)

    def run(self, batch: dict[str, torch.Tensor], thumbnail_rows: Sequence[int] = ()) -> np.ndarray:
        """(probes, attention layers, heads, ROLE_COLUMNS) of one batch; the probes of a run
        have one length, so the batch holds no padding."""
        self.observer.begin([self.probes[self._run_key][i] for i in self._positions])
        with torch.inference_mode(), capture.attention_memory(self.budget), capture.observing(self.observer):
            self.encoder.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return self.observer.collect()

    def extra_rows(self, example_ids: np.ndarray) -> dict[str, pa.Table]:
        """The batch's role_probes rows (a probe's tokens and segments), and the run's
        role_settings row (stored once: its key is the run)."""
        made = [self.probes[self._run_key][i] for i in self._positions]
        settings = self.run_settings[self._run_key]
        return {
            "role_settings": pa.table(
                {
                    "kind": [settings["kind"]],
                    "local_window": pa.array([settings["local_window"]], pa.int32()),
                    "repeat_length": pa.array([settings["repeat_length"]], pa.int32()),
                    "context_length": pa.array([settings["context_length"]], pa.int32()),
                    "depths": pa.array([settings["depths"]], pa.list_(pa.float64())),
                    "text_hash": pa.array([settings["text_hash"]], pa.string()),
                }
            ),
            "role_probes": pa.table(
                {
                    "example_id": pa.array(example_ids, pa.int64()),
                    "position": pa.array(self._positions, pa.int32()),
                    "kind": [p.kind for p in made],
                    "seed": pa.array([settings["seed"]] * len(made), pa.int32()),
                    "depth": pa.array([p.depth for p in made], pa.float64()),
                    "token_ids": pa.array([list(p.token_ids) for p in made], pa.list_(pa.int32())),
                    "segments": [json.dumps({k: list(v) for k, v in p.segments.items()}) for p in made],
                }
            ),
        }


def role_task(encoder: LoadedModel, settings: RoleSettings, made: Sequence[probes.ProbeSequence]) -> PreparedTask:
    """The probes of one kind as a task of the engine: examples (decoded text, a needle's
    answer as the label, so that `attnwh show` draws a probe), token ids, stable ids and the
    run's identity."""
    from attnwh.ingest.model.encoding import EncodedTask

    def decode(ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(encoder.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    examples = tuple(
        Example(
            position=i,
            guid=f"{p.kind}-{settings.seed}-{i}",
            text_a=decode(p.token_ids, skip_special_tokens=True),
            text_b=None,
            label=decode([p.token_ids[j] for j in p.span("answer")]).strip() if p.kind == "needle" else None,
            token_ids=p.token_ids,
        )
        for i, p in enumerate(made)
    )
    source = settings.text_name if settings.kind in TEXT_KINDS else "random tokens"
    data = TaskData("probes", settings.kind, f"seed {settings.seed}", examples, None, source or "")
    lengths = np.array([len(p) for p in made], dtype=np.int64)
    encoded = EncodedTask(tuple(np.asarray(p.token_ids, dtype=np.int64) for p in made), None, lengths)
    ids = np.array(probe_example_ids(settings, made), dtype=np.int64)
    return PreparedTask(data, encoded, ids, int(lengths.max()), settings.identity(encoder))


def prepare_roles(
    model: str,
    kinds: Sequence[str],
    *,
    text: Path | None = None,
    examples: int = 10,
    repeat_length: int = 50,
    context_length: int | None = None,
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0),
    sink_length: int = SINK_LENGTH_DEFAULT,
    seed: int = 42,
    local_window: int = roles.DEFAULT_LOCAL_WINDOW,
    device: str = "auto",
    attention_memory: int | None = None,
    batch_size: int = 8,
    replace: bool = False,
    command: str | None = None,
) -> Prepared:
    """`attnwh ingest roles` of `model`, one run per probe kind of `kinds` (induction,
    needle, random, text), checked and set up: the needles' and text probes' text read, the
    model refused from its config before its weights load unless it is a decoder, then loaded;
    the probes' lengths checked against its limit (a needle probe: `context_length`, by default
    1024 or the model's limit; a random or text probe: `sink_length`) and every probe built
    before any model time."""
    from attnwh.errors import DataError, UsageError
    from attnwh.ingest.model.loading import (
        load_model,
        read_config,
        require_language_model,
        require_language_model_in_config,
    )
    from attnwh.ingest.runs.prepared import model_line
    from attnwh.ingest.sources.text import load_sample_text, load_text, special_tokens

    unknown = sorted(set(kinds) - set(ROLE_KINDS))
    if not kinds or unknown:
        raise UsageError(f"--probes {','.join(kinds)!r}: choose from {', '.join(ROLE_KINDS)} (comma-separated)")
    if text is not None and not Path(text).is_file():
        raise DataError(f"text file {text} does not exist")
    documents: tuple[str, ...] = ()
    if set(kinds) & set(TEXT_KINDS):
        data = load_text(text) if text is not None else load_sample_text(ROLE_TEXT_DEFAULT)
        documents = tuple(e.text_a for e in data.examples)
    what = "head roles (previous-token, induction, retrieval)"
    require_language_model_in_config(read_config(model), model, what, head=False)  # before the weights load
    encoder = load_model(model, device, "float32")
    require_language_model(encoder, what, head=False)
    length = context_length or min(1024, encoder.max_length)
    bos = len(special_tokens(encoder.tokenizer)[0])
    if "induction" in kinds and 2 * repeat_length + bos > encoder.max_length:
        raise UsageError(
            f"--repeat-length {repeat_length}: twice it is over {encoder.name}'s limit of {encoder.max_length} tokens"
        )
    if "needle" in kinds and length > encoder.max_length:
        raise UsageError(f"--context-length {length} is over {encoder.name}'s limit of {encoder.max_length} tokens")
    if {"random", "text"} & set(kinds) and sink_length > encoder.max_length:
        raise UsageError(f"--sink-length {sink_length} is over {encoder.name}'s limit of {encoder.max_length} tokens")
    text_name = str(Path(text).resolve()) if text is not None else f"sample:{ROLE_TEXT_DEFAULT}"
    plans = [
        RoleSettings(
            kind,
            examples,
            seed,
            local_window,
            repeat_length=repeat_length if kind == "induction" else None,
            context_length=length if kind == "needle" else sink_length if kind in ("random", "text") else None,
            depths=depths if kind == "needle" else None,
            text_name=text_name if kind in TEXT_KINDS else None,
            documents=documents if kind in TEXT_KINDS else (),
        )
        for kind in kinds
    ]
    made = [plan.build(encoder) for plan in plans]  # every probe before any model time: bad settings fail at once
    header = f"{model_line(encoder)}; {', '.join(f'{len(m)} {p.kind} probes' for p, m in zip(plans, made))}"
    planned = list(zip(plans, made))
    settings: dict[str, Any] = {"attention_memory": attention_memory, "batch_size": batch_size, "command": command}
    return Prepared(
        header,
        lambda db, engine, on_start, on_batch: ingest_roles(
            db, encoder, planned, replace=replace, on_start=on_start, on_batch=on_batch, engine=engine, **settings
        ),
        lambda engine, on_start, on_batch: shard_roles(
            encoder, planned, engine, on_start=on_start, on_batch=on_batch, **settings
        ),
    )


def _captured(
    encoder: LoadedModel,
    plans: Sequence[tuple[RoleSettings, Sequence[probes.ProbeSequence]]],
    attention_memory: int | None,
    batch_size: int,
    replace: bool,
    command: str | None,
) -> tuple[list[PreparedTask], RolesCapture, Any]:
    """The runs' tasks, the capture that scores them and the engine's options."""
    from attnwh.ingest.runs.loop import IngestOptions

    tasks = [role_task(encoder, settings, made) for settings, made in plans]
    capture_ = RolesCapture(
        encoder,
        {t.run_key: made for t, (_, made) in zip(tasks, plans)},
        {t.run_key: settings.row() for t, (settings, _) in zip(tasks, plans)},
        plans[0][0].local_window,
        attention_memory,
    )
    first = plans[0][0]
    options = IngestOptions(
        limit=first.examples, seed=first.seed, batch_size=batch_size, replace=replace, command=command, thumbnails=0
    )
    return tasks, capture_, options


def ingest_roles(
    db_path: Path,
    encoder: LoadedModel,
    plans: Sequence[tuple[RoleSettings, Sequence[probes.ProbeSequence]]],
    *,
    attention_memory: int | None = None,
    batch_size: int = 8,
    replace: bool = False,
    command: str | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    engine: EngineOptions | None = None,
) -> list[RolesSummary]:
    """One run per probe kind (`plans`: its settings and the probes :meth:`RoleSettings.build`
    gives): skip a complete one (unless `replace`), resume an interrupted one, else score and
    store it unit by unit. `engine` runs the units on Ray; by default, here. A static shard
    goes through :func:`shard_roles`."""
    from attnwh.ingest.runs.loop import ingest_runs

    tasks, capture_, options = _captured(encoder, plans, attention_memory, batch_size, replace, command)
    summaries = ingest_runs(db_path, capture_, tasks, options, on_start, on_batch, engine)
    return [
        RolesSummary(
            s.run_id,
            t.data.task,
            s.outcome,
            s.n_examples,
            s.n_written,
            None if s.outcome == "already complete" else s.seconds,
        )
        for s, t in zip(summaries, tasks)
    ]


def shard_roles(
    encoder: LoadedModel,
    plans: Sequence[tuple[RoleSettings, Sequence[probes.ProbeSequence]]],
    engine: EngineOptions,
    *,
    attention_memory: int | None = None,
    batch_size: int = 8,
    command: str | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[ShardSummary]:
    """Static shard `engine.shard` of every probe kind's run, into `engine.shard_dir`, for
    `attnwh merge`."""
    from attnwh.ingest.runs.loop import shard_runs

    tasks, capture_, options = _captured(encoder, plans, attention_memory, batch_size, False, command)
    return shard_runs(capture_, tasks, options, engine, on_start, on_batch)


def probe_example_ids(settings: RoleSettings, made: Sequence[probes.ProbeSequence]) -> list[int]:
    """A stable signed 64-bit example id per probe, from its kind, seed, number and token ids
    (the same probe read again, by another run of the same model, has the same id)."""
    out = []
    for i, probe in enumerate(made):
        key = json.dumps(["probes", probe.kind, settings.seed, i, list(probe.token_ids)])
        out.append(int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True))
    return out
