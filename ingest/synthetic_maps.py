"""Synthetic attention maps of known type, to validate the pattern classifier.

Kovaleva et al.'s hand labels were never released, so the rules in `patterns.py` are checked
on maps whose class is known by construction. Each map is a row-stochastic n × n matrix laid
out like a real input: [CLS] at 0 and [SEP] closing each segment as a BERT tokenizer places
them (``[CLS] a… [SEP] b… [SEP]``), or RoBERTa's ``<s> a… </s></s> b… </s>`` for a quarter of
the pairs; lengths 8 to 128 (pairs from 10: segments of at least 3 tokens); single sentences
and pairs; a "." closing most segments and a
few commas. Each type's structure holds a random share of every row, the rest is a random
Dirichlet row, and the whole map is then mixed with a random map (noise weight up to 0.25):

- vertical: 55–95 % of each row on one to three columns: [CLS], the [SEP]s, or a "." / ","
  column (Clark et al.'s stripes on punctuation);
- diagonal: 55–95 % on the previous and/or next token (sometimes with the token itself);
- vertical+diagonal: 30–55 % on columns and 30–55 % on the band;
- block (pairs only, segments of at least 5 tokens): 70–95 % of each ordinary token's row
  spread over the tokens of its own segment;
- heterogeneous: Dirichlet rows, from peaked (α = 0.2) to flat (α = 2).

Seeded: the same seed gives the same maps. `features` runs the maps through the very
observer that ingest uses, so the validation covers the code that labels real maps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import patterns
from .statistics import OBSERVED_COLUMNS, HeadStatistics


@dataclass(frozen=True)
class SyntheticMap:
    attention: np.ndarray  # (n, n), rows sum to 1
    cls: np.ndarray  # (n,) bool
    sep: np.ndarray
    punct: np.ndarray
    label: int  # index into patterns.PATTERN_TYPES
    pair: bool


def _layout(rng: np.random.Generator, n: int, pair: bool, min_segment: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cls = np.zeros(n, bool)
    sep = np.zeros(n, bool)
    punct = np.zeros(n, bool)
    cls[0] = True
    sep[n - 1] = True
    segments = []
    if pair:
        roberta = rng.random() < 0.25
        content = n - (4 if roberta else 3)
        first = int(rng.integers(min_segment, content - min_segment + 1))
        sep[first + 1] = True
        if roberta:
            sep[first + 2] = True
        segments = [(1, first + 1), (first + (3 if roberta else 2), n - 1)]
    else:
        segments = [(1, n - 1)]
    for start, end in segments:
        if rng.random() < 0.8:
            punct[end - 1] = True  # the closing "."
        commas = rng.random(end - start) < 0.05
        punct[start:end] |= commas
    return cls, sep, punct


def _rows(rng: np.random.Generator, n: int, alpha: float) -> np.ndarray:
    return rng.dirichlet(np.full(n, alpha), size=n)


def _one(rng: np.random.Generator, label: int) -> SyntheticMap:
    block = label == patterns.BLOCK
    pair = block or rng.random() < 0.5
    min_segment = 5 if block else 3
    n = int(rng.integers(2 * min_segment + 4 if pair else 8, 129))
    cls, sep, punct = _layout(rng, n, pair, min_segment)
    rest = _rows(rng, n, float(rng.uniform(0.3, 2.0)))
    idx = np.arange(n)

    def columns(strength: float) -> np.ndarray:
        options = [np.flatnonzero(cls), np.flatnonzero(sep), np.flatnonzero(cls | sep)]
        if punct.any():
            options += [np.flatnonzero(sep | punct)[:3], rng.choice(np.flatnonzero(punct), 1)]
        targets = options[int(rng.integers(len(options)))]
        m = np.zeros((n, n))
        m[:, targets] = rng.dirichlet(np.ones(len(targets)))[None, :]
        return strength * m

    def band(strength: float) -> np.ndarray:
        offsets = [(-1,), (1,), (-1, 1), (0, 1), (-1, 0)][int(rng.integers(5))]
        weights = rng.dirichlet(np.ones(len(offsets)) * 3)
        m = np.zeros((n, n))
        for off, wt in zip(offsets, weights):
            j = np.clip(idx + off, 0, n - 1)  # the edge rows fall back on themselves
            m[idx, j] += wt
        return strength * m

    if label == patterns.HETEROGENEOUS:
        base = _rows(rng, n, float(np.exp(rng.uniform(np.log(0.2), np.log(2.0)))))
    elif label == patterns.VERTICAL:
        s = rng.uniform(0.55, 0.95)
        base = columns(s) + (1 - s) * rest
    elif label == patterns.DIAGONAL:
        s = rng.uniform(0.55, 0.95)
        base = band(s) + (1 - s) * rest
    elif label == patterns.VERTICAL_DIAGONAL:
        sv, sd = rng.uniform(0.3, 0.55), rng.uniform(0.3, 0.55)
        scale = min(1.0, 0.95 / (sv + sd))
        sv, sd = sv * scale, sd * scale
        base = columns(sv) + band(sd) + (1 - sv - sd) * rest
    else:
        segment = np.cumsum(sep) - sep
        ordinary = ~(cls | sep)
        base = rest.copy()
        alpha = float(rng.uniform(0.5, 2.0))
        for i in np.flatnonzero(ordinary):
            own = np.flatnonzero(ordinary & (segment == segment[i]))
            s = rng.uniform(0.7, 0.95)
            row = np.zeros(n)
            row[own] = rng.dirichlet(np.full(len(own), alpha))
            base[i] = s * row + (1 - s) * rest[i]
    noise = rng.uniform(0.0, 0.25)
    attention = (1 - noise) * base + noise * _rows(rng, n, 1.0)
    attention /= attention.sum(1, keepdims=True)
    return SyntheticMap(attention, cls, sep, punct, label, pair)


def generate(per_type: int, seed: int) -> list[SyntheticMap]:
    """`per_type` maps of every pattern type, in a seeded random order."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(patterns.PATTERN_TYPES)), per_type)
    rng.shuffle(labels)
    return [_one(rng, int(label)) for label in labels]


