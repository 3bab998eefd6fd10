"""Storing `attnwh ingest roles` runs: one run per probe kind (task `induction` or `needle`),
written with its probes (role_probes), its settings (role_settings) and its scores (head_roles)
in one transaction at the end, so a run row exists only when its rows do. A stored run with
the same identity (model weights, probe kind and settings, seed, local window and, for needles,
the text) is kept unless `replace`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnwh.ingest.encoder.loading import EncoderModel
from attnwh.ingest.measures import roles
from attnwh.ingest.sources import probes

ROLE_TEXT_DEFAULT = "prose"


@dataclass(frozen=True)
class RoleSettings:
    """What one probe kind's run is made of, besides the model."""

    kind: str  # induction | needle
    examples: int
    seed: int
    local_window: int
    repeat_length: int | None = None  # induction
    context_length: int | None = None  # needle
    depths: tuple[float, ...] | None = None  # needle
    text_name: str | None = None  # needle: the sample's name or the file's path
    documents: tuple[str, ...] = ()  # needle: the haystack's documents

    @property
    def text_hash(self) -> str | None:
        if self.kind != "needle":
            return None
        joined = "\n\n".join(self.documents).encode()
        return hashlib.blake2b(joined, digest_size=16).hexdigest()

    def identity(self, encoder: EncoderModel) -> dict[str, object]:
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

    def build(self, encoder: EncoderModel) -> list[probes.ProbeSequence]:
        """The run's probes, from the model's tokenizer."""
        if self.kind == "induction":
            return probes.induction_probes(encoder.tokenizer, self.examples, self.repeat_length or 0, self.seed)
        return probes.needle_probes(
            encoder.tokenizer, self.documents, self.examples, self.context_length or 0, self.depths or (), self.seed
        )


@dataclass(frozen=True)
class RolesSummary:
    run_id: int
    kind: str
    outcome: str  # "complete", "replaced" or "already complete"
    n_probes: int
    tiles_read: int | None  # None when already complete
    seconds: float | None


def ingest_roles(
    db_path,
    encoder: EncoderModel,
    settings: RoleSettings,
    made: Sequence[probes.ProbeSequence],
    *,
    attention_memory: int | None = None,
    batch_size: int = 8,
    replace: bool = False,
    command: str | None = None,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> RolesSummary:
    """Skip a stored run of these settings (unless `replace`), else score `made` (the probes
    :meth:`RoleSettings.build` gives) and write the run in one transaction."""

    from attnwh.ingest.runs.rows import library_versions
    from attnwh.sql import runs, warehouse

    identity = settings.identity(encoder)
    con = warehouse.connect(db_path)
    try:
        found = runs.find_run(con, "roles", identity)
        if found and not replace and found.status == "complete":
            return RolesSummary(found.run_id, settings.kind, "already complete", len(made), None, None)
        if on_start:
            on_start(len(made))
        result = roles.measure_roles(encoder, made, settings.local_window, attention_memory, batch_size, on_batch)
        with warehouse.transaction(con):
            model_id = runs.upsert_model(con, encoder.facts())
            state = runs.create_run(
                con,
                "roles",
                identity,
                {
                    "model_id": model_id,
                    "dataset": "probes",
                    "task": settings.kind,
                    "split": "generated",
                    "source": settings.text_name if settings.kind == "needle" else "random tokens",
                    "example_limit": settings.examples,
                    "seed": settings.seed,
                    "max_length": max(len(p) for p in made),
                    "n_examples": len(made),
                    "n_truncated": 0,
                    "device": str(encoder.device),
                    "dtype": str(encoder.dtype).removeprefix("torch."),
                    "batch_size": batch_size,
                    "versions": json.dumps(library_versions()),
                    "command": command,
                },
                replace=True,  # a stored run is only here to be replaced
            )
            run = state.run_id
            ids = probe_example_ids(settings, made)
            warehouse.insert_arrow(con, "examples", _example_rows(encoder, settings, made, ids), or_ignore=True)
            warehouse.insert_arrow(con, "run_examples", _run_example_rows(run, made, ids))
            warehouse.insert_arrow(con, "role_settings", _settings_rows(run, settings))
            warehouse.insert_arrow(con, "role_probes", _probe_rows(run, settings.seed, made, ids))
            warehouse.insert_arrow(con, "head_roles", _score_rows(run, result.scores, ids, encoder.attention_layers))
            runs.finish_run(con, run, "complete", result.seconds)
        return RolesSummary(run, settings.kind, state.outcome, len(made), result.tiles_read, result.seconds)
    finally:
        con.close()


def probe_example_ids(settings: RoleSettings, made: Sequence[probes.ProbeSequence]) -> list[int]:
    """A stable signed 64-bit example id per probe, from its kind, seed, number and token ids
    (the same probe read again, by another run of the same model, has the same id)."""
    out = []
    for i, probe in enumerate(made):
        key = json.dumps(["probes", probe.kind, settings.seed, i, list(probe.token_ids)])
        out.append(int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True))
    return out


