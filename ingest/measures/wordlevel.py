"""Word-level attention maps for pre-split sentences (Clark et al. 2019, §4).

Each sentence is a list of words (CoNLL-U or FrameNet CoNLL). The words are tokenized as
running text with each piece's word known (:func:`encode_words`), and each layer's attention maps come through attnwh's registered
attention function (one batch's maps per layer are kept on the device). Word-piece attention
becomes word-level attention as in Clark et al.: attention TO a split word is the sum over
its pieces, attention FROM a split word is the mean over its pieces; special tokens ([CLS],
[SEP], padding) belong to no word, so they are never candidates, and a word-level row sums to
1 minus the row's attention to special tokens. The analyses (dependencies, frame links,
feature words) all read the `WordBatch`es of :func:`word_batches`.

On a decoder (causal language model) word i's row holds weight only on words 0..i: every piece
of an earlier word precedes every piece of word i, so the word-level map is lower-triangular
and the analyses count only what a row can see (docs/metrics.md#relations-on-decoders). The
first token is the sink candidate in [CLS]'s place (DESIGN §12) and belongs to no word: a BOS
token is no word anyway, and where the tokenizer adds none (GPT-2, Qwen, OLMo 2) the first word,
which holds the first token, is dropped as a word (no candidate, its relations not counted),
because its attention cannot be told from the sink's. A sentence longer than a sliding window
is skipped like an over-long one, so every row sees its whole prefix on every layer.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from attnwh.ingest.model import capture
from attnwh.ingest.model.loading import LoadedModel, forward_inputs


def byte_level(tokenizer: transformers.PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer is byte-level BPE (RoBERTa, ModernBERT), whose pieces carry the
    space before a word ("Ġdog")."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and "ByteLevel" in repr(backend.pre_tokenizer)


def encode_words(
    tokenizer: transformers.PreTrainedTokenizerBase, sentences: Sequence[Sequence[str]], **options: Any
) -> tuple[transformers.BatchEncoding, list[list[int | None]]]:
    """Tokenize pre-split sentences as the model sees running text, with each piece's word.

    WordPiece and SentencePiece tokenizers take the words as they are (`is_split_into_words`:
    the same pieces as the text with spaces). A byte-level BPE tokenizer would then see each
    word without the space before it ("dog", not "Ġdog": other pieces than in any sentence it
    was trained on), so it gets the words joined by spaces, and each piece goes to the word
    its last character falls in (a piece that is only the space, to the next word)."""
    if not byte_level(tokenizer):
        enc = tokenizer([list(s) for s in sentences], is_split_into_words=True, **options)
        return enc, [enc.word_ids(b) for b in range(len(sentences))]
    texts, ends = [], []
    for words in sentences:
        spans, at = [], 0
        for word in words:
            at += len(word)
            spans.append(at)
            at += 1  # the space
        texts.append(" ".join(words))
        ends.append(spans)
    enc = tokenizer(texts, return_offsets_mapping=True, return_special_tokens_mask=True, **options)
    word_ids = []
    for b in range(len(texts)):
        ids: list[int | None] = []
        offsets, specials = enc["offset_mapping"][b], enc["special_tokens_mask"][b]
        offsets = offsets.tolist() if hasattr(offsets, "tolist") else offsets  # a tensor with return_tensors
        specials = specials.tolist() if hasattr(specials, "tolist") else specials
        for (start, end), special in zip(offsets, specials):
            if special:
                ids.append(None)
                continue
            last = end - 1 if end > start else start
            ids.append(min(bisect.bisect_right(ends[b], last), len(ends[b]) - 1))
        word_ids.append(ids)
    for key in ("offset_mapping", "special_tokens_mask"):
        del enc[key]
    return enc, word_ids


def without_sink_word(word_ids: Sequence[int | None], attention_mask: Sequence[int]) -> list[int | None]:
    """A decoder's pieces with the first real token's word (if it has one) made no word: the
    first token is the sink candidate, and a word that holds it cannot be told from it."""
    ids = list(word_ids)
    first = next((s for s, m in enumerate(attention_mask) if m), None)
    if first is not None and ids[first] is not None:
        sink = ids[first]
        ids = [None if w == sink else w for w in ids]
    return ids


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


def most_attended(words_attention: torch.Tensor, present: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Index of the most-attended other word per row of (..., W, W) word-level maps; words
    with no pieces (`present` False, shape (..., W)) and the word itself are never chosen.
    `causal`: only earlier words are candidates (a decoder's row sees nothing later), and a
    row without any candidate gets -1."""
    n = words_attention.size(-1)
    device = words_attention.device
    excluded = torch.eye(n, dtype=torch.bool, device=device)
    if causal:
        excluded = torch.ones(n, n, dtype=torch.bool, device=device).triu()
    scores = words_attention.masked_fill(excluded, float("-inf"))
    scores = scores.masked_fill(~present[..., None, :].to(device), float("-inf"))
    best = scores.argmax(-1)
    return best.masked_fill(torch.isinf(scores).all(-1), -1) if causal else best


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
    causal: bool = False  # a decoder's maps: row i holds weight only on words 0..i
    # Decoders: the word-level maps (B, W, W) of a head that spreads each token's row evenly
    # over the tokens it sees (itself and every earlier real token), the features' reference.
    uniform_maps: torch.Tensor | None = None