class _Probe(nn.Module):
    """Stands in for an attention module: the observer looks up value norms by module."""


def features(maps: list[SyntheticMap], batch_size: int = 64) -> np.ndarray:
    """(len(maps), len(OBSERVED_COLUMNS)) of each map, from the ingest observer (padded
    batches, as in a real run; the norm-weighted shares see unit values)."""
    probe = _Probe()
    observer = HeadStatistics({id(probe): torch.eye(1)[None]}, num_layers=1)
    out = []
    for start in range(0, len(maps), batch_size):
        chunk = maps[start : start + batch_size]
        width = max(len(m.cls) for m in chunk)
        probs = torch.zeros(len(chunk), 1, width, width)
        masks = torch.zeros(4, len(chunk), width, dtype=torch.bool)
        for b, m in enumerate(chunk):
            n = len(m.cls)
            probs[b, 0, :n, :n] = torch.from_numpy(m.attention).float()
            probs[b, 0, n:, :n] = 1.0 / n  # padding rows: anything, they are ignored
            masks[0, b, :n] = True
            masks[1, b, :n] = torch.from_numpy(m.cls)
            masks[2, b, :n] = torch.from_numpy(m.sep)
            masks[3, b, :n] = torch.from_numpy(m.punct)
        observer.begin(*masks)
        observer.observe(probe, probs, torch.ones(len(chunk), 1, width, 1))
        out.append(observer.collect()[:, 0, 0])
    return np.concatenate(out) if out else np.zeros((0, len(OBSERVED_COLUMNS)), np.float32)


def predicted(maps: list[SyntheticMap], thresholds: patterns.Thresholds = patterns.THRESHOLDS) -> np.ndarray:
    """The rules' codes for `maps` (with other thresholds than ingest's, if given)."""
    feats = features(maps)
    first = OBSERVED_COLUMNS.index(patterns.FEATURE_COLUMNS[0])
    block = torch.from_numpy(feats[:, first : first + len(patterns.FEATURE_COLUMNS)])
    return patterns.classify(block, thresholds).numpy()


