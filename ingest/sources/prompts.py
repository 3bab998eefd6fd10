"""GLUE tasks as prompts for a causal language model: one template per task, with label words.

A causal LM has no classification head. attnwh asks it the task as text and reads its answer
from the next-token logits of one *label word* per class (`" positive"` / `" negative"` for
SST-2): the class whose word the model scores highest is its prediction. This module holds the
templates and the few-shot examples as data, with no model in sight; scoring with a model is
:mod:`attnwh.ingest.measures.prompting`.

A prompt is zero-shot by default. With `shots=k` it starts with k solved examples drawn from the
train split with a seed, balanced across the labels, each followed by its label word; the same
k shots head every evaluated example, so the shots are one prefix shared by the whole run (what
a prefix cache can reuse), and no evaluated example is ever among them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnwh.errors import DataError
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.glue import normalize_name

__all__ = [
    "SEPARATOR",
    "TEMPLATES",
    "Prompt",
    "Template",
    "draw_shots",
    "gold_labels",
    "make_prompt",
    "prompt_template",
]

# Between one solved example and the next, and before the evaluated example.
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Template:
    """How one task is put to a language model.

    `text` is a format string over `{text_a}` (and `{text_b}` for sentence pairs) that ends with
    the cue the label word follows (`"...\\nSentiment:"`); `words` holds one label word per class
    in label-id order, each starting with the space that separates it from the cue.
    """

    task: str  # the GLUE task name
    labels: tuple[str, ...]  # the GLUE class names, in label-id order (the TSVs' spelling)
    words: tuple[str, ...]  # one label word per class, in the same order
    text: str

    @property
    def is_pair(self) -> bool:
        return "{text_b}" in self.text

    @property
    def cue(self) -> str:
        """The template's last line: the text the label word follows (used to see how the
        tokenizer splits a label word in its place)."""
        return self.text.rsplit("\n", 1)[-1]

    def render(self, example: Example, answer: int | None = None) -> str:
        """The example as the template words it; with `answer` (a label id), followed by that
        class's label word, as a solved shot."""
        if self.is_pair and example.text_b is None:
            raise DataError(f"the {self.task} prompt needs sentence pairs; example {example.position} has one sentence")
        # The example's texts are arguments, never part of the format string: braces in them stay.
        body = self.text.format(text_a=example.text_a, text_b=example.text_b or "")
        return body if answer is None else body + self.words[answer]


def _pair(
    task: str, labels: tuple[str, ...], words: tuple[str, ...], first: str, second: str, question: str
) -> Template:
    return Template(task, labels, words, f"{first}: {{text_a}}\n{second}: {{text_b}}\n{question} Answer:")


_NLI2 = ("entailment", "not_entailment")
_BINARY = ("0", "1")

# One template per GLUE classification task glue.py reads (STS-B is a regression: no classes to
# name). The label words are common English words that GPT-2, Llama 3, Qwen 2 and SmolLM2 keep as
# one token after a space; `measures.prompting.label_token_ids` checks that for the model in use.
TEMPLATES: dict[str, Template] = {
    t.task: t
    for t in (
        Template("sst2", _BINARY, (" negative", " positive"), "Review: {text_a}\nSentiment:"),
        Template("cola", _BINARY, (" no", " yes"), "Sentence: {text_a}\nIs this sentence grammatical? Answer:"),
        _pair("mrpc", _BINARY, (" no", " yes"), "Sentence 1", "Sentence 2", "Do both sentences mean the same?"),
        _pair("qqp", _BINARY, (" no", " yes"), "Question 1", "Question 2", "Do both questions ask the same?"),
        _pair("rte", _NLI2, (" yes", " no"), "Premise", "Hypothesis", "Does the premise imply the hypothesis?"),
        _pair("qnli", _NLI2, (" yes", " no"), "Question", "Sentence", "Does the sentence answer the question?"),
        _pair(
            "mnli",
            ("entailment", "neutral", "contradiction"),
            (" yes", " maybe", " no"),
            "Premise",
            "Hypothesis",
            "Does the premise imply the hypothesis?",
        ),
        # WNLI's label 1 is entailment.
        _pair("wnli", _BINARY, (" no", " yes"), "Premise", "Hypothesis", "Does the premise imply the hypothesis?"),
    )
}

# The bundled sample corpus asks the same questions as SST-2 and RTE, with the same labels.
_ALIASES = {"sentiment": "sst2", "entailment": "rte"}


def prompt_template(task: str, words: Sequence[str] | None = None) -> Template:
    """The template of GLUE task `task` (`SST-2`, `sst2`; the sample corpus's `sentiment` and
    `entailment` take SST-2's and RTE's); `words` replaces its label words, in label-id order."""
    key = normalize_name(task)
    key = _ALIASES.get(key, key)
    if key == "stsb":
        raise DataError("stsb is a regression task: a prompt reads a class from label words, and STS-B has none")
    template = TEMPLATES.get(key)
    if template is None:
        raise DataError(f"no prompt template for task {task!r}; choose one of {', '.join(TEMPLATES)}")
    if words is not None:
        if len(words) != len(template.labels):
            raise DataError(
                f"{template.task} has {len(template.labels)} classes ({', '.join(template.labels)}); "
                f"got {len(words)} label words"
            )
        template = replace(template, words=tuple(words))
    if len(set(template.words)) != len(template.words):
        raise DataError(f"label words must differ: {', '.join(map(repr, template.words))}")
    return template


