"""Which heads track dependency relations (Clark et al. 2019, §4).

Sentences come from a CoNLL-U file (multiword-token ranges and empty nodes are skipped, so
the words are ids 1..n). Each sentence's words are tokenized with `is_split_into_words`, and
each layer's attention maps come through attnwh's registered attention function (one
batch's maps per layer are kept on the device). Word-piece attention becomes word-level
attention as in Clark et al.: attention TO a split word is the sum over its pieces, attention
FROM a split word is the mean over its pieces; special tokens ([CLS], [SEP], padding) have
no word and are dropped.

Per head and relation (deprel without subtype), a head "gets" a dependency when the word the
dependent attends to most (itself excluded) is its head (`dep_to_head`), or when the word the
head attends to most is the dependent (`head_to_dep`). Each dependency counts once per
direction; root is skipped. The baseline per relation is the best fixed offset: the accuracy
of "the head is the word k positions away" for the single best k in -5..5 (not 0).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnwh.errors import DataError, UsageError

from . import attention
from .models import EncoderModel, forward_inputs

OFFSETS = tuple(k for k in range(-5, 6) if k != 0)
DIRECTIONS = ("dep_to_head", "head_to_dep")


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    heads: tuple[int, ...]  # 0-based index of each word's head; -1 for root
    relations: tuple[str, ...]  # deprel without subtype


def read_conllu(path: Path) -> list[Sentence]:
    """The sentences of a CoNLL-U file; DataError (one line) if it is missing or malformed."""
    import conllu

    path = Path(path)
    if not path.is_file():
        raise DataError(f"CoNLL-U file {path} does not exist")
    sentences = []
    try:
        with path.open(encoding="utf-8") as handle:
            for n, tokens in enumerate(conllu.parse_incr(handle), start=1):
                words = [t for t in tokens if isinstance(t["id"], int)]
                if not words:
                    continue
                ids = [t["id"] for t in words]
                if ids != list(range(1, len(words) + 1)):
                    raise DataError(f"{path}: sentence {n} has word ids {ids[:5]}…, not 1..n")
                heads, relations = [], []
                for t in words:
                    head = t["head"]
                    if not isinstance(head, int) or not 0 <= head <= len(words) or not t["deprel"]:
                        raise DataError(f"{path}: sentence {n}, word {t['id']} has no valid head or deprel")
                    heads.append(head - 1)
                    relations.append(str(t["deprel"]).split(":")[0])
                sentences.append(Sentence(tuple(t["form"] for t in words), tuple(heads), tuple(relations)))
    except DataError:
        raise
    except (conllu.exceptions.ParseException, UnicodeDecodeError, ValueError, KeyError) as exc:
        raise DataError(f"cannot parse {path} as CoNLL-U: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not sentences:
        raise DataError(f"{path} holds no CoNLL-U sentences")
    return sentences


def sample(sentences: Sequence[Sentence], limit: int | None, seed: int) -> list[Sentence]:
    """A seeded random sample of `limit` sentences, in file order (all when limit is None)."""
    if limit is None or limit >= len(sentences):
        return list(sentences)
    keep = sorted(random.Random(seed).sample(range(len(sentences)), limit))
    return [sentences[i] for i in keep]


def piece_matrix(word_ids: Sequence[int | None], n_words: int, length: int | None = None) -> torch.Tensor:
    """(length, n_words) indicator: 1 where piece s belongs to word w; special tokens
    (word id None) and padding have no word."""
    length = len(word_ids) if length is None else length
    m = torch.zeros(length, n_words)
    for s, w in enumerate(word_ids):
        if w is not None:
            m[s, w] = 1.0
    return m


def word_attention(piece_attention: torch.Tensor, pieces: torch.Tensor) -> torch.Tensor:
    """Word-level attention from piece-level maps (..., S, S) and the (..., S, W) piece
    matrix: rows (from) are the mean over a word's pieces, columns (to) the sum."""
    pieces = pieces.to(piece_attention)
    mean = pieces / pieces.sum(-2, keepdim=True).clamp(min=1)
    return mean.transpose(-1, -2) @ piece_attention @ pieces


