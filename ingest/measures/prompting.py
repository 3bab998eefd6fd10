"""A causal language model as a classifier, through a prompt and its label words.

:class:`PromptedClassifier` turns each example into the token ids of its prompt
(:mod:`attnwh.ingest.sources.prompts`), runs right-padded batches through the model and reads,
at each row's last real token, the logits of the task's label words: the class whose word
scores highest is the prediction. Batching changes no score: a causal row never sees the
padding after it, so a batched row's label-word logits equal those of the example run alone
(to float rounding; tested within 1e-5).

Tokens: the tokenizer's own leading special tokens (Llama's BOS; GPT-2 adds none), then the
shots' text, then the example's, each tokenized on its own. Tokenizing the shots apart from
the example makes their ids one prefix shared by every example of a run, exactly, which is
what a cache of the prefix's keys and values needs. Special tokens a tokenizer appends (an
EOS) are left out: the model must answer right after the cue. A prompt longer than the model
takes loses the start of the example's text (never the shots or the cue), and says so.

A label word must be a single token where it follows the cue: one that splits would be scored
by its first piece only, which two classes can share (" not" / " no") and which says little of
the word. attnwh refuses such a word in one line (a ModelError) instead; pick other label words.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from attnwh.errors import DataError, ModelError
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.prompts import Prompt, Template, gold_labels

__all__ = [
    "EncodedPrompt",
    "Predictions",
    "PromptedClassifier",
    "label_logits",
    "label_scores",
    "forward_label_scores",
    "label_token_ids",
    "last_positions",
    "leading_special_ids",
]

# The fewest tokens of the example a truncated prompt keeps: fewer and the shots leave no room.
_MIN_EXAMPLE_TOKENS = 8


def _plain(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """The ids of `text` without any special token."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def leading_special_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The special tokens the tokenizer puts before a text (Llama's, Gemma's BOS; none for
    GPT-2 or Qwen), read from how it encodes a probe word."""
    probe = "Answer"
    plain = _plain(tokenizer, probe)
    full = list(tokenizer(probe, add_special_tokens=True)["input_ids"])
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start]
    return []  # a tokenizer that rewrites the text with its specials: add none


def label_token_ids(tokenizer: PreTrainedTokenizerBase, template: Template) -> tuple[int, ...]:
    """The token id of each label word, where it follows the template's cue; a ModelError
    naming the word and its pieces when one is not a single token, or two share one."""
    cue = _plain(tokenizer, template.cue)
    ids = []
    for word in template.words:
        joined = _plain(tokenizer, template.cue + word)
        added = joined[len(cue) :] if joined[: len(cue)] == cue else None
        if added is None or len(added) != 1:
            pieces = tokenizer.convert_ids_to_tokens(added if added is not None else _plain(tokenizer, word))
            raise ModelError(
                f"label word {word!r} of the {template.task} prompt is {len(pieces)} tokens for this tokenizer "
                f"({' '.join(map(str, pieces))}), not one; choose label words that are single tokens"
            )
        ids.append(added[0])
    if len(set(ids)) != len(ids):
        raise ModelError(f"label words {', '.join(map(repr, template.words))} share a token for this tokenizer")
    return tuple(ids)


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's last real position (the highest index whose mask is 1), whichever side
    the batch is padded on."""
    index = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    return (attention_mask.bool() * index).amax(-1)


def label_logits(lm_logits: torch.Tensor, attention_mask: torch.Tensor, label_ids: Sequence[int]) -> torch.Tensor:
    """(rows, classes): the label words' logits at each row's last real position, from a
    causal LM's (rows, positions, vocabulary) logits."""
    rows = torch.arange(lm_logits.shape[0], device=lm_logits.device)
    last = last_positions(attention_mask).to(lm_logits.device)
    words = torch.as_tensor(list(label_ids), device=lm_logits.device)
    return lm_logits[rows, last][:, words]


def label_scores(model: nn.Module, inputs: dict[str, Any], label_ids: Sequence[int]) -> torch.Tensor:
    """(rows, classes): the label words' logits at each row's last real token, from a causal
    LM and its forward's inputs (`attention_mask` among them; padding on either side). The
    vocabulary projection runs only at the positions read (one per distinct last position,
    `logits_to_keep`), not at every position of every row. Differentiable (gradient
    importance reads it with gradients on)."""
    return forward_label_scores(model, inputs, label_ids)[0]


def forward_label_scores(
    model: nn.Module, inputs: dict[str, Any], label_ids: Sequence[int], **options: Any
) -> tuple[torch.Tensor, Any]:
    """:func:`label_scores` and the model's whole output, from one forward pass with the
    model's other `options` (`output_hidden_states`: a statistics pass reads the label words
    on the way)."""
    mask = inputs["attention_mask"]
    last = last_positions(mask)
    if _takes_logits_to_keep(type(model).forward):
        keep = torch.unique(last)
        out = model(**inputs, **options, logits_to_keep=keep)
        logits = out.logits
        picked = logits[
            torch.arange(logits.shape[0], device=logits.device), torch.searchsorted(keep, last).to(logits.device)
        ]
    else:
        out = model(**inputs, **options)
        logits = out.logits
        picked = logits[torch.arange(logits.shape[0], device=logits.device), last.to(logits.device)]
    return picked[:, torch.as_tensor(list(label_ids), device=picked.device)], out