def token_limit(encoder: LoadedModel) -> int:
    """The longest sentence measured, in tokens: the model's limit, and on a decoder with
    sliding-window layers also the window, so that every row sees its whole prefix."""
    if encoder.causal and encoder.sliding_layers and encoder.sliding_window:
        return min(encoder.max_length, encoder.sliding_window)
    return encoder.max_length


def fitting(encoder: LoadedModel, sentences: Sequence[Sequence[str]]) -> tuple[list[int], int]:
    """Indices of the sentences that fit the model's limit (:func:`token_limit`), shortest
    first (similar lengths batch together: less padding), and how many do not."""
    if not sentences:
        return [], 0
    lengths = [len(ids) for ids in encode_words(encoder.tokenizer, sentences)[0]["input_ids"]]
    limit = token_limit(encoder)
    fits = [i for i, n in enumerate(lengths) if n <= limit]
    fits.sort(key=lambda i: lengths[i])
    return fits, len(sentences) - len(fits)


def word_batches(
    encoder: LoadedModel, sentences: Sequence[Sequence[str]], order: Sequence[int], batch_size: int
) -> Iterator[WordBatch]:
    """Word-level maps of `sentences[i]` for i in `order`, `batch_size` sentences at a time."""
    for start in range(0, len(order), batch_size):
        indices = list(order[start : start + batch_size])
        yield _word_batch(encoder, [list(sentences[i]) for i in indices], indices)


@torch.inference_mode()
def _word_batch(encoder: LoadedModel, batch: list[list[str]], indices: list[int]) -> WordBatch:
    enc, word_ids = encode_words(encoder.tokenizer, batch, truncation=False, padding=True, return_tensors="pt")
    if encoder.causal:
        word_ids = [without_sink_word(ids, mask) for ids, mask in zip(word_ids, enc["attention_mask"].tolist())]
    length = enc["input_ids"].shape[1]
    n_words = max(len(words) for words in batch)
    pieces = torch.stack([piece_matrix(word_ids[b], n_words, length) for b in range(len(batch))])  # (B, S, W)
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
    uniform = None
    if encoder.causal:
        # Right-padded (load_model): a sentence's real tokens are 0..n-1, row s sees 0..s.
        visible = torch.ones(length, length, device=encoder.device).tril()
        uniform = word_attention(visible / visible.sum(-1, keepdim=True), pieces)
    return WordBatch(
        indices=indices,
        maps=maps,
        present=counts > 0,
        piece_counts=counts,
        n_tokens=enc["attention_mask"].sum(1).float().to(encoder.device),
        causal=encoder.causal,
        uniform_maps=uniform,
    )
