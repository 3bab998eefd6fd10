"""Which heads track linguistic relations: dependency relations (Clark et al. 2019, §4) and
feature words (Kovaleva et al. 2019, §4.4) from a CoNLL-U file; frame links are in `frames`.

Sentences come from a CoNLL-U file (multiword-token ranges and empty nodes are skipped, so
the words are ids 1..n). Word-level attention comes from `wordlevel` (to a split word: sum
over its pieces; from it: mean over its pieces; [CLS]/[SEP] are no words).

Per head and relation (deprel without subtype), a head "gets" a dependency when the word the
dependent attends to most (itself excluded) is its head (`dep_to_head`), or when the word the
head attends to most is the dependent (`head_to_dep`). Each dependency counts once per
direction; root is skipped. The baseline per relation is the best fixed offset: the accuracy
of "the head is the word k positions away" for the single best k in -5..5 (not 0). The same
pass measures the attention each head gives to feature words (`features`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnwh.errors import DataError
from attnwh.ingest.encoder.loading import EncoderModel
from attnwh.ingest.measures.features import FeatureCounts, feature_words, received_attention
from attnwh.ingest.measures.wordlevel import fitting, most_attended, word_batches

OFFSETS = tuple(k for k in range(-5, 6) if k != 0)
DIRECTIONS = ("dep_to_head", "head_to_dep")


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    heads: tuple[int, ...]  # 0-based index of each word's head; -1 for root
    relations: tuple[str, ...]  # deprel without subtype
    upos: tuple[str, ...] = ()  # universal part-of-speech tags ("" where absent)


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
                heads, relations, upos = [], [], []
                for t in words:
                    head = t["head"]
                    if not isinstance(head, int) or not 0 <= head <= len(words) or not t["deprel"]:
                        raise DataError(f"{path}: sentence {n}, word {t['id']} has no valid head or deprel")
                    heads.append(head - 1)
                    relations.append(str(t["deprel"]).split(":")[0])
                    upos.append(str(t["upos"] or ""))
                sentences.append(Sentence(tuple(t["form"] for t in words), tuple(heads), tuple(relations), tuple(upos)))
    except DataError:
        raise
    except (conllu.exceptions.ParseException, UnicodeDecodeError, ValueError, KeyError) as exc:
        raise DataError(
            f"cannot parse {path} as CoNLL-U: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    if not sentences:
        raise DataError(f"{path} holds no CoNLL-U sentences")
    return sentences


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
        rows: dict[str, list] = {
            k: [] for k in ("relation", "direction", "layer", "head", "correct", "total", "accuracy")
        }
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
    features: FeatureCounts | None = None


def measure(
    encoder: EncoderModel,
    sentences: Sequence[Sentence],
    batch_size: int = 32,
    on_batch: Callable[[int], None] | None = None,
) -> RelationsResult:
    """Dependency accuracy and feature-word attention of every head over `sentences`;
    over-long ones are skipped."""
    started = time.perf_counter()
    fits, n_skipped = fitting(encoder, [s.words for s in sentences])
    counts = RelationCounts(encoder.num_layers, encoder.num_heads)
    features = FeatureCounts(encoder.num_layers, encoder.num_heads)
    for batch in word_batches(encoder, [s.words for s in sentences], fits, batch_size):
        predicted = most_attended(batch.maps, batch.present[:, None, None]).cpu().numpy()  # (B, L, H, W)
        received, uniform = received_attention(batch.maps, batch.present, batch.n_tokens, batch.piece_counts)
        present = batch.present.cpu().numpy()
        for b, i in enumerate(batch.indices):
            s = sentences[i]
            counts.add(s, predicted[b], present[b])
            if s.upos:
                features.add(feature_words(s.words, s.upos, s.relations), received[b], uniform[b], present[b])
        if on_batch:
            on_batch(len(batch.indices))
    if on_batch and n_skipped:
        on_batch(n_skipped)
    return RelationsResult(counts, len(sentences), n_skipped, time.perf_counter() - started, features)