@dataclass(frozen=True)
class EncodedPrompt:
    """One example's prompt as the model reads it."""

    ids: list[int]
    n_tokens_full: int  # before truncation
    truncated: bool


@dataclass(frozen=True)
class Predictions:
    """The label words' logits, predicted and gold label ids for a task's examples."""

    logits: np.ndarray  # (examples, classes), float32
    predicted: np.ndarray  # (examples,) label ids
    gold: np.ndarray  # (examples,) label ids; -1 where unlabelled
    n_truncated: int

    @property
    def accuracy(self) -> float | None:
        """The share of labelled examples predicted right; None when none is labelled."""
        labelled = self.gold >= 0
        return float((self.predicted[labelled] == self.gold[labelled]).mean()) if labelled.any() else None


@functools.cache
def _takes_logits_to_keep(forward: Any) -> bool:
    return "logits_to_keep" in inspect.signature(forward).parameters


def _max_positions(model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> int:
    config = model.config
    limits = [getattr(config, name, None) for name in ("max_position_embeddings", "n_positions")]
    limits.append(tokenizer.model_max_length if tokenizer.model_max_length < 10**7 else None)
    found = [int(v) for v in limits if isinstance(v, int) and v > 0]
    return min(found) if found else 2048


class PromptedClassifier:
    """A loaded causal LM and its tokenizer, read as a classifier of one task through a prompt.

    `prompt_ids` gives each example's token ids, `label_ids` the label words' ids,
    `logits` the label words' logits for a right-padded batch; `predict` runs a whole task.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        prompt: Prompt,
        max_length: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.label_ids = label_token_ids(tokenizer, prompt.template)
        # Shared by every example: the tokenizer's leading specials and the shots.
        self.prefix_ids = leading_special_ids(tokenizer) + _plain(tokenizer, prompt.prefix)
        self.max_length = max_length or _max_positions(model, tokenizer)
        if self.max_length - len(self.prefix_ids) < _MIN_EXAMPLE_TOKENS:
            raise DataError(
                f"the {len(prompt.shots)} shots take {len(self.prefix_ids)} tokens of the {self.max_length} "
                "the model reads; use fewer shots"
            )
        # Any id works for padding (masked, and after every real token); the tokenizer's own first.
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode(self, example: Example) -> EncodedPrompt:
        """The example's prompt ids: the shared prefix, then the example up to the cue,
        losing the start of the example's text where the whole is too long."""
        body = _plain(self.tokenizer, self.prompt.template.render(example))
        room = self.max_length - len(self.prefix_ids)
        full = len(self.prefix_ids) + len(body)
        return EncodedPrompt(self.prefix_ids + body[-room:], full, len(body) > room)

    def prompt_ids(self, task: TaskData) -> list[EncodedPrompt]:
        """Every example's prompt, in example order."""
        return [self.encode(example) for example in task.examples]

    def batch(self, prompts: Sequence[EncodedPrompt]) -> dict[str, torch.Tensor]:
        """`input_ids` and `attention_mask` of the prompts, right-padded, on the model's device.
        Right padding keeps each row's positions 0..n-1 with no position ids to pass."""
        width = max(len(p.ids) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, : len(p.ids)] = torch.tensor(p.ids)
            mask[row, : len(p.ids)] = 1
        return {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}

    @torch.inference_mode()
    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(rows, classes) float32: the label words' logits at each row's last real token."""
        return label_scores(self.model, batch, self.label_ids).float()

    def predict(self, task: TaskData, batch_size: int = 8) -> Predictions:
        """The label words' logits and the predictions for every example of `task`, in
        batches of similar length (less padding), returned in example order."""
        gold = np.array([-1 if g is None else g for g in gold_labels(task, self.prompt.template)], dtype=np.int64)
        prompts = self.prompt_ids(task)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].ids))
        logits = np.zeros((len(prompts), len(self.label_ids)), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            logits[chosen] = self.logits(self.batch([prompts[i] for i in chosen])).cpu().numpy()
        return Predictions(logits, logits.argmax(-1), gold, sum(p.truncated for p in prompts))

    def describe(self) -> dict[str, Any]:
        """The prompt's description (:meth:`Prompt.describe`) with what this tokenizer made of
        it: the label words' token ids and the length of the shared prefix."""
        return self.prompt.describe() | {
            "label_token_ids": list(self.label_ids),
            "prefix_tokens": len(self.prefix_ids),
            "max_length": self.max_length,
        }
