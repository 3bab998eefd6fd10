"""Storing `attnwh ingest restriction` runs: which key/value groups of a decoder need the whole
context. Each group is restricted alone to its sinks and a window (`attnwh.ingest.measures.
restriction`), ranked by the change in next-token loss on held-out text; then the k least
harmed are restricted together for a grid of k. Every restriction set's loss is kept per
sequence, with a paired test against the unrestricted model, and the KV-cache bytes it saves.
With needle probes (`attnwh.ingest.sources.probes`), every set is also scored on their
teacher-forced answers: the answer's loss and the share of its tokens the model still
predicts (greedy), so a plan says what a restriction does to retrieval from long context.

A run is written with all its rows in one transaction at the end, so a run row exists only
when its rows do; a stored run with the same identity (weights, sequences, settings) is kept
unless `replace`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnwh.errors import DataError, ModelError, UsageError
from attnwh.ingest.encoder.loading import EncoderModel
from attnwh.ingest.measures import lm_loss
from attnwh.ingest.measures import restriction as rs
from attnwh.ingest.measures.significance import benjamini_hochberg
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.probes import ProbeSequence

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


# A batch of sequences, and which of its tokens are scored (None: all but each one's first).
Batch = tuple[dict[str, torch.Tensor], torch.Tensor | None]


def batches(
    sequences: Sequence[tuple[int, ...]], pad_id: int, size: int, scored: Sequence[range] | None = None
) -> list[Batch]:
    """The sequences in batches of `size`, right-padded with `pad_id`; with `scored` (the
    positions scored in each sequence, e.g. a needle probe's answer) the mask of them."""
    out: list[Batch] = []
    for lo in range(0, len(sequences), size):
        chunk = sequences[lo : lo + size]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        scores = torch.zeros((len(chunk), width), dtype=torch.bool) if scored is not None else None
        for row, seq in enumerate(chunk):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
            if scores is not None and scored is not None:
                scores[row, list(scored[lo + row])] = True
        out.append(({"input_ids": ids, "attention_mask": mask}, scores))
    return out


def batched_measure(
    model: torch.nn.Module,
    inputs: Sequence[Batch],
    options: RestrictionOptions,
    on_sets: Callable[[int], None] | None = None,
) -> rs.Measure:
    """:func:`restricted_lm_loss` over every batch of `inputs` (all the sets on one batch, so
    the prefix cache's unrestricted pass is made once per batch), `options.sets_per_pass`
    sets side by side, calling `on_sets` with the sets done on a batch (a progress bar counts
    sets × batches); the sequences in the order of the batches."""

    def measure(sets: Sequence[Collection[rs.Group]]) -> rs.SequenceLoss:
        parts = [
            rs.restricted_lm_loss(
                model,
                batch,
                sets,
                options.sinks,
                options.window,
                options.sets_per_pass,
                options.attention_memory,
                scored,
                options.prefix_cache,
                on_sets,
            )
            for batch, scored in inputs
        ]
        return rs.SequenceLoss(
            np.concatenate([p.nats for p in parts], axis=1),
            np.concatenate([p.tokens for p in parts]),
            np.concatenate([p.correct for p in parts], axis=1),
        )

    return measure


def run_identity(encoder: EncoderModel, text: Text, options: RestrictionOptions, grid: Sequence[int]) -> dict:
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


def ingest_restriction(
    db_path: Path,
    encoder: EncoderModel,
    text: Text,
    options: RestrictionOptions,
    on_start: Callable[[int], None] | None = None,
    on_sets: Callable[[int], None] | None = None,
) -> RestrictionSummary:
    """Rank every key/value group of `encoder` (a causal LM) restricted alone, measure the plan
    for the grid of k, and store both with the per-sequence losses in one transaction."""
    from attnwh.sql import runs, warehouse

    config = encoder.model.config
    layers, groups = rs.cache_layers(config), rs._layers_and_groups(config)[1]
    if tuple(layers) != encoder.attention_layers:  # the config's hybrid layers, as the check at load found them
        raise ModelError(
            f"{encoder.name}'s config says layers {layers} keep a key/value cache, but attnwh reads attention on "
            f"layers {list(encoder.attention_layers)}: the restriction sweep cannot tell which groups are which"
        )
    grid = list(options.grid) if options.grid is not None else default_grid(len(layers) * groups)
    identity = run_identity(encoder, text, options, grid)
    con = warehouse.connect(db_path)
    try:
        found = runs.find_run(con, "restriction", identity)
        if found and not options.replace:
            return RestrictionSummary(found.run_id, "already complete", None, None)
        started = time.perf_counter()
        pad = 0 if encoder.tokenizer.pad_token_id is None else int(encoder.tokenizer.pad_token_id)
        on_text = batches(text.sequences, pad, options.batch_size)
        answers = [p.span("answer") for p in text.needles]
        needle_batches = batches([p.token_ids for p in text.needles], pad, options.batch_size, answers)
        if on_start:
            on_start((1 + len(layers) * groups + len(grid)) * (len(on_text) + len(needle_batches)))
        measured = batched_measure(encoder.model, on_text, options, on_sets)
        on_needles = batched_measure(encoder.model, needle_batches, options, on_sets)
        # The losses call by call: the ranking's sets (nothing, then each group alone, layer
        # by layer), then the plan's; on the text, and on the needles under the same sets.
        texts: list[rs.SequenceLoss] = []
        needles: list[rs.SequenceLoss] = []

        def measure(sets: Sequence[Collection[rs.Group]]) -> rs.SequenceLoss:
            texts.append(measured(sets))
            if text.needles:
                needles.append(on_needles(sets))
            return texts[-1]

        ranking = rs.rank_groups(measure, layers, groups)
        points = rs.plan(measure, ranking, grid)
        seconds = time.perf_counter() - started
        tables = _tables(
            config, ranking, points, options, (texts[0], texts[1]), (needles[0], needles[1]) if needles else None
        )
        with warehouse.transaction(con):
            model_id = runs.upsert_model(con, encoder.facts())
            state = runs.create_run(
                con,
                "restriction",
                identity,
                {
                    "model_id": model_id,
                    "dataset": text.dataset,
                    "task": text.task,
                    "split": text.split,
                    "source": text.source,
                    "example_limit": options.limit,
                    "seed": BOOTSTRAP_SEED,
                    "max_length": options.context_length,
                    "n_examples": len(text.sequences),
                    "n_truncated": 0,
                    "device": str(encoder.device),
                    "dtype": str(encoder.dtype).removeprefix("torch."),
                    "batch_size": options.batch_size,
                    "versions": json.dumps(_versions()),
                    "command": options.command,
                },
                replace=True,  # a stored run is only here to be replaced
            )
            for table, rows in tables.items():
                n = len(next(iter(rows.values())))
                warehouse.insert_arrow(con, table, {"run_id": [state.run_id] * n, **rows})
            runs.finish_run(con, state.run_id, "complete", seconds)
        return RestrictionSummary(state.run_id, state.outcome, ranking, points, seconds)
    finally:
        con.close()


def _versions() -> dict[str, str]:
    from attnwh.ingest.runs.rows import library_versions

    return library_versions()


def _tables(
    config: object,
    ranking: rs.Ranking,
    points: list[rs.Restricted],
    options: RestrictionOptions,
    texts: tuple[rs.SequenceLoss, rs.SequenceLoss],
    needles: tuple[rs.SequenceLoss, rs.SequenceLoss] | None = None,
) -> dict[str, dict[str, list]]:
    """The rows of restriction_runs, restriction_groups, restriction_plan and restriction_losses
    from the losses measured on the text (`texts`) and the needle probes' answers (`needles`),
    each under the ranking's sets (nothing, then each group alone, layer by layer) and the plan's."""
    tokens = texts[0].tokens
    base = ranking.baseline.nats
    singles = paired_tests(base, np.stack([r.nats for r in ranking.groups]), tokens, RESAMPLES, BOOTSTRAP_SEED)
    q = benjamini_hochberg(np.array([t.p_value for t in singles]))
    planned = paired_tests(base, np.stack([p.nats for p in points]), tokens, RESAMPLES, BOOTSTRAP_SEED)
    s, w, dtype = options.sinks, options.window, options.kv_dtype

    def saved(chosen: Collection[rs.Group], context: int) -> int:
        return rs.kv_bytes_saved(config, chosen, context, s, w, dtype)

    columns = ("input", "kind", "layer", "kv_group", "k", "sequence", "nats", "tokens", "correct")
    losses: dict[str, list] = {c: [] for c in columns}

    def add(
        input: str,
        kind: str,
        loss: rs.SequenceLoss,
        row: int,
        layer: int | None = None,
        group: int | None = None,
        k: int | None = None,
    ) -> None:
        n = len(loss.tokens)
        for column, value in zip(columns[:5], (input, kind, layer, group, k), strict=True):
            losses[column] += [value] * n
        losses["sequence"] += list(range(n))
        losses["nats"] += [float(v) for v in loss.nats[row]]
        losses["tokens"] += [int(t) for t in loss.tokens]
        losses["correct"] += [int(c) for c in loss.correct[row]]

    _, groups = rs._layers_and_groups(config)
    place = {layer: i for i, layer in enumerate(rs.cache_layers(config))}

    def alone(group: rs.Group) -> int:
        """The row of `group` among the ranking's sets (attention layer by attention layer)."""
        return 1 + place[group[0]] * groups + group[1]

    rows = [alone(r.groups[0]) for r in ranking.groups]
    measured = {"text": texts} | ({"needle": needles} if needles is not None else {})
    for input, (ranked, planned_sets) in measured.items():
        add(input, "unrestricted", ranked, 0)
        for r, row in zip(ranking.groups, rows, strict=True):
            add(input, "group", ranked, row, *r.groups[0])
        for row, p in enumerate(points):
            add(input, "plan", planned_sets, row, k=len(p.groups))
    needle_runs, needle_groups, needle_plan = _needle_columns(needles, rows, len(points), options)
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
        "restriction_losses": losses,
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