def per_class_report(labels: np.ndarray, codes: np.ndarray) -> list[tuple[str, float, float, int]]:
    """(type, precision, recall, support) per pattern type."""
    rows = []
    for k, name in enumerate(patterns.PATTERN_TYPES):
        tp = int(((codes == k) & (labels == k)).sum())
        predicted_k = int((codes == k).sum())
        support = int((labels == k).sum())
        rows.append((name, tp / predicted_k if predicted_k else 0.0, tp / support if support else 0.0, support))
    return rows


def write_warehouse(db, maps: list[SyntheticMap], task: str = "synthetic-maps") -> list[tuple[int, int, int, int, str]]:
    """Store `maps` as one statistics run of a one-layer, one-head stand-in model: features
    and rule types in head_stats, thumbnails in pattern_thumbnails. Returns the maps' true
    types as label rows (run, example, layer, head, type), ready for a labels CSV: a
    labelled fixture for `attnwh patterns train` with known answers."""
    import json

    import pyarrow as pa

    from attnwh.sql import warehouse

    from . import store

    con = warehouse.connect(db)
    try:
        con.begin()
        model_id = con.execute(
            "INSERT INTO models (name, weights_hash, family, architecture, num_layers, num_heads, hidden_size,"
            " max_length) VALUES ('synthetic/maps', ?, 'synthetic', 'SyntheticMaps', 1, 1, 1, 128) RETURNING model_id",
            [f"synthetic-{task}"],
        ).fetchall()[0][0]
        run_id = con.execute(
            "INSERT INTO runs (kind, run_key, model_id, dataset, task, split, source, seed, max_length, n_examples,"
            " n_truncated, device, dtype, batch_size, versions, command, status, started_at, finished_at)"
            " VALUES ('statistics', ?, ?, 'synthetic', ?, 'test', 'attnwh.ingest.synthetic_maps', 0, 128, ?, 0,"
            " 'cpu', 'float32', 64, ?, 'synthetic_maps.write_warehouse', 'complete', current_timestamp,"
            " current_timestamp) RETURNING run_id",
            [f"synthetic-maps-{task}-{len(maps)}", model_id, task, len(maps), json.dumps({"attnwh": "synthetic"})],
        ).fetchall()[0][0]
        ids = np.arange(1, len(maps) + 1, dtype=np.int64) + run_id * 10**9
        names = [patterns.PATTERN_TYPES[m.label] for m in maps]
        lengths = np.array([len(m.cls) for m in maps], dtype=np.int32)
        examples = pa.table({
            "example_id": ids, "dataset": ["synthetic"] * len(maps), "task": [task] * len(maps),
            "split": ["test"] * len(maps), "position": np.arange(len(maps), dtype=np.int32),
            "text_a": [f"synthetic {name} map {i}" for i, name in enumerate(names)], "label": names,
        })
        con.register("new_examples", examples)
        con.execute("INSERT INTO examples BY NAME SELECT * FROM new_examples")
        con.unregister("new_examples")
        values = features(maps)[:, None, None, :]
        thumbs = torch.stack(
            [patterns.thumbnails(torch.from_numpy(m.attention).float()[None, None], [0], [len(m.cls)])[0] for m in maps]
        ).numpy()[:, None]  # (N, layer 1, head 1, size²)
        con.register("rows", pa.table(store.grid_rows(run_id, ids, values, OBSERVED_COLUMNS)))
        con.execute("INSERT INTO head_stats BY NAME SELECT * FROM rows")
        con.unregister("rows")
        con.register("thumbs", store.thumbnail_rows(run_id, ids, lengths, thumbs))
        con.execute("INSERT INTO pattern_thumbnails BY NAME SELECT * FROM thumbs")
        con.unregister("thumbs")
        con.execute(
            "INSERT INTO run_examples SELECT ?, unnest(?), unnest(?), unnest(?), false",
            [run_id, ids.tolist(), lengths.tolist(), lengths.tolist()],
        )
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        con.close()
    return [(run_id, int(i), 0, 0, name) for i, name in zip(ids, names)]