def _label_ids(task: TaskData, template: Template) -> list[int | None]:
    """Each example's label id; None where unlabelled. The Hub's `glue` names the classes
    (`negative`, `positive`) where the TSVs write `0`, `1`, in the same order: the id is the
    place in the task's own label list, which must have the template's number of classes."""
    if task.labels is None:
        raise DataError(f"{task.task} is a regression task: a prompt reads a class from label words")
    if len(task.labels) != len(template.labels):
        raise DataError(
            f"{task.task} has {len(task.labels)} classes ({', '.join(task.labels)}) but the {template.task} "
            f"prompt has {len(template.labels)} label words"
        )
    index = {name: i for i, name in enumerate(task.labels)}
    ids: list[int | None] = []
    for e in task.examples:
        if e.label is not None and e.label not in index:
            raise DataError(
                f"{task.task} example {e.position}: label {e.label!r} is not one of {', '.join(task.labels)}"
            )
        ids.append(index[e.label] if e.label is not None else None)
    return ids


def gold_labels(task: TaskData, template: Template) -> list[int | None]:
    """The label id of each of `task`'s examples (None where unlabelled), in example order."""
    return _label_ids(task, template)


def draw_shots(
    train: TaskData, template: Template, shots: int, seed: int, exclude: Sequence[Example] = ()
) -> tuple[tuple[Example, int], ...]:
    """`shots` solved examples (example, label id) from `train`, the same for the same seed.

    Balanced: the classes' counts differ by at most one (which classes get the extra shot is
    drawn with the seed). Never an excluded example: any train example whose texts equal
    those of one in `exclude` (the evaluated examples) is left out of the pool, so a shot is
    never the question it answers, even where train and evaluated split are one file. The
    order in the prompt is shuffled with the seed, so the last shot's class is not fixed.
    """
    if shots < 0:
        raise DataError(f"shots must be 0 or more, not {shots}")
    if shots == 0:
        return ()
    excluded = {(e.text_a, e.text_b) for e in exclude}
    pools: list[list[Example]] = [[] for _ in template.labels]
    for example, label in zip(train.examples, _label_ids(train, template), strict=True):
        if label is not None and (example.text_a, example.text_b) not in excluded:
            pools[label].append(example)
    rng = random.Random(seed)
    classes = list(range(len(pools)))
    rng.shuffle(classes)
    counts = [0] * len(pools)
    for i in range(shots):
        counts[classes[i % len(classes)]] += 1
    chosen: list[tuple[Example, int]] = []
    for label, (pool, count) in enumerate(zip(pools, counts, strict=True)):
        if count > len(pool):
            raise DataError(
                f"{shots} shots need {count} {template.labels[label]!r} examples in {train.task} {train.split}; "
                f"it has {len(pool)} outside the evaluated examples"
            )
        chosen += [(example, label) for example in rng.sample(pool, count)]
    rng.shuffle(chosen)
    return tuple(chosen)


@dataclass(frozen=True)
class Prompt:
    """A template and its shots: everything that turns an example into the text a model reads."""

    template: Template
    shots: tuple[tuple[Example, int], ...] = ()
    seed: int | None = None  # the seed the shots were drawn with (None: zero-shot)
    shot_source: str | None = None  # where the shots came from (the train split's source)

    @property
    def prefix(self) -> str:
        """The solved shots, each followed by the separator: the same for every example
        ("" for zero-shot)."""
        return "".join(self.template.render(example, label) + SEPARATOR for example, label in self.shots)

    def render(self, example: Example) -> str:
        """The whole prompt for `example`: the shots, then the example up to the cue."""
        return self.prefix + self.template.render(example)

    def describe(self) -> dict[str, Any]:
        """The prompt as JSON-able data, to record with a run: the template, its label words
        and, for few-shot, which train examples were the shots and with what seed."""
        return {
            "task": self.template.task,
            "template": self.template.text,
            "labels": list(self.template.labels),
            "label_words": list(self.template.words),
            "separator": SEPARATOR,
            "shots": len(self.shots),
            "seed": self.seed,
            "shot_source": self.shot_source,
            "shot_examples": [
                {"position": example.position, "guid": example.guid, "label": label} for example, label in self.shots
            ],
        }


def make_prompt(
    task: TaskData,
    shots: int = 0,
    train: TaskData | None = None,
    seed: int = 42,
    words: Sequence[str] | None = None,
) -> Prompt:
    """The prompt for `task`'s examples: its task's template (`words` replacing the label
    words), zero-shot by default, or with `shots` solved examples from `train`."""
    template = prompt_template(task.task, words)
    _label_ids(task, template)  # the task's classes must match the template's
    if shots == 0:
        return Prompt(template)
    if train is None:
        raise DataError(f"{shots} shots need a train split of {task.task} to draw them from")
    return Prompt(template, draw_shots(train, template, shots, seed, task.examples), seed, train.source)
