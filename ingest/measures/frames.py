"""Heads that link frame-evoking words to their frame elements (Kovaleva et al. 2019, §4.2).

Input: FrameNet 1.7 full-text annotations in the Open-SESAME CoNLL conversion. Blocks are
separated by blank lines; each block is ONE target (frame-evoking lexical unit) of a sentence,
so a sentence repeats once per target. Two layouts are read, told apart by the number of
tab-separated columns (the same in every line of a file):

- 5 columns (the "framebert" files): ID (0-based), FORM, LU, FRAME, FE.
- 15 columns (Open-SESAME): ID (1-based), FORM, _, LEMMA, POS, XPOS, SENT#, five unused
  columns, LU, FRAME, FE.

LU and FRAME are `_` except on the target's word(s); FE is a BIO tag (`O`, `B-Name`,
`I-Name`) marking the frame elements of that target. The conversion does not say which
elements are core, so every annotated element is used.

Filters, as in the paper, applied in this order and counted: an annotation without any
frame element is dropped; then one whose sentence has more than 12 words; then one with a
frame element longer than 3 words; then each (target, element) link whose words are less
than two apart (the smallest |i - j| between a target word and an element word, so an
element overlapping the target is dropped too), and an annotation left without links.

Score: per annotation and head, the largest word-level attention weight over the word pairs
of its links (word-level maps: to a word = sum over its pieces, from a word = mean over its
pieces; [CLS]/[SEP] are no words), in three directions: from a target word to an element
word (`target_to_element`), the reverse (`element_to_target`), and the larger of the two
(`either`, closest to the paper's "maximum weight among the token pairs of the link"). Per
head: the mean over annotations. Percentile: the share of all layers × heads whose mean is
less than or equal to the head's own (`scipy.stats.percentileofscore(kind="weak")`), so the
best head has 100 and "above the 99th percentile" picks the top 1 % of heads.

On a decoder a word sees only earlier words, so each direction takes only the link pairs
whose attended word comes first: target_to_element the elements before the target,
element_to_target those after it. An annotation without such a pair is left out of that
direction's mean (`n_annotations` is per direction), and a direction no annotation could
see is not written. `either` is unchanged: each pair is visible in exactly one direction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnwh.errors import DataError

if TYPE_CHECKING:  # the reader and the counts load without torch: a bad file fails at once
    from attnwh.ingest.model.loading import LoadedModel

MAX_SENTENCE_WORDS = 12
MAX_ELEMENT_WORDS = 3
MIN_DISTANCE = 2
DIRECTIONS = ("target_to_element", "element_to_target", "either")
LAYOUTS = {5: (0, 1, 2, 3, 4), 15: (0, 1, 12, 13, 14)}  # columns: id, form, LU, frame, FE


@dataclass(frozen=True)
class FrameAnnotation:
    """One annotated target of a sentence (one block of the file)."""

    words: tuple[str, ...]
    frame: str
    targets: tuple[int, ...]  # word indices of the frame-evoking unit
    elements: tuple[tuple[str, tuple[int, ...]], ...]  # (element name, word indices)


def read_framenet(path: Path) -> list[FrameAnnotation]:
    """Every block of a FrameNet CoNLL file; DataError (one line) if missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"FrameNet file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"cannot read {path} as FrameNet CoNLL: not UTF-8 text") from None
    annotations, block, width = [], [], None
    for n, line in enumerate([*text.splitlines(), ""], start=1):
        if line.strip():
            cells = line.rstrip("\r\n").split("\t")
            width = width or len(cells)
            if len(cells) not in LAYOUTS or len(cells) != width:
                raise DataError(
                    f"{path}, line {n}: {len(cells)} tab-separated columns; FrameNet CoNLL has 5 (framebert) "
                    "or 15 (Open-SESAME) in every line"
                )
            block.append((n, [cells[i] for i in LAYOUTS[width]]))
        elif block:
            annotations.append(_annotation(path, block))
            block = []
    if not annotations:
        raise DataError(f"{path} holds no FrameNet annotations")
    return annotations


