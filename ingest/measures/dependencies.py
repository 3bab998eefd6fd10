"""Which heads track linguistic relations: dependency relations (Clark et al. 2019, §4) and
feature words (Kovaleva et al. 2019, §4.4) from a CoNLL-U file; frame links are in `frames`.

Sentences come from a CoNLL-U file (multiword-token ranges and empty nodes are skipped, so
the words are ids 1..n). Word-level attention comes from `wordlevel` (to a split word: sum
over its pieces; from it: mean over its pieces; [CLS]/[SEP] are no words).

Per head and relation (deprel without subtype), a head "gets" a dependency when the word the
dependent attends to most (itself excluded) is its head (`dep_to_head`), or when the word the
head attends to most is the dependent (`head_to_dep`). Each dependency counts once per
direction; root is skipped. The baseline per relation is the best fixed offset: the accuracy
of "the head is the word k positions away" for the single best k in -5..5 (not 0), per
direction (for head_to_dep the offset is the dependent's from the head). The same pass
measures the attention each head gives to feature words (`features`).

On a decoder a word attends only to earlier words: each direction counts the dependencies
whose target precedes the attending word (a dependency is seen in exactly one direction), a
word's candidates are the earlier words, and the baseline's offsets are those that point back
(-5..-1 from the attending word). A direction that saw no pair of a relation has accuracy NULL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnwh.errors import DataError
from attnwh.ingest.measures.features import FeatureCounts, feature_words, received_attention

if TYPE_CHECKING:  # the reader and the counts load without torch: a bad file fails at once
    from attnwh.ingest.model.loading import LoadedModel

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
    """Running totals per relation: correct per (direction, layer, head), the dependencies
    each direction could see, and per direction the offsets head - dependent of those.

    `causal` (a decoder): a word sees only earlier words, so `dep_to_head` counts the
    dependencies whose head comes before the dependent, `head_to_dep` those whose dependent
    comes before the head (each dependency in exactly one direction), and each direction's
    offset baseline only guesses words before the attending word."""

    layers: int
    heads: int
    causal: bool = False
    correct: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> (2, layers, heads)
    offsets: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> (2, len(OFFSETS)): head - dep
    visible: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> (2,): pairs each direction saw
    total: dict[str, int] = field(default_factory=dict)  # relation -> dependencies counted

    def add(self, sentence: Sentence, predicted: np.ndarray, present: np.ndarray | None = None) -> None:
        """Count one sentence's dependencies against `predicted` (layers, heads, W): the
        most-attended word of each word. Dependencies touching a word without pieces are skipped."""
        for dep, (head, rel) in enumerate(zip(sentence.heads, sentence.relations)):
            if head < 0 or (present is not None and not (present[dep] and present[head])):
                continue
            if rel not in self.total:
                self.correct[rel] = np.zeros((2, self.layers, self.heads), dtype=np.int64)
                self.offsets[rel] = np.zeros((2, len(OFFSETS)), dtype=np.int64)
                self.visible[rel] = np.zeros(2, dtype=np.int64)
                self.total[rel] = 0
            self.total[rel] += 1
            # dep_to_head: the dependent attends; head_to_dep: the head attends.
            for d, (attending, target) in enumerate(((dep, head), (head, dep))):
                if self.causal and target > attending:
                    continue  # later words are invisible to a decoder's row
                self.visible[rel][d] += 1
                self.correct[rel][d] += predicted[:, :, attending] == target
                if head - dep in OFFSETS:
                    self.offsets[rel][d, OFFSETS.index(head - dep)] += 1

    def candidates(self, direction: int) -> list[int]:
        """Indices into OFFSETS a fixed-offset guess may use: on a decoder only those that put
        the target before the attending word (head - dep < 0 for dep_to_head, > 0 for head_to_dep)."""
        if not self.causal:
            return list(range(len(OFFSETS)))
        return [i for i, k in enumerate(OFFSETS) if (k < 0) == (direction == 0)]

    def baseline(self, relation: str, direction: int = 0) -> tuple[int | None, int]:
        """(best offset of the target from the attending word, its correct count): for
        dep_to_head head - dependent, for head_to_dep dependent - head; ties go to the offset
        nearest the word, then to the one that puts the head left of the dependent. (None, 0) when the direction saw no pair."""
        if not self.visible[relation][direction]:
            return None, 0
        counts = self.offsets[relation][direction]
        best = min(self.candidates(direction), key=lambda i: (-counts[i], abs(OFFSETS[i]), OFFSETS[i]))
        sign = 1 if direction == 0 else -1
        return sign * OFFSETS[best], int(counts[best])

    def head_rows(self) -> dict[str, list]:
        rows: dict[str, list] = {
            k: [] for k in ("relation", "direction", "layer", "head", "correct", "total", "accuracy")
        }
        for rel in sorted(self.total):
            for d, direction in enumerate(DIRECTIONS):
                total = int(self.visible[rel][d])
                for layer in range(self.layers):
                    for head in range(self.heads):
                        c = int(self.correct[rel][d, layer, head])
                        accuracy = c / total if total else None  # NULL: no pair this direction could see
                        for key, value in zip(rows, (rel, direction, layer, head, c, total, accuracy)):
                            rows[key].append(value)
        return rows

    def baseline_rows(self) -> dict[str, list]:
        rows: dict[str, list] = {
            k: [] for k in ("relation", "direction", "best_offset", "correct", "total", "accuracy")
        }
        for rel in sorted(self.total):
            for d, direction in enumerate(DIRECTIONS):
                offset, c = self.baseline(rel, d)
                total = int(self.visible[rel][d])
                for key, value in zip(rows, (rel, direction, offset, c, total, c / total if total else None)):
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
    encoder: LoadedModel,
    sentences: Sequence[Sentence],
    batch_size: int = 32,
    on_batch: Callable[[int], None] | None = None,
) -> RelationsResult:
    """Dependency accuracy and feature-word attention of every head over `sentences`;
    over-long ones are skipped."""
    from attnwh.ingest.measures.wordlevel import fitting, most_attended, word_batches

    started = time.perf_counter()
    fits, n_skipped = fitting(encoder, [s.words for s in sentences])
    counts = RelationCounts(encoder.num_layers, encoder.num_heads, encoder.causal)
    features = FeatureCounts(encoder.num_layers, encoder.num_heads)
    for batch in word_batches(encoder, [s.words for s in sentences], fits, batch_size):
        predicted = most_attended(batch.maps, batch.present[:, None, None], batch.causal).cpu().numpy()  # (B, L, H, W)
        received, uniform = received_attention(
            batch.maps, batch.present, batch.n_tokens, batch.piece_counts, batch.uniform_maps
        )
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
