"""Word-level attention maps for pre-split sentences (Clark et al. 2019, §4).

Each sentence is a list of words (CoNLL-U or FrameNet CoNLL). The words are tokenized with
`is_split_into_words`, and each layer's attention maps come through attnwh's registered
attention function (one batch's maps per layer are kept on the device). Word-piece attention
becomes word-level attention as in Clark et al.: attention TO a split word is the sum over
its pieces, attention FROM a split word is the mean over its pieces; special tokens ([CLS],
[SEP], padding) belong to no word, so they are never candidates, and a word-level row sums to
1 minus the row's attention to special tokens. The analyses (dependencies, frame links,
feature words) all read the `WordBatch`es of :func:`word_batches`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from attnwh.errors import UsageError
from attnwh.ingest.encoder import capture
from attnwh.ingest.encoder.loading import EncoderModel, forward_inputs

# Byte-level BPE marks a word's start inside the token ("Ġdog"), so pre-split words need the
# tokenizer rebuilt with add_prefix_space, which attnwh does not do yet.
UNSUPPORTED_FAMILIES = ("roberta",)


def check_supported(encoder: EncoderModel) -> None:
    """Refuse models whose tokenizer cannot be aligned to pre-split words yet."""
    if encoder.family in UNSUPPORTED_FAMILIES:
        raise UsageError(
            f"{encoder.name} is a {encoder.family} model: aligning its byte-level BPE pieces to CoNLL-U words "
            "is not supported yet (WordPiece and SentencePiece models are)"
        )


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


@dataclass(frozen=True)
class WordBatch:
    """One batch's word-level maps. `indices` are positions in the list given to
    :func:`word_batches`; tensors are on the model's device, words beyond a sentence's end
    (and words without pieces) have all-zero rows and columns."""

    indices: list[int]
    maps: torch.Tensor  # (B, layers, heads, W, W) float32
    present: torch.Tensor  # (B, W) bool: the word has at least one piece
    piece_counts: torch.Tensor  # (B, W) float32: pieces per word
    n_tokens: torch.Tensor  # (B,) float32: real tokens, special tokens included


def fitting(encoder: EncoderModel, sentences: Sequence[Sequence[str]]) -> tuple[list[int], int]:
    """Indices of the sentences that fit the model's limit, shortest first (similar lengths
    batch together: less padding), and how many do not."""
    if not sentences:
        return [], 0
    lengths = [
        len(ids) for ids in encoder.tokenizer([list(s) for s in sentences], is_split_into_words=True)["input_ids"]
    ]
    fits = [i for i, n in enumerate(lengths) if n <= encoder.max_length]
    fits.sort(key=lambda i: lengths[i])
    return fits, len(sentences) - len(fits)


def word_batches(
    encoder: EncoderModel, sentences: Sequence[Sequence[str]], order: Sequence[int], batch_size: int
) -> Iterator[WordBatch]:
    """Word-level maps of `sentences[i]` for i in `order`, `batch_size` sentences at a time."""
    check_supported(encoder)
    for start in range(0, len(order), batch_size):
        indices = list(order[start : start + batch_size])
        yield _word_batch(encoder, [list(sentences[i]) for i in indices], indices)


@torch.inference_mode()
def _word_batch(encoder: EncoderModel, batch: list[list[str]], indices: list[int]) -> WordBatch:
    enc = encoder.tokenizer(batch, is_split_into_words=True, truncation=False, padding=True, return_tensors="pt")
    length = enc["input_ids"].shape[1]
    n_words = max(len(words) for words in batch)
    pieces = torch.stack([piece_matrix(enc.word_ids(b), n_words, length) for b in range(len(batch))])  # (B, S, W)
    observer = capture.KeepMaps()
    inputs = forward_inputs(encoder.model, {k: v.to(encoder.device) for k, v in enc.items()})
    with capture.observing(observer):
        encoder.model(**inputs)
    pieces = pieces.to(encoder.device)
    # A KeepMaps' entries are None only where a user drops them; none is dropped here.
    kept = [probs for probs in observer.maps if probs is not None]
    maps = torch.stack([word_attention(probs.float(), pieces[:, None]) for probs in kept], 1)
    observer.maps.clear()
    counts = pieces.sum(1)
    return WordBatch(
        indices=indices,
        maps=maps,
        present=counts > 0,
        piece_counts=counts,
        n_tokens=enc["attention_mask"].sum(1).float().to(encoder.device),
    )
