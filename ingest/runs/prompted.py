"""Runs that read a causal language model through a GLUE task's prompt (docs/prompts.md).

`attnwh ingest --prompt` and `attnwh ingest ablation --prompt` read each example as its
prompt's token ids (the shots' prefix, the example rendered by the template, the cue), and
the prompt, with its label words' token ids, joins the run's identity: another template,
other label words, shots or seed make another run, and runs.prompt records it. The same
prompt is rendered by every process of a run (a `--shard` process draws the shots from the
same train split with the same seed; a Ray worker gets the token ids in its units), so the
rows of a run do not depend on where they were computed.

A statistics run also reads the prompt's answer in the pass that measures the statistics:
the label words' logits at each example's last real token (`prompt_predictions`), and its
accuracy in `scores` once it is complete.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from attnwh.errors import DataError
from attnwh.ingest.measures.prompting import PromptedClassifier
from attnwh.ingest.model.encoding import EncodedTask
from attnwh.ingest.model.loading import LoadedModel, require_language_model
from attnwh.ingest.runs.loop import IngestOptions, PreparedTask
from attnwh.ingest.sources import prompts
from attnwh.ingest.sources.prompts import Prompt, Template


def check_language_model(encoder: LoadedModel, remedy: str) -> None:
    """Refuse, in one line, a model a prompt cannot be read from: an encoder, or a fine-tuned
    classifier (its own head answers, not the label words). `remedy` ends the line."""
    require_language_model(encoder, "--prompt (a model read through its label words)", f"drop --prompt{remedy}")


def prompted_task(encoder: LoadedModel, task: PreparedTask, prompt: Prompt, options: IngestOptions) -> PreparedTask:
    """`task` read through `prompt`: its examples become the prompts' token ids (the shots'
    prefix, the example, the cue; `PromptedClassifier.encode`) and the prompt's description,
    with the label words' token ids, joins the run's identity (runs.prompt records it)."""
    classifier = PromptedClassifier(encoder.model, encoder.tokenizer, prompt, task.max_length)
    encoded = [classifier.encode(e) for e in task.data.examples]
    if not options.truncate and any(e.truncated for e in encoded):
        first = next(i for i, e in enumerate(encoded) if e.truncated)
        raise DataError(
            f"{sum(e.truncated for e in encoded)} prompt(s) of {task.data.task} are longer than {task.max_length} "
            f"tokens (first: row {task.data.examples[first].position}, {encoded[first].n_tokens_full} tokens); "
            "drop --no-truncate to cut the start of their text"
        )
    tokens = EncodedTask(
        input_ids=tuple(np.asarray(e.ids, dtype=np.int64) for e in encoded),
        token_type_ids=None,
        n_tokens_full=np.array([e.n_tokens_full for e in encoded], dtype=np.int64),
    )
    return dataclasses.replace(task, encoded=tokens, identity={**task.identity, "prompt": classifier.describe()})


def task_template(task: PreparedTask) -> Template | None:
    """The template of the prompt `task` is read through (None: no prompt)."""
    described = task.identity.get("prompt")
    if not isinstance(described, dict):
        return None
    return prompts.prompt_template(str(described["task"]), described["label_words"])


def label_ids_of(task: PreparedTask) -> list[int] | None:
    """The label words' token ids of the prompt `task` is read through (None: no prompt)."""
    described = task.identity.get("prompt")
    return list(described["label_token_ids"]) if isinstance(described, dict) else None


def prompt_labels(task: PreparedTask) -> np.ndarray | None:
    """The gold label ids of `task`'s examples in its template's order, -1 where an example
    has none (None: the task reads no prompt)."""
    template = task_template(task)
    if template is None:
        return None
    return np.array([-1 if g is None else g for g in prompts.gold_labels(task.data, template)], dtype=np.int64)


def prediction_rows(example_ids: np.ndarray, logits: np.ndarray, labels: np.ndarray) -> pa.Table:
    """prompt_predictions rows (without run_id) from the label words' logits (examples,
    classes) and the gold label ids (-1: unlabelled, whose `correct` is NULL)."""
    predicted = logits.argmax(-1)
    labelled = labels >= 0
    return pa.table(
        {
            "example_id": pa.array(np.asarray(example_ids, dtype=np.int64)),
            "prediction": pa.array(predicted.astype(np.int16)),
            "correct": pa.array(predicted == labels, mask=~labelled),
            "logits": pa.array([row.astype(np.float32) for row in logits], pa.list_(pa.float32())),
        }
    )


def label_ids_by_run(tasks: Sequence[PreparedTask]) -> dict[str, list[int]]:
    """The label words' token ids of every task read through a prompt, by run key (what a
    worker scores each unit's rows with)."""
    return {task.run_key: ids for task in tasks if (ids := label_ids_of(task)) is not None}
