"""Units of work of the heavy stages (statistics, compare, the ablation sweep), and who
computes them.

A run's examples are cut once into length-bucketed batches over *all* its examples, in an
order fixed by the examples alone; an ablation sweep may further split each batch's
configurations into groups that share a first disabled layer, so prefix caching still
applies inside a group. That list of units is the same on every machine and every rerun:
a static shard (`--shard I/N`) takes every N-th unit, a Ray worker takes what the driver
hands it, the single process goes through them in order. A unit carries what a worker
needs besides the model (token ids, labels), so a worker holds only the model.

Computing a unit gives a :class:`~attnwh.ingest.runs.shards.Part`, the rows it adds to
each table without run_id, which `attnwh.ingest.runs.rows.store_part` stores: directly,
or from a Parquet shard.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import torch

from attnwh.ingest.model.encoding import EncodedTask, collate, length_buckets
from attnwh.ingest.runs import rows
from attnwh.ingest.runs.shards import Part

if TYPE_CHECKING:
    from attnwh.ingest.runs.loop import BatchCapture


@dataclass(frozen=True)
class WorkUnit:
    """One batch of a run's examples (and, for an ablation sweep, one group of its
    configurations), with everything a worker needs besides the model."""

    run_key: str
    name: str  # stable: the batch's number, and the group's (000012 or 000012-g03)
    positions: tuple[int, ...]  # the examples' places in the run's task
    example_ids: np.ndarray
    input_ids: tuple[np.ndarray, ...]
    token_type_ids: tuple[np.ndarray, ...] | None
    n_tokens_full: np.ndarray
    thumbnail_rows: tuple[int, ...] = ()  # batch rows whose maps are kept as thumbnails
    labels: np.ndarray | None = None  # ablation: gold labels in the model's numbering
    configs: tuple[int, ...] | None = None  # ablation: the sweep's configuration ids in this unit

    @property
    def encoded(self) -> EncodedTask:
        return EncodedTask(self.input_ids, self.token_type_ids, self.n_tokens_full)

    @property
    def n_tokens(self) -> np.ndarray:
        return self.encoded.n_tokens

    def collate(self, pad_token_id: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The unit's padded batch on `device` (see `encoding.collate`)."""
        return collate(self.encoded, range(len(self.input_ids)), pad_token_id, device)

    def split(self, size: int) -> list[WorkUnit]:
        """The unit cut into pieces of at most `size` examples, in order (the same name: the
        pieces' rows are stored together as the unit's part)."""
        if len(self.positions) <= size:
            return [self]
        pieces = []
        for start in range(0, len(self.positions), size):
            rows = slice(start, start + size)
            pieces.append(
                dataclasses.replace(
                    self,
                    positions=self.positions[rows],
                    example_ids=self.example_ids[rows],
                    input_ids=self.input_ids[rows],
                    token_type_ids=None if self.token_type_ids is None else self.token_type_ids[rows],
                    n_tokens_full=self.n_tokens_full[rows],
                    thumbnail_rows=tuple(r - start for r in self.thumbnail_rows if start <= r < start + size),
                    labels=None if self.labels is None else self.labels[rows],
                )
            )
        return pieces

    def done_rows(self) -> pa.Table:
        """run_examples rows marking the unit's examples done."""
        return rows.done_rows(self.example_ids, self.n_tokens, self.n_tokens_full, self.input_ids)


class Worker(Protocol):
    """Computes units: holds the model(s) of one kind of run."""

    def compute(self, unit: WorkUnit) -> Part: ...


def plan_units(
    run_key: str,
    encoded: EncodedTask,
    example_ids: np.ndarray,
    batch_size: int,
    done: Mapping[int | None, frozenset[int]],
    *,
    thumbnails: frozenset[int] = frozenset(),
    labels: np.ndarray | None = None,
    groups: Sequence[tuple[int, ...]] | None = None,
) -> list[WorkUnit]:
    """The run's units still to compute, in order.

    Batches are bucketed by length over all the run's examples, so the same batch has the
    same name everywhere; `done[g]` holds the example ids already stored for group `g`
    (`done[None]` without groups), and a unit keeps only the examples still to do.
    `groups` splits an ablation sweep's configuration ids; None computes everything at once.
    """
    units = []
    for b, indices in enumerate(length_buckets(encoded.n_tokens, range(len(example_ids)), batch_size)):
        for g, configs in enumerate(groups) if groups is not None else [(None, None)]:
            finished = done.get(g, frozenset())
            chosen = [i for i in indices if int(example_ids[i]) not in finished]
            if not chosen:
                continue
            ids = example_ids[chosen]
            units.append(
                WorkUnit(
                    run_key=run_key,
                    name=f"{b:06d}" if g is None else f"{b:06d}-g{g:02d}",
                    positions=tuple(chosen),
                    example_ids=ids,
                    input_ids=tuple(encoded.input_ids[i] for i in chosen),
                    token_type_ids=None
                    if encoded.token_type_ids is None
                    else tuple(encoded.token_type_ids[i] for i in chosen),
                    n_tokens_full=encoded.n_tokens_full[chosen],
                    thumbnail_rows=tuple(k for k, eid in enumerate(ids.tolist()) if eid in thumbnails),
                    labels=None if labels is None else labels[chosen],
                    configs=configs,
                )
            )
    return units


def shard_slice(units: Sequence[WorkUnit], shard: tuple[int, int]) -> list[WorkUnit]:
    """The units of static shard I of N (1-based): every N-th unit by batch number, so every
    group of a batch goes to the same shard and the shards stay even."""
    index, count = shard
    return [u for u in units if int(u.name[:6]) % count == index - 1]


class CaptureWorker:
    """Computes units of a statistics or compare run with its :class:`BatchCapture`."""

    def __init__(self, capture: BatchCapture) -> None:
        self.capture = capture

    def compute(self, unit: WorkUnit) -> Part:
        """The unit's rows; a batch of long inputs whose maps would not fit the attention
        memory budget is run in pieces (`BatchCapture.max_rows`)."""
        capture = self.capture
        encoder = capture.encoder
        tick = time.perf_counter()
        pieces = []
        for piece in unit.split(max(1, capture.max_rows(int(unit.n_tokens.max())))):
            batch = piece.collate(encoder.tokenizer.pad_token_id, encoder.device)
            capture.begin_unit(piece)
            values = capture.run(batch, piece.thumbnail_rows)
            tables = {
                capture.table: rows.grid_rows(piece.example_ids, values, capture.columns),
                **capture.extra_rows(piece.example_ids),
                "run_examples": piece.done_rows(),
            }
            pieces.append(rows.number_layers(tables, encoder.attention_layers))
        names = dict.fromkeys(name for piece in pieces for name in piece)  # a piece may lack a table
        tables = {name: pa.concat_tables([p[name] for p in pieces if name in p]) for name in names}
        return Part(unit.run_key, unit.name, tables, True, time.perf_counter() - tick, str(encoder.device))