def _annotation(path: Path, block: list[tuple[int, list[str]]]) -> FrameAnnotation:
    first = block[0][0]
    try:
        ids = [int(cells[0]) for _, cells in block]
    except ValueError:
        raise DataError(f"{path}, block at line {first}: the first column must be a word number") from None
    if ids != list(range(ids[0], ids[0] + len(ids))) or ids[0] not in (0, 1):
        raise DataError(f"{path}, block at line {first}: word numbers must count up from 0 or 1")
    words = tuple(cells[1] for _, cells in block)
    targets = tuple(i for i, (_, cells) in enumerate(block) if cells[2] != "_")
    frames = {cells[3] for _, cells in block if cells[3] != "_"}
    if not targets or len(frames) != 1:
        raise DataError(f"{path}, block at line {first}: a block needs one target with one frame")
    elements: list[tuple[str, list[int]]] = []
    for i, (n, cells) in enumerate(block):
        tag = cells[4]
        if tag == "O":
            continue
        kind, _, name = tag.partition("-")
        if kind not in ("B", "I") or not name:
            raise DataError(f"{path}, line {n}: frame element tag {tag!r} is not O, B-Name or I-Name")
        if kind == "I" and elements and elements[-1][0] == name and elements[-1][1][-1] == i - 1:
            elements[-1][1].append(i)
        else:  # B-, or an I- that continues nothing: a new element
            elements.append((name, [i]))
    return FrameAnnotation(words, frames.pop(), targets, tuple((name, tuple(span)) for name, span in elements))


@dataclass(frozen=True)
class FrameLinks:
    """An annotation that passed the filters: its sentence and the links left."""

    sentence: int  # index into FrameData.sentences
    frame: str
    targets: tuple[int, ...]
    elements: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class FrameData:
    sentences: list[tuple[str, ...]]  # distinct sentences of the kept annotations
    links: list[FrameLinks]
    filters: dict[str, int]  # step -> annotations (see FILTER_STEPS)


FILTER_STEPS = ("annotations_read", "no_elements", "long_sentence", "long_element", "too_close", "kept")


def distance(a: Sequence[int], b: Sequence[int]) -> int:
    return min(abs(i - j) for i in a for j in b)


def apply_filters(
    annotations: Sequence[FrameAnnotation],
    max_sentence_words: int = MAX_SENTENCE_WORDS,
    max_element_words: int = MAX_ELEMENT_WORDS,
    min_distance: int = MIN_DISTANCE,
) -> FrameData:
    """The paper's filters (module docstring), with the number of annotations each drops."""
    counts = dict.fromkeys(FILTER_STEPS, 0)
    counts["annotations_read"] = len(annotations)
    sentences: dict[tuple[str, ...], int] = {}
    links = []
    for a in annotations:
        if not a.elements:
            counts["no_elements"] += 1
        elif len(a.words) > max_sentence_words:
            counts["long_sentence"] += 1
        elif any(len(span) > max_element_words for _, span in a.elements):
            counts["long_element"] += 1
        else:
            kept = tuple(span for _, span in a.elements if distance(a.targets, span) >= min_distance)
            if not kept:
                counts["too_close"] += 1
                continue
            index = sentences.setdefault(a.words, len(sentences))
            links.append(FrameLinks(index, a.frame, a.targets, kept))
    counts["kept"] = len(links)
    return FrameData(list(sentences), links, counts)


def read_frames(path: Path) -> FrameData:
    """Read and filter; DataError when no annotation survives the filters."""
    data = apply_filters(read_framenet(path))
    if not data.links:
        f = data.filters
        raise DataError(
            f"{path}: no annotation passes the filters (of {f['annotations_read']}: {f['no_elements']} without frame "
            f"elements, {f['long_sentence']} in sentences over {MAX_SENTENCE_WORDS} words, {f['long_element']} with "
            f"an element over {MAX_ELEMENT_WORDS} words, {f['too_close']} with every element under {MIN_DISTANCE} "
            "words from the target)"
        )
    return data


def subset(data: FrameData, keep: Sequence[FrameLinks]) -> FrameData:
    """The same data with only `keep` among the links (a --limit sample)."""
    return FrameData(data.sentences, list(keep), data.filters)


def percentiles(scores: np.ndarray) -> np.ndarray:
    """Per value, the percentage of all values less than or equal to it (kind="weak")."""
    flat = scores.ravel()
    ranks = np.searchsorted(np.sort(flat), flat, side="right")
    return (100.0 * ranks / flat.size).reshape(scores.shape)


