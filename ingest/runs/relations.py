"""Storing `attnwh ingest relations` runs: one run per input file (task `dependencies` for a
CoNLL-U file, `frames` for a FrameNet file), written with all its rows in one transaction at
the end, so a run row exists only when its rows do. A stored run with the same identity (model
weights, file contents, --limit, --seed and what is measured) is kept unless `replace`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnwh.errors import DataError
from attnwh.ingest.measures import frames
from attnwh.ingest.measures.dependencies import Sentence, measure
from attnwh.ingest.measures.frames import FrameData
from attnwh.ingest.model.loading import LoadedModel, require_every_layer


@dataclass(frozen=True)
class Measured:
    """What one run measured: rows per table, and the run's counts."""

    tables: dict[str, dict[str, list]]
    n_examples: int
    n_skipped: int
    seconds: float
    result: Any  # the analysis' own result object, handed back in the summary


@dataclass(frozen=True)
class RelationsSummary:
    run_id: int
    outcome: str  # "complete", "replaced" or "already complete"
    result: Any | None  # None when already complete
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
    """Settings of a relations run: the seeded --limit sample, batch size, --replace, and the
    command line recorded with the run."""

    limit: int | None = None
    seed: int = 42
    batch_size: int = 32
    replace: bool = False
    command: str | None = None


ProgressStart = Callable[[int], None]
ProgressBatch = Callable[[int], None]


def ingest_relations(
    db_path: Path,
    encoder: LoadedModel,
    path: Path,
    sentences: Sequence[Sentence],
    options: RelationsOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> RelationsSummary:
    """Measure and store one CoNLL-U run (task `dependencies`): dependency_heads,
    dependency_baselines and feature_attention, in one transaction."""

    def run() -> Measured:
        result = measure(encoder, sentences, options.batch_size, on_batch)
        tables = {
            "dependency_heads": result.counts.head_rows(),
            "dependency_baselines": result.counts.baseline_rows(),
        }
        if result.features is not None and result.features.n_sentences:
            tables["feature_attention"] = result.features.rows()
        return Measured(tables, result.n_sentences, result.n_skipped, result.seconds, result)

    measures = {"measures": "dependencies+features"}
    return _ingest_run(db_path, encoder, path, options, "dependencies", measures, run, len(sentences), on_start)


def ingest_frames(
    db_path: Path,
    encoder: LoadedModel,
    path: Path,
    data: FrameData,
    options: RelationsOptions,
    on_start: ProgressStart | None = None,
    on_batch: ProgressBatch | None = None,
) -> RelationsSummary:
    """Measure and store one FrameNet run (task `frames`): frame_heads and frame_filters."""

    def run() -> Measured:
        result = frames.measure_frames(encoder, data, options.batch_size, on_batch)
        if result.counts.n == 0:
            raise DataError(f"{path}: no annotation could be measured (sentences too long for {encoder.name})")
        filters = {k: [v] for k, v in data.filters.items()}
        filters.update(
            sentences=[len({link.sentence for link in data.links})],
            measured=[result.counts.n],
            max_sentence_words=[frames.MAX_SENTENCE_WORDS],
            max_element_words=[frames.MAX_ELEMENT_WORDS],
            min_distance=[frames.MIN_DISTANCE],
        )
        tables = {"frame_heads": result.counts.rows(), "frame_filters": filters}
        return Measured(tables, result.n_annotations, result.n_skipped, result.seconds, result)

    measures = {
        "measures": "frames",
        "filters": [frames.MAX_SENTENCE_WORDS, frames.MAX_ELEMENT_WORDS, frames.MIN_DISTANCE],
    }
    return _ingest_run(db_path, encoder, path, options, "frames", measures, run, len(data.links), on_start)


def _ingest_run(
    db_path: Path,
    encoder: LoadedModel,
    path: Path,
    options: RelationsOptions,
    task: str,
    measures: Mapping[str, object],
    measure: Callable[[], Measured],
    n_todo: int,
    on_start: ProgressStart | None,
) -> RelationsSummary:
    """Skip a stored run (unless `options.replace`), else measure and write it in one
    transaction. `measures` (what the run measures) goes into the run's identity."""
    import pyarrow as pa

    from attnwh.ingest.runs.rows import library_versions
    from attnwh.sql import runs, warehouse

    require_every_layer(encoder, "relations")
    identity = run_identity(encoder, path, options.limit, options.seed, **measures)
    con = warehouse.connect(db_path)
    try:
        found = runs.find_run(con, "relations", identity)
        if found and not options.replace:
            return RelationsSummary(found.run_id, "already complete", None, task)
        if on_start:
            on_start(n_todo)
        measured = measure()
        with warehouse.transaction(con):
            model_id = runs.upsert_model(con, encoder.facts())
            state = runs.create_run(
                con,
                "relations",
                identity,
                {
                    "model_id": model_id,
                    "dataset": Path(path).name,
                    "task": task,
                    "split": Path(path).stem,
                    "source": str(path),
                    "example_limit": options.limit,
                    "seed": options.seed,
                    "max_length": encoder.max_length,
                    "n_examples": measured.n_examples,
                    "n_truncated": measured.n_skipped,  # skipped: longer than max_length or a decoder's sliding window (or unusable)
                    "device": str(encoder.device),
                    "dtype": str(encoder.dtype).removeprefix("torch."),
                    "batch_size": options.batch_size,
                    "versions": json.dumps(library_versions()),
                    "command": options.command,
                },
                replace=True,  # a stored run is only here to be replaced
            )
            for table, rows in measured.tables.items():
                n = len(next(iter(rows.values())))
                warehouse.insert_arrow(con, table, {"run_id": pa.array([state.run_id] * n, pa.int32()), **rows})
            runs.finish_run(con, state.run_id, "complete", measured.seconds)
        return RelationsSummary(state.run_id, state.outcome, measured.result, task)
    finally:
        con.close()
