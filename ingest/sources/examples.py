"""The in-memory shape of a labelled dataset split, shared by every loader."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import transformers

T = TypeVar("T")


def seeded_sample(items: Sequence[T], limit: int | None, seed: int) -> list[T]:
    """A seeded random sample of at most `limit` items, kept in their order (all of them when
    `limit` is None): the same items for the same seed on every machine. Samples are nested:
    with the same seed, a smaller `limit` takes a subset of a larger one (the first `limit`
    of one seeded permutation), so an ablation sweep on 100 examples finds its examples in
    a statistics run on 200."""
    if limit is None or limit >= len(items):
        return list(items)
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    chosen = sorted(order[:limit])
    return [items[i] for i in chosen]


@dataclass(frozen=True)
class Example:
    """One input: a sentence or a sentence pair, with its label as written in the source."""

    position: int  # row index within the source split, after header and blank lines
    guid: str | None  # the source's own id for the row, when it has one
    text_a: str
    text_b: str | None
    label: str | None  # raw label text ("1", "entailment", "3.800"); None when unlabelled
    # The exact token ids, special tokens included, of an input cut from a longer text
    # (language modelling, `text.py`): tokenizing its decoded text again could differ at the cut.
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TextCut:
    """Plain text for language modelling: until it is cut, a task's examples are whole
    documents; :meth:`TaskData.cut` makes them sequences of the model's tokens."""

    stride: int  # tokens that consecutive sequences of one long document share
    max_length: int | None = None  # the sequences' length once cut; None before


@dataclass(frozen=True)
class TaskData:
    """A split of one task, ready to tokenize."""

    dataset: str  # "glue", "sample", a Hugging Face dataset name, or a file name
    task: str
    split: str
    examples: tuple[Example, ...]
    labels: tuple[str, ...] | None  # class names in label-id order; None for regression
    source: str  # where the rows were read from (a path or "name/config:split"), for provenance
    text: TextCut | None = None  # set for plain text read for language modelling (`text.py`)

    @property
    def is_pair(self) -> bool:
        return any(e.text_b is not None for e in self.examples)

    def cut(self, tokenizer: transformers.PreTrainedTokenizerBase, max_length: int) -> TaskData:
        """The task as the model reads it: plain text for language modelling cut into
        sequences of at most `max_length` of this tokenizer's tokens (`text.py`); any other task
        as it is."""
        if self.text is None:
            return self
        from attnwh.ingest.sources.text import cut_documents

        return cut_documents(self, tokenizer, max_length)

    def sample(self, limit: int | None, seed: int) -> TaskData:
        """A seeded random subset of at most `limit` examples, kept in source order."""
        if limit is None or limit >= len(self.examples):
            return self
        return replace(self, examples=tuple(seeded_sample(self.examples, limit, seed)))
