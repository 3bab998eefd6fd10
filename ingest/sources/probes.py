"""Probe inputs for a decoder's head roles: repeated random tokens (induction), a needle in a
haystack (retrieval), and plain random tokens or plain text (where attention sinks emerge, Gu
et al. 2025), built deterministically from a tokenizer, a seed and the settings (and, for the
needle and the text, the user's text). No model is needed to build them.

A probe is a :class:`ProbeSequence`: the exact token ids the model reads, its kind, and named
half-open token ranges ``[start, stop)`` into those ids:

- ``induction``: the tokenizer's BOS where it adds one (GPT-2's tokenizer adds none: the
  sequence then starts with the random tokens), then m random tokens t_1..t_m (``first``), then
  the same m tokens again (``repeat``). Position ``first[0] + k`` and ``repeat[0] + k`` hold the
  same token; each token occurs once per half.
- ``needle``: BOS (where added), a haystack cut from the given documents, with a needle
  sentence ("The secret words of the archive are w1 w2 w3 w4.") inserted at a depth, then a
  question and its answer, teacher-forced. ``needle`` is the payload (w1 … w4, the tokens to
  be retrieved), ``needle_sentence`` the whole inserted sentence, ``question`` the question
  up to the answer, ``answer`` the payload's tokens again (the same ids as ``needle``), which
  end the sequence. ``depth`` is the depth asked for (0: before the haystack, 1: after it);
  the ``needle_sentence`` span says where it landed.
- ``passkey``: the same frame with an easier needle, one a small model answers (the pass-key
  retrieval of Mohtashami & Jaggi 2023): "The pass key is 48213. Remember it. 48213 is the
  pass key." at the depth, then "What is the pass key? The pass key is" and the five digits,
  teacher-forced. ``needle`` is the key's first occurrence in the sentence, ``answer`` the
  key again at the end; the spans are named as the needle's.
- ``random``: BOS (where added), then distinct random ordinary tokens up to the probe's length
  (``random``): an input with no meaning, on which Gu et al. (2025) found sinks all the same.
- ``text``: BOS (where added), then the documents' sentences read on from a random document,
  cut to the probe's length (``text``): the same length of natural text.

Token ids are drawn and text is tokenized piece by piece (each sentence, the needle, the
question and the answer on their own), so every span is exact; the model reads these ids,
never a re-tokenization of their text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attnwh.errors import DataError, UsageError
from attnwh.ingest.sources.text import special_tokens

if TYPE_CHECKING:
    import transformers

PROBE_KINDS = ("induction", "needle", "passkey", "random", "text")

# Words a needle's payload is drawn from: common, short, unlikely to be split oddly by a
# tokenizer, and with nothing that makes one a more natural answer than another.
NEEDLE_WORDS: tuple[str, ...] = (
    "apple", "river", "candle", "garden", "silver", "window", "basket", "mountain",
    "pepper", "lantern", "violin", "harbor", "marble", "feather", "copper", "meadow",
    "pencil", "orange", "thunder", "bridge", "castle", "rabbit", "anchor", "mirror",
    "tomato", "blanket", "forest", "hammer", "island", "jacket", "kettle", "ladder",
    "magnet", "needle", "pillow", "rocket", "saddle", "ticket", "tunnel", "wallet",
    "button", "cherry", "dragon", "engine", "falcon", "guitar", "helmet", "insect",
    "jungle", "kitten", "lemon", "monkey", "napkin", "oyster", "parrot", "quilt",
    "ribbon", "spider", "turtle", "velvet", "walnut", "yogurt", "zipper", "desert",
)  # fmt: skip
NEEDLE_LEAD = "The secret words of the archive are"
QUESTION = "Question: what are the secret words of the archive? Answer: the secret words of the archive are"
PAYLOAD_WORDS = 4
# The pass-key probe: the key (PASSKEY_DIGITS digits, the first not 0) said twice in its
# sentence, so a model that reads the sentence at all can answer.
PASSKEY_LEAD = "The pass key is"
PASSKEY_TAIL = ". Remember it."
PASSKEY_END = " is the pass key."
PASSKEY_QUESTION = "What is the pass key? The pass key is"
PASSKEY_DIGITS = 5
# A needle snaps to the nearest sentence boundary when one is at most this many tokens from
# the depth asked for, and at most 5 % of the haystack (`snap_tokens`); otherwise it goes in at
# that token, mid-sentence.
SNAP_TOKENS = 32


def snap_tokens(haystack: int) -> int:
    """How far (tokens) a needle may move from its depth to a sentence boundary, in a haystack
    of `haystack` tokens: 5 % of it, at most :data:`SNAP_TOKENS`."""
    return min(SNAP_TOKENS, haystack // 20)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ProbeSequence:
    """One probe input: `token_ids` as the model reads them, its `kind` ("induction", "needle"
    or "passkey"), `segments` (half-open token ranges by name: "first" and "repeat" for
    induction; "needle" (the payload), "needle_sentence", "question" and "answer" for needles
    and pass keys) and, for those, the `depth` asked for (0..1)."""

    token_ids: tuple[int, ...]
    kind: str
    segments: dict[str, tuple[int, int]] = field(hash=False)
    depth: float | None = None

    def span(self, name: str) -> range:
        """The positions of segment `name`."""
        start, stop = self.segments[name]
        return range(start, stop)

    def __len__(self) -> int:
        return len(self.token_ids)


def ordinary_ids(tokenizer: transformers.PreTrainedTokenizerBase) -> np.ndarray:
    """The tokenizer's ordinary vocabulary, sorted: no special or added tokens, and no id that
    decodes to nothing (or to white space only)."""
    excluded = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    ids = [i for i in range(len(tokenizer)) if i not in excluded]
    texts = tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
    return np.array([i for i, text in zip(ids, texts) if text.strip()], dtype=np.int64)


def induction_probes(
    tokenizer: transformers.PreTrainedTokenizerBase, n: int, length: int, seed: int
) -> list[ProbeSequence]:
    """`n` induction probes: BOS where the tokenizer adds one (none for GPT-2's), then `length`
    distinct random ordinary tokens (:func:`ordinary_ids`), then the same `length` again
    (Olsson et al. 2022). Drawn with ``numpy.random.default_rng(seed)``, one probe after the other."""
    if n < 1 or length < 2:
        raise UsageError(f"induction probes need at least 1 example of at least 2 tokens (got {n} of {length})")
    vocab = ordinary_ids(tokenizer)
    if len(vocab) < length:
        raise UsageError(f"--repeat-length {length} is more than the tokenizer's {len(vocab)} ordinary tokens")
    bos = special_tokens(tokenizer)[0]
    rng = np.random.default_rng(seed)
    probes = []
    for _ in range(n):
        half = [int(t) for t in rng.choice(vocab, size=length, replace=False)]
        start = len(bos)
        segments = {"first": (start, start + length), "repeat": (start + length, start + 2 * length)}
        probes.append(ProbeSequence(tuple(bos + half + half), "induction", segments))
    return probes


def random_probes(
    tokenizer: transformers.PreTrainedTokenizerBase, n: int, length: int, seed: int
) -> list[ProbeSequence]:
    """`n` probes of `length` tokens, BOS included where the tokenizer adds one, the rest
    distinct random ordinary tokens (distinct: a repeated token would invite induction-like
    copying into an input meant to carry nothing). Drawn with ``numpy.random.default_rng(seed)``."""
    bos = special_tokens(tokenizer)[0]
    body = length - len(bos)
    if n < 1 or body < 2:
        raise UsageError(
            f"random probes need at least 1 example of at least {len(bos) + 2} tokens (got {n} of {length})"
        )
    vocab = ordinary_ids(tokenizer)
    if len(vocab) < body:
        raise UsageError(
            f"random probes of {length} tokens need more than the tokenizer's {len(vocab)} ordinary tokens"
        )
    rng = np.random.default_rng(seed)
    return [
        ProbeSequence(
            tuple(bos + [int(t) for t in rng.choice(vocab, size=body, replace=False)]),
            "random",
            {"random": (len(bos), length)},
        )
        for _ in range(n)
    ]


def text_probes(
    tokenizer: transformers.PreTrainedTokenizerBase, documents: Sequence[str], n: int, length: int, seed: int
) -> list[ProbeSequence]:
    """`n` probes of `length` tokens of natural text, BOS included where the tokenizer adds
    one: each the documents' sentences read on from the first sentence of a random document
    (wrapping round), cut to the length. Drawn with ``numpy.random.default_rng(seed)``."""
    bos = special_tokens(tokenizer)[0]
    body = length - len(bos)
    if n < 1 or body < 2:
        raise UsageError(f"text probes need at least 1 example of at least {len(bos) + 2} tokens (got {n} of {length})")
    sentences, starts = _sentences(documents)
    rng = np.random.default_rng(seed)
    probes = []
    for _ in range(n):
        tokens, _ = _haystack(sentences, starts[int(rng.integers(len(starts)))], body, _token_ids(tokenizer))
        probes.append(ProbeSequence(tuple(bos + tokens), "text", {"text": (len(bos), length)}))
    return probes


def _sentences(documents: Sequence[str]) -> tuple[list[str], list[int]]:
    """The documents' sentences in order, and the index of each document's first sentence."""
    sentences: list[str] = []
    starts: list[int] = []
    for doc in documents:
        starts.append(len(sentences))
        sentences += [s for s in _SENTENCE_END.split(doc.strip()) if s.strip()]
    if not sentences:
        raise DataError("no text to build probes from: the documents are empty")
    return sentences, starts


def _token_ids(tokenizer: transformers.PreTrainedTokenizerBase) -> Callable[[str], list[int]]:
    """A text's token ids without special tokens: each piece tokenized on its own."""
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def needle_probes(
    tokenizer: transformers.PreTrainedTokenizerBase,
    documents: Sequence[str],
    n: int,
    context_length: int,
    depths: Sequence[float],
    seed: int,
) -> list[ProbeSequence]:
    """`n` needle-in-a-haystack probes of `context_length` tokens each, their depths taken from
    `depths` in turn (probe i at ``depths[i % len(depths)]``). Each haystack is the documents'
    sentences read on from a random document (wrapping round), cut to fill the length; the
    needle goes in at the sentence boundary nearest the depth (within :func:`snap_tokens`,
    else at the exact token). Drawn with ``numpy.random.default_rng(seed)``."""

    def needle(rng: np.random.Generator, ids: Callable[[str], list[int]]) -> tuple[list[int], list[int], list[int]]:
        words = rng.choice(len(NEEDLE_WORDS), size=PAYLOAD_WORDS, replace=False)
        payload = ids("".join(" " + NEEDLE_WORDS[w] for w in words))
        return ids(" " + NEEDLE_LEAD), payload, ids(".")

    return _planted("needle", tokenizer, documents, n, context_length, depths, seed, needle, " " + QUESTION)


def passkey_probes(
    tokenizer: transformers.PreTrainedTokenizerBase,
    documents: Sequence[str],
    n: int,
    context_length: int,
    depths: Sequence[float],
    seed: int,
) -> list[ProbeSequence]:
    """`n` pass-key probes of `context_length` tokens each: the needle probes' haystacks and
    depths (:func:`needle_probes`) with the sentence "The pass key is K. Remember it. K is the
    pass key." planted, K a random number of :data:`PASSKEY_DIGITS` digits drawn per probe with
    ``numpy.random.default_rng(seed)``, then "What is the pass key? The pass key is" and K."""
    low = 10 ** (PASSKEY_DIGITS - 1)

    def key(rng: np.random.Generator, ids: Callable[[str], list[int]]) -> tuple[list[int], list[int], list[int]]:
        payload = ids(f" {int(rng.integers(low, 10 * low))}")
        return ids(" " + PASSKEY_LEAD), payload, ids(PASSKEY_TAIL) + payload + ids(PASSKEY_END)

    return _planted("passkey", tokenizer, documents, n, context_length, depths, seed, key, " " + PASSKEY_QUESTION)


# What a planted probe's needle is made of, from the probe's draw: the tokens before the
# payload, the payload (asked for and answered), and the rest of the needle sentence.
Needle = Callable[[np.random.Generator, Callable[[str], list[int]]], tuple[list[int], list[int], list[int]]]


def _planted(
    kind: str,
    tokenizer: transformers.PreTrainedTokenizerBase,
    documents: Sequence[str],
    n: int,
    context_length: int,
    depths: Sequence[float],
    seed: int,
    needle_of: Needle,
    question_text: str,
) -> list[ProbeSequence]:
    """`n` probes of `kind`: BOS, a haystack with the sentence `needle_of` draws planted at a
    depth, the question and the payload again as the answer (:func:`needle_probes`)."""
    if n < 1:
        raise UsageError(f"{kind} probes need at least 1 example (got {n})")
    if not depths or any(not 0.0 <= d <= 1.0 for d in depths):
        raise UsageError(f"{kind} depths must be fractions from 0 to 1 (got {list(depths)})")
    sentences, starts = _sentences(documents)
    bos = special_tokens(tokenizer)[0]
    ids = _token_ids(tokenizer)
    question = ids(question_text)
    rng = np.random.default_rng(seed)
    probes = []
    for i in range(n):
        depth = float(depths[i % len(depths)])
        lead, payload, tail = needle_of(rng, ids)
        needle = lead + payload + tail
        budget = context_length - len(bos) - len(needle) - len(question) - len(payload)
        if budget < 1:
            need = context_length - budget + 1
            raise UsageError(
                f"--context-length {context_length} leaves no room for a haystack: the {kind} sentence, question and "
                f"answer take {need - 1} tokens (give at least {need})"
            )
        first = starts[int(rng.integers(len(documents)))] if starts else 0
        haystack, boundaries = _haystack(sentences, first, budget, ids)
        at = round(depth * len(haystack))
        near = min(boundaries, key=lambda b: (abs(b - at), b))
        at = near if abs(near - at) <= snap_tokens(len(haystack)) else at
        body = bos + haystack[:at] + needle + haystack[at:]
        sentence_start = len(bos) + at
        payload_start = sentence_start + len(lead)
        question_start = len(body)
        answer_start = question_start + len(question)
        segments = {
            "needle": (payload_start, payload_start + len(payload)),
            "needle_sentence": (sentence_start, sentence_start + len(needle)),
            "question": (question_start, answer_start),
            "answer": (answer_start, answer_start + len(payload)),
        }
        probes.append(ProbeSequence(tuple(body + question + payload), kind, segments, depth))
    return probes


def _haystack(
    sentences: Sequence[str], first: int, budget: int, ids: Callable[[str], list[int]]
) -> tuple[list[int], list[int]]:
    """`budget` tokens of sentences read on from `first` (wrapping round), each tokenized on
    its own with a leading space, and the token offsets of the sentence boundaries within them."""
    tokens: list[int] = []
    boundaries = [0]
    k = first
    while len(tokens) < budget:
        tokens += ids(" " + sentences[k % len(sentences)].strip())
        boundaries.append(len(tokens))
        k += 1
    tokens = tokens[:budget]
    # The haystack's end is a boundary too: depth 1 puts the needle right before the question.
    return tokens, sorted({b for b in boundaries if b < budget} | {budget})