def _example_rows(
    encoder: EncoderModel, settings: RoleSettings, made: Sequence[probes.ProbeSequence], ids: Sequence[int]
) -> dict[str, object]:
    """`examples` rows of the probes, so that `attnwh show` draws a probe's maps: its text
    (decoded, for display; the maps are of the stored token ids) and, for a needle, its answer
    as the label."""
    import pyarrow as pa

    def decode(ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(encoder.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    return {
        "example_id": pa.array(ids, pa.int64()),
        "dataset": ["probes"] * len(made),
        "task": [p.kind for p in made],
        "split": [f"seed {settings.seed}"] * len(made),
        "position": pa.array(range(len(made)), pa.int32()),
        "guid": [f"{p.kind}-{settings.seed}-{i}" for i, p in enumerate(made)],
        "text_a": [decode(list(p.token_ids), skip_special_tokens=True) for p in made],
        "text_b": pa.array([None] * len(made), pa.string()),
        "label": [
            decode([p.token_ids[i] for i in p.span("answer")]).strip() if p.kind == "needle" else None for p in made
        ],
        "label_id": pa.array([None] * len(made), pa.int32()),
    }


def _run_example_rows(run: int, made: Sequence[probes.ProbeSequence], ids: Sequence[int]) -> dict[str, object]:
    import pyarrow as pa

    lengths = pa.array([len(p) for p in made], pa.int32())
    return {
        "run_id": pa.array([run] * len(made), pa.int32()),
        "example_id": pa.array(ids, pa.int64()),
        "n_tokens": lengths,
        "n_tokens_full": lengths,
        "truncated": [False] * len(made),
        "token_ids": pa.array([list(p.token_ids) for p in made], pa.list_(pa.int32())),
    }


def _settings_rows(run: int, settings: RoleSettings) -> dict[str, object]:
    import pyarrow as pa

    return {
        "run_id": pa.array([run], pa.int32()),
        "kind": [settings.kind],
        "local_window": pa.array([settings.local_window], pa.int32()),
        "repeat_length": pa.array([settings.repeat_length], pa.int32()),
        "context_length": pa.array([settings.context_length], pa.int32()),
        "depths": pa.array([list(settings.depths) if settings.depths is not None else None], pa.list_(pa.float64())),
        "text_hash": [settings.text_hash],
    }


def _probe_rows(run: int, seed: int, made: Sequence[probes.ProbeSequence], ids: Sequence[int]) -> dict[str, object]:
    import pyarrow as pa

    return {
        "run_id": pa.array([run] * len(made), pa.int32()),
        "example_id": pa.array(ids, pa.int64()),
        "position": pa.array(range(len(made)), pa.int32()),
        "kind": [p.kind for p in made],
        "seed": pa.array([seed] * len(made), pa.int32()),
        "depth": pa.array([p.depth for p in made], pa.float64()),
        "token_ids": pa.array([list(p.token_ids) for p in made], pa.list_(pa.int32())),
        "segments": [json.dumps({k: list(v) for k, v in p.segments.items()}) for p in made],
    }


def _score_rows(run: int, scores: np.ndarray, ids: Sequence[int], numbers: Sequence[int]) -> dict[str, object]:
    """head_roles rows from scores (probes, attention layers, heads, columns), each attention
    layer under the model's own number (`numbers`: a hybrid's have gaps); NaN becomes NULL."""
    import pyarrow as pa

    n, layers, heads, _ = scores.shape
    example, layer, head = (
        a.ravel() for a in np.meshgrid(np.arange(n), np.arange(layers), np.arange(heads), indexing="ij")
    )
    flat = scores.reshape(-1, scores.shape[-1]).astype(np.float32)
    rows: dict[str, object] = {
        "run_id": pa.array(np.full(len(example), run, np.int32)),
        "example_id": pa.array(np.asarray(ids, np.int64)[example]),
        "layer": pa.array(np.asarray(numbers, np.int16)[layer]),
        "head": pa.array(head.astype(np.int16)),
    }
    for i, column in enumerate(roles.ROLE_COLUMNS):
        rows[column] = pa.array(flat[:, i], pa.float32(), from_pandas=True)  # NaN: NULL
    return rows