@dataclass
class FrameCounts:
    layers: int
    heads: int
    causal: bool = False  # a decoder: only pairs whose attended word comes first count
    total: np.ndarray = field(init=False)  # (directions, layers, heads): sum of per-annotation maxima
    counted: np.ndarray = field(init=False)  # (directions,): annotations in each direction's mean
    n: int = 0

    def __post_init__(self) -> None:
        self.total = np.zeros((len(DIRECTIONS), self.layers, self.heads))
        self.counted = np.zeros(len(DIRECTIONS), dtype=np.int64)

    def add(self, maps, links: FrameLinks, present) -> bool:
        """One annotation against its sentence's word-level maps (layers, heads, W, W)
        (torch or numpy); False when no link has both words present."""
        pairs = [(t, e) for span in links.elements for t in links.targets for e in span if present[t] and present[e]]
        if not pairs:
            return False
        maxima = []
        for rows, cols in (
            ([t for t, _ in pairs], [e for _, e in pairs]),
            ([e for _, e in pairs], [t for t, _ in pairs]),
        ):
            seen = [(r, c) for r, c in zip(rows, cols) if not self.causal or c < r]
            if seen:
                r, c = [p[0] for p in seen], [p[1] for p in seen]
                maxima.append(_to_numpy(maps[:, :, r, c]).max(-1))
            else:
                maxima.append(None)
        forward, backward = maxima
        either = (
            np.maximum(*maxima)
            if forward is not None and backward is not None
            else forward
            if forward is not None
            else backward
        )
        for d, value in enumerate((forward, backward, either)):
            if value is not None:
                self.total[d] += value
                self.counted[d] += 1
        self.n += 1
        return True

    def means(self) -> np.ndarray:
        """(directions, layers, heads): the mean over annotations of their largest link weight."""
        return self.total / np.maximum(self.counted, 1)[:, None, None]

    def rows(self) -> dict[str, list]:
        keys = ("direction", "layer", "head", "n_annotations", "mean_max_attention", "percentile", "rank")
        rows: dict[str, list] = {k: [] for k in keys}
        means = self.means()
        for d, direction in enumerate(DIRECTIONS):
            if not self.counted[d]:
                continue  # a decoder's direction that no annotation could see
            pct = percentiles(means[d])
            order = np.argsort(-means[d].ravel(), kind="stable")
            rank = np.empty(order.size, dtype=np.int64)
            rank[order] = np.arange(1, order.size + 1)
            rank = rank.reshape(means[d].shape)
            for layer in range(self.layers):
                for head in range(self.heads):
                    values = (
                        direction,
                        layer,
                        head,
                        int(self.counted[d]),
                        float(means[d, layer, head]),
                        float(pct[layer, head]),
                        int(rank[layer, head]),
                    )
                    for key, value in zip(keys, values):
                        rows[key].append(value)
        return rows

    def top(self, direction: str = "either", k: int = 5) -> list[tuple[int, int, float, float]]:
        """The k best heads: (layer, head, mean, percentile)."""
        d = DIRECTIONS.index(direction)
        means = self.means()[d]
        pct = percentiles(means)
        order = np.argsort(-means.ravel(), kind="stable")[:k]
        return [(int(i // self.heads), int(i % self.heads), float(means.flat[i]), float(pct.flat[i])) for i in order]


def _to_numpy(x) -> np.ndarray:
    return np.asarray(x.cpu() if hasattr(x, "cpu") else x, dtype=np.float64)


@dataclass(frozen=True)
class FramesResult:
    counts: FrameCounts
    n_annotations: int  # annotations measured (after the filters and --limit)
    n_skipped: int  # of those: sentence over the model's limit, or no link word with pieces
    seconds: float


def measure_frames(
    encoder: LoadedModel, data: FrameData, batch_size: int = 32, on_batch: Callable[[int], None] | None = None
) -> FramesResult:
    """Mean max attention on the annotated links, per direction, layer and head."""
    from attnwh.ingest.measures.wordlevel import fitting, word_batches

    started = time.perf_counter()
    by_sentence: dict[int, list[FrameLinks]] = {}
    for link in data.links:
        by_sentence.setdefault(link.sentence, []).append(link)
    wanted = sorted(by_sentence)
    order, _ = fitting(encoder, [data.sentences[i] for i in wanted])
    counts = FrameCounts(encoder.num_layers, encoder.num_heads, encoder.causal)
    measured = processed = 0
    for batch in word_batches(encoder, [data.sentences[i] for i in wanted], order, batch_size):
        present = batch.present.cpu().numpy()
        done = 0
        for b, i in enumerate(batch.indices):
            for links in by_sentence[wanted[i]]:
                measured += counts.add(batch.maps[b], links, present[b])
                done += 1
        processed += done
        if on_batch:
            on_batch(done)
    if on_batch and processed < len(data.links):
        on_batch(len(data.links) - processed)
    return FramesResult(counts, len(data.links), len(data.links) - measured, time.perf_counter() - started)