def most_attended(words_attention: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """Index of the most-attended other word per row of (..., W, W) word-level maps; words
    with no pieces (`present` False, shape (..., W)) and the word itself are never chosen."""
    n = words_attention.size(-1)
    scores = words_attention.masked_fill(torch.eye(n, dtype=torch.bool, device=words_attention.device), float("-inf"))
    scores = scores.masked_fill(~present[..., None, :].to(scores.device), float("-inf"))
    return scores.argmax(-1)


@dataclass
class RelationCounts:
    """Running totals per relation: correct per (direction, layer, head), and per offset."""

    layers: int
    heads: int
    correct: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> (2, layers, heads)
    offsets: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> (len(OFFSETS),)
    total: dict[str, int] = field(default_factory=dict)

    def add(self, sentence: Sentence, predicted: np.ndarray, present: np.ndarray | None = None) -> None:
        """Count one sentence's dependencies against `predicted` (layers, heads, W): the
        most-attended word of each word. Dependencies touching a word without pieces are skipped."""
        for dep, (head, rel) in enumerate(zip(sentence.heads, sentence.relations)):
            if head < 0 or (present is not None and not (present[dep] and present[head])):
                continue
            if rel not in self.total:
                self.correct[rel] = np.zeros((2, self.layers, self.heads), dtype=np.int64)
                self.offsets[rel] = np.zeros(len(OFFSETS), dtype=np.int64)
                self.total[rel] = 0
            self.total[rel] += 1
            self.correct[rel][0] += predicted[:, :, dep] == head
            self.correct[rel][1] += predicted[:, :, head] == dep
            if head - dep in OFFSETS:
                self.offsets[rel][OFFSETS.index(head - dep)] += 1

    def baseline(self, relation: str) -> tuple[int, int]:
        """(best offset, its correct count); ties go to the offset nearest the word, then the left."""
        counts = self.offsets[relation]
        order = sorted(range(len(OFFSETS)), key=lambda i: (-counts[i], abs(OFFSETS[i]), OFFSETS[i]))
        return OFFSETS[order[0]], int(counts[order[0]])

    def head_rows(self) -> dict[str, list]:
        rows: dict[str, list] = {k: [] for k in ("relation", "direction", "layer", "head", "correct", "total", "accuracy")}
        for rel in sorted(self.total):
            total = self.total[rel]
            for d, direction in enumerate(DIRECTIONS):
                for layer in range(self.layers):
                    for head in range(self.heads):
                        c = int(self.correct[rel][d, layer, head])
                        for key, value in zip(rows, (rel, direction, layer, head, c, total, c / total)):
                            rows[key].append(value)
        return rows

    def baseline_rows(self) -> dict[str, list]:
        rows: dict[str, list] = {k: [] for k in ("relation", "best_offset", "correct", "total", "accuracy")}
        for rel in sorted(self.total):
            offset, c = self.baseline(rel)
            for key, value in zip(rows, (rel, offset, c, self.total[rel], c / self.total[rel])):
                rows[key].append(value)
        return rows


@dataclass(frozen=True)
class RelationsResult:
    counts: RelationCounts
    n_sentences: int  # sentences selected
    n_skipped: int  # of those, longer than the model's limit
    seconds: float


def tokenize(encoder: EncoderModel, sentences: Sequence[Sentence]):
    return encoder.tokenizer(
        [list(s.words) for s in sentences], is_split_into_words=True, truncation=False, padding=True, return_tensors="pt"
    )


# Byte-level BPE marks a word's start inside the token ("Ġdog"), so pre-split words need the
# tokenizer rebuilt with add_prefix_space, which attnwh does not do yet.
UNSUPPORTED_FAMILIES = ("roberta",)


def check_supported(encoder: EncoderModel) -> None:
    """Refuse models whose tokenizer cannot be aligned to CoNLL-U words yet."""
    if encoder.family in UNSUPPORTED_FAMILIES:
        raise UsageError(
            f"{encoder.name} is a {encoder.family} model: aligning its byte-level BPE pieces to CoNLL-U words "
            "is not supported yet (WordPiece and SentencePiece models are)"
        )


def measure(
    encoder: EncoderModel,
    sentences: Sequence[Sentence],
    batch_size: int = 32,
    on_batch: Callable[[int], None] | None = None,
) -> RelationsResult:
    """Dependency accuracy of every head over `sentences`; over-long ones are skipped."""
    check_supported(encoder)
    started = time.perf_counter()
    lengths = [len(ids) for ids in encoder.tokenizer([list(s.words) for s in sentences], is_split_into_words=True)["input_ids"]]
    fits = [i for i, n in enumerate(lengths) if n <= encoder.max_length]
    fits.sort(key=lambda i: lengths[i])  # similar lengths together: less padding
    counts = RelationCounts(encoder.num_layers, encoder.num_heads)
    for start in range(0, len(fits), batch_size):
        batch = [sentences[i] for i in fits[start : start + batch_size]]
        _count_batch(encoder, batch, counts)
        if on_batch:
            on_batch(len(batch))
    if on_batch and len(fits) < len(sentences):
        on_batch(len(sentences) - len(fits))
    return RelationsResult(counts, len(sentences), len(sentences) - len(fits), time.perf_counter() - started)


@torch.inference_mode()
def _count_batch(encoder: EncoderModel, batch: Sequence[Sentence], counts: RelationCounts) -> None:
    enc = tokenize(encoder, batch)
    length = enc["input_ids"].shape[1]
    n_words = max(len(s.words) for s in batch)
    pieces = torch.stack([piece_matrix(enc.word_ids(b), n_words, length) for b in range(len(batch))])  # (B, S, W)
    present = pieces.sum(1) > 0  # (B, W)
    observer = attention.KeepMaps()
    inputs = forward_inputs(encoder.model, {k: v.to(encoder.device) for k, v in enc.items()})
    with attention.observing(observer):
        encoder.model(**inputs)
    pieces = pieces.to(encoder.device)
    predicted = []
    for probs in observer.maps:  # (B, H, S, S)
        words = word_attention(probs.float(), pieces[:, None])  # (B, H, W, W)
        predicted.append(most_attended(words, present[:, None].to(encoder.device)))
    observer.maps.clear()
    stacked = torch.stack(predicted, 1).cpu().numpy()  # (B, L, H, W)
    present_np = present.numpy()
    for b, sentence in enumerate(batch):
        counts.add(sentence, stacked[b], present_np[b])


def run_key(encoder: EncoderModel, path: Path, limit: int | None, seed: int) -> str:
    key = {
        "kind": "relations",
        "weights": encoder.weights_hash,
        "name": encoder.name,
        "file": hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest(),
        "limit": limit,
        "seed": seed,
        "dtype": str(encoder.dtype),
    }
    return hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class RelationsSummary:
    run_id: int
    outcome: str  # "complete", "replaced" or "already complete"
    result: RelationsResult | None  # None when already complete


def ingest_relations(
    db_path: Path,
    encoder: EncoderModel,
    path: Path,
    sentences: Sequence[Sentence],
    *,
    limit: int | None,
    seed: int,
    batch_size: int,
    replace: bool,
    command: str | None,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> RelationsSummary:
    """Measure and store one relations run; the whole result is written in one transaction,
    so a run row exists only when its rows do. A stored run is kept unless `replace`."""
    from attnwh.sql import warehouse
    from attnwh.sql.warehouse import first_row

    from . import store

    key = run_key(encoder, path, limit, seed)
    con = warehouse.connect(db_path)
    try:
        found = first_row(con, "SELECT run_id FROM runs WHERE run_key = ?", [key])
        if found and not replace:
            return RelationsSummary(found[0], "already complete", None)
        if on_start:
            on_start(len(sentences))
        result = measure(encoder, sentences, batch_size, on_batch)
        import pyarrow as pa

        con.begin()
        try:
            model_id = store.upsert_model(con, encoder.facts())
            state = store.open_run(
                con,
                key,
                True,
                {
                    "kind": "relations",
                    "model_id": model_id,
                    "dataset": Path(path).name,
                    "task": "dependencies",
                    "split": Path(path).stem,
                    "source": str(path),
                    "example_limit": limit,
                    "seed": seed,
                    "max_length": encoder.max_length,
                    "n_examples": result.n_sentences,
                    "n_truncated": result.n_skipped,  # skipped as longer than max_length
                    "device": str(encoder.device),
                    "dtype": str(encoder.dtype).removeprefix("torch."),
                    "batch_size": batch_size,
                    "versions": json.dumps(store.library_versions()),
                    "command": command,
                },
            )
            for table, rows in (
                ("dependency_heads", result.counts.head_rows()),
                ("dependency_baselines", result.counts.baseline_rows()),
            ):
                arrow = pa.table({"run_id": pa.array([state.run_id] * len(rows["relation"]), pa.int32()), **rows})
                con.register("new_rows", arrow)
                try:
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM new_rows")
                finally:
                    con.unregister("new_rows")
            con.execute(
                "UPDATE runs SET status = 'complete', finished_at = current_timestamp, seconds = ? WHERE run_id = ?",
                [result.seconds, state.run_id],
            )
            con.commit()
        except BaseException:
            con.rollback()
            raise
        return RelationsSummary(state.run_id, "replaced" if found else "complete", result)
    finally:
        con.close()
