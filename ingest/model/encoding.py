"""Tokenizing a task once, and cutting it into length-bucketed, padded batches."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import transformers

from attnwh.ingest.sources.examples import TaskData


@dataclass(frozen=True)
class EncodedTask:
    """Token ids of every example of a task, as the model will see them."""

    input_ids: tuple[np.ndarray, ...]
    token_type_ids: tuple[np.ndarray, ...] | None  # None when the tokenizer makes none
    n_tokens_full: np.ndarray  # length before truncation, specials included

    @property
    def n_tokens(self) -> np.ndarray:
        return np.fromiter((len(ids) for ids in self.input_ids), dtype=np.int64, count=len(self.input_ids))

    @property
    def truncated(self) -> np.ndarray:
        return self.n_tokens_full > self.n_tokens


def encode_task(tokenizer: transformers.PreTrainedTokenizerBase, data: TaskData, max_length: int) -> EncodedTask:
    """Tokenize every example, truncating pairs longest-first to `max_length` tokens.
    Examples that carry their token ids (text cut for language modelling) keep them."""
    carried = [e.token_ids for e in data.examples]
    if any(ids is not None for ids in carried):
        return _carried(tokenizer, carried, max_length)
    first = [e.text_a for e in data.examples]
    second = [e.text_b or "" for e in data.examples] if data.is_pair else None
    full = tokenizer(first, second, truncation=False, add_special_tokens=True, verbose=False)
    cut = tokenizer(first, second, truncation=True, max_length=max_length, add_special_tokens=True)
    types = cut.get("token_type_ids")
    return EncodedTask(
        input_ids=tuple(np.asarray(ids, dtype=np.int64) for ids in cut["input_ids"]),
        token_type_ids=None if types is None else tuple(np.asarray(t, dtype=np.int64) for t in types),
        n_tokens_full=np.fromiter((len(ids) for ids in full["input_ids"]), dtype=np.int64, count=len(first)),
    )


def _carried(
    tokenizer: transformers.PreTrainedTokenizerBase, carried: Sequence[tuple[int, ...] | None], max_length: int
) -> EncodedTask:
    """Token ids an example brings (a sequence cut from a longer text, `sources/text.py`), as
    they are: tokenizing the decoded text again could differ at the cut."""
    if any(ids is None for ids in carried):
        raise ValueError("either every example of a task carries its token ids or none does")
    full = [np.asarray(ids, dtype=np.int64) for ids in carried]
    cut = tuple(ids[:max_length] for ids in full)
    # One segment: the token types a tokenizer makes for a single input are all 0.
    types = tuple(np.zeros_like(ids) for ids in cut) if "token_type_ids" in tokenizer.model_input_names else None
    return EncodedTask(
        input_ids=cut,
        token_type_ids=types,
        n_tokens_full=np.fromiter((len(ids) for ids in full), dtype=np.int64, count=len(full)),
    )


WORD_START = "\u2423"  # ␣: a token that starts a word (after a space) in the labels a reader sees
_SHOWN = str.maketrans({"\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"})  # ↵ ⇥ ␍


def readable_tokens(tokenizer: transformers.PreTrainedTokenizerBase, ids: Sequence[int]) -> list[str]:
    """The tokens of `ids` as a reader should see them: each as the tokenizer decodes it, not
    in its vocabulary's spelling (byte-level BPE's "Ġrise", SentencePiece's "▁rise"), with a
    word start marked by a leading ␣ and newlines and tabs drawn (↵, ⇥). Special tokens and
    WordPiece's "##" continuations stay as they are; a piece of a character (a byte-level token
    that is not valid UTF-8 alone) keeps its vocabulary spelling."""
    special = set(tokenizer.all_special_tokens)
    labels = []
    for token in cast(list[str], tokenizer.convert_ids_to_tokens(list(ids))):
        if token in special:
            labels.append(token)
            continue
        if token.startswith("\u2581"):  # SentencePiece: its decoder drops a leading space
            start, text = True, token[1:].replace("\u2581", " ")
        else:
            text = tokenizer.convert_tokens_to_string([token])
            start, text = text.startswith(" "), text.removeprefix(" ")
        if "\ufffd" in text or not text and not start:
            labels.append(token)
            continue
        labels.append((WORD_START if start else "") + text.translate(_SHOWN))
    return labels


class TokenKinds:
    """Which token ids are [CLS], [SEP] and punctuation, for any tokenizer.

    Punctuation is a token whose text, without word-piece markers (##, Ġ, ▁), is non-empty
    and made only of Unicode punctuation (category P*). Decided per id on first sight.
    For a decoder (`causal`), the first token of each row (BOS, or the first real token where
    the tokenizer adds none; batches are right-padded) takes [CLS]'s place as the sink
    candidate, and no position is a [SEP].
    """

    def __init__(self, tokenizer: transformers.PreTrainedTokenizerBase, causal: bool = False) -> None:
        self._tokenizer = tokenizer
        self.causal = causal
        self._special = set(tokenizer.all_special_ids)
        self._punct: dict[int, bool] = {}

    def _is_punct(self, token_id: int) -> bool:
        known = self._punct.get(token_id)
        if known is None:
            if token_id in self._special:
                text = ""
            else:
                # One id gives one token (the annotation, str | list[str], covers a list of ids too).
                token = cast(str, self._tokenizer.convert_ids_to_tokens(token_id))
                text = self._tokenizer.convert_tokens_to_string([token])
            text = text.strip().removeprefix("##").strip()
            known = bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)
            self._punct[token_id] = known
        return known

    def masks(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boolean masks of [CLS], [SEP] and punctuation positions, shaped like `input_ids`.
        A decoder's first token is at position 0, or, given `attention_mask`, at each row's
        first real position (a left-padded batch)."""
        ids = input_ids.cpu()
        unique = ids.unique().tolist()
        punct_ids = torch.tensor([i for i in unique if self._is_punct(i)], dtype=ids.dtype)
        punct = torch.isin(ids, punct_ids)
        if self.causal:
            cls = torch.zeros_like(ids, dtype=torch.bool)
            first = (
                attention_mask.cpu().int().argmax(-1)
                if attention_mask is not None
                else torch.zeros(len(ids), dtype=torch.long)
            )
            cls[torch.arange(len(ids)), first] = True
            sep = torch.zeros_like(cls)
        else:
            cls = ids == self._tokenizer.cls_token_id
            sep = ids == self._tokenizer.sep_token_id
        return cls.to(input_ids.device), sep.to(input_ids.device), punct.to(input_ids.device)


def length_buckets(lengths: np.ndarray, order: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Batches of the indices in `order`, grouped by similar length so padding stays small."""
    by_length = sorted(order, key=lambda i: (int(lengths[i]), i))
    for start in range(0, len(by_length), batch_size):
        yield by_length[start : start + batch_size]


def collate(
    encoded: EncodedTask, indices: Sequence[int], pad_token_id: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """Right-padded tensors for one batch: input_ids, attention_mask and, when the tokenizer
    makes them, token_type_ids."""
    width = max(len(encoded.input_ids[i]) for i in indices)
    ids = np.full((len(indices), width), pad_token_id, dtype=np.int64)
    mask = np.zeros((len(indices), width), dtype=np.int64)
    for row, i in enumerate(indices):
        n = len(encoded.input_ids[i])
        ids[row, :n] = encoded.input_ids[i]
        mask[row, :n] = 1
    batch = {"input_ids": torch.from_numpy(ids).to(device), "attention_mask": torch.from_numpy(mask).to(device)}
    type_ids = encoded.token_type_ids
    if type_ids is not None:
        types = np.zeros((len(indices), width), dtype=np.int64)
        for row, i in enumerate(indices):
            types[row, : len(encoded.input_ids[i])] = type_ids[i]
        batch["token_type_ids"] = torch.from_numpy(types).to(device)
    return batch
