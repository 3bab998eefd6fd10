"""Fine-tuning a model on a task, as in Kovaleva et al.: a classification (or STS-B
regression) head on the pooled [CLS] output, AdamW with linear warm-up and decay.

A decoder (causal language model, hub name, folder or GGUF file) is trained the same way as
its ``...ForSequenceClassification``: the head reads the hidden state of the last real token,
the only one that has seen the whole input. transformers finds it as the rightmost token that
is not the padding token, so the config's ``pad_token_id`` is set to the tokenizer's padding
token (its end-of-sequence token where it has none, as for ingest); attnwh right-pads every
batch, so real tokens keep their positions whatever the tokenizer's padding side.

The result is saved with `save_pretrained` (model and tokenizer) plus `attnwh_finetune.json`,
which records the base checkpoint and the task, so every other attnwh command can load the
directory and the warehouse can link the tuned model to its base.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForSequenceClassification
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from attnwh.errors import DataError, Interrupted, ModelError
from attnwh.ingest.measures import metrics
from attnwh.ingest.model import gguf_cache
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import (
    DEFAULT_MODEL_NAME,
    LINEAGE_FILE,
    bundled_model_path,
    forward_inputs,
    load_model,
    parameters_hash,
    read_config,
)
from attnwh.ingest.sources.examples import TaskData


@dataclass(frozen=True)
class FinetuneOptions:
    epochs: float = 3.0
    # BERT's fine-tuning grid is {2, 3, 5}e-5; the upper end suits small encoders such as the
    # bundled MiniLM, which need larger steps to move in three epochs.
    learning_rate: float = 5e-5
    batch_size: int = 32
    max_length: int = 128
    warmup: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    from_scratch: bool = False
    # bfloat16: the forward and backward under torch.autocast in bfloat16 (weights, gradients
    # and AdamW stay float32), for GPUs with bfloat16 units.
    precision: str = "float32"


@dataclass(frozen=True)
class Checkpoints:
    """How training is split and saved, which does not change what it computes (the tuned
    model's note leaves it out): `micro_batch_size` examples per forward and backward, their
    gradients accumulated into one step of the whole batch; a checkpoint of everything the
    next step depends on every `every_steps` steps or `every_minutes` minutes (None: never),
    and when Ctrl-C stops training between steps."""

    micro_batch_size: int | None = None
    every_steps: int | None = None
    every_minutes: float | None = 10.0


@dataclass(frozen=True)
class FinetuneResult:
    out_dir: Path
    base_name: str
    base_weights_hash: str
    tuned_weights_hash: str
    task: str
    train_examples: int
    dev_examples: int
    train_seconds: float
    final_loss: float | None
    scores: dict[str, float]
    # When training began and when scoring ended (aware, local); None for a result rebuilt
    # from a saved note that lacks them.
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # The split the scores were measured on (dev); None for a result rebuilt from an old note.
    dev_split: str | None = None
    # The loss of each optimizer step (the whole batch's mean), and the step training resumed
    # from (0: it started afresh).
    step_losses: tuple[float, ...] = ()
    resumed_from: int = 0


# Called every step with (step, total steps, running loss).
StepCallback = Callable[[int, int, float], None]
# Given the result of a fine-tuning, what the caller adds to its lineage note (top-level keys).
LineageExtra = Callable[[FinetuneResult], dict[str, object]]


def check_sequence_classifier(config: Any, model_name: str | None) -> None:
    """Refuse, in one line, a family transformers has no sequence-classification class for:
    the classifier fine-tuning trains is that class."""
    family = config.model_type
    if family not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        raise ModelError(
            f"{model_name or DEFAULT_MODEL_NAME} is a {family!r} model, which transformers has no sequence "
            "classification class for: attnwh cannot fine-tune it"
        )


def _for_training(source: str, config: Any, from_scratch: bool) -> Any:  # a PreTrainedModel
    """The classifier to train, in float32, on PyTorch's fused attention (sdpa) where the
    family has it; DeBERTa and MPNet compute their attention in the module and train on
    eager, and so does a model with attention logit soft-capping (Gemma 2), which sdpa would
    leave out: the model trained is then the one attnwh measures. A GGUF file's weights are
    dequantised: read from its entry in the GGUF cache, which loading the base made."""
    folder, gguf_file = gguf_cache.pretrained_arguments(source)
    capped = getattr(config, "attn_logit_softcapping", None) is not None
    for implementation in ("eager",) if capped else ("sdpa", "eager"):
        try:
            if from_scratch:
                return AutoModelForSequenceClassification.from_config(
                    config, attn_implementation=implementation, dtype=torch.float32
                )
            return AutoModelForSequenceClassification.from_pretrained(
                folder, config=config, attn_implementation=implementation, dtype=torch.float32, **gguf_file
            )
        except ValueError as exc:
            if implementation != "sdpa" or "attention implementation" not in str(exc):
                raise
    raise AssertionError("unreachable: eager is always supported")


def _as_plain_weights(model: Any) -> None:
    """A model read from a GGUF file holds its weights dequantised to float32 (transformers'
    loader for these families converts every tensor) but keeps the GGUF quantizer's mark,
    which refuses `save_pretrained` and `.float()`: the mark is dropped, so the tuned model is
    saved as an ordinary safetensors folder. Weights left packed in GGUF blocks cannot be
    trained: refused."""
    if getattr(model, "hf_quantizer", None) is None:
        return  # from_scratch: built from the file's config, no weights read
    packed = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.startswith("Gguf")})
    if packed:
        raise ModelError(f"the GGUF file's weights stay packed ({', '.join(packed)}); they cannot be fine-tuned")
    model.hf_quantizer.remove_quantization_config(model)  # what transformers does for dequantize=True


def _labels(data: TaskData) -> np.ndarray:
    golds = [e.label for e in data.examples if e.label is not None]
    if len(golds) != len(data.examples):
        raise DataError(f"{data.task} ({data.split}) has unlabelled examples; fine-tuning needs labels")
    if data.labels is None:
        return np.array([float(label) for label in golds], dtype=np.float32)
    index = {name: i for i, name in enumerate(data.labels)}
    return np.array([index[label] for label in golds], dtype=np.int64)


def finetune(
    model_name: str | None,
    train: TaskData,
    dev: TaskData,
    out_dir: Path,
    options: FinetuneOptions,
    device: str = "auto",
    on_step: StepCallback | None = None,
    lineage_extra: LineageExtra | None = None,
    checkpoints: Checkpoints | None = None,
) -> FinetuneResult:
    """Fine-tune `model_name` (None: the bundled MiniLM) on `train`, score it on `dev`
    with the task's metrics, and save it to `out_dir`. `lineage_extra` gives what a caller
    adds to the lineage note (the study's part), from the result; the note is written once,
    complete, after the model files.

    `checkpoints` splits each step into micro-batches and saves checkpoints in
    ``out_dir/attnwh-checkpoint``; a checkpoint of the same training (base weights, data,
    options, micro-batch size) found there is resumed from, to the same weights as a run
    that was never stopped (on a CPU, bit for bit), and removed once the model is saved."""
    if not train.examples or not dev.examples:
        raise DataError("fine-tuning needs a non-empty train and dev split")
    if train.labels != dev.labels:
        raise DataError(f"train and dev of {train.task} have different label sets")
    check_sequence_classifier(read_config(model_name), model_name)  # before any weights load
    base = load_model(model_name, device)  # checks the model is a supported encoder or decoder
    # Training needs the pre-trained model's facts and tokenizer, not its weights: letting them
    # go takes their size off the peak (~0.4 GiB for a 12-layer base model).
    del base.model
    source = str(bundled_model_path()) if model_name is None else model_name
    label_names = train.labels
    regression = label_names is None
    num_labels = 1 if label_names is None else len(label_names)
    folder, gguf_file = gguf_cache.pretrained_arguments(source)
    config = AutoConfig.from_pretrained(folder, num_labels=num_labels, **gguf_file)
    # The tokenizer as attnwh prepared it (a decoder's: a padding token, no token type ids),
    # saved with the model so the tuned folder pads the same way.
    tokenizer = base.tokenizer
    if base.causal:
        # The classifier pools the rightmost token that is not padding: without the id it
        # would refuse batches of more than one example.
        config.pad_token_id = tokenizer.pad_token_id
    config.problem_type = "regression" if regression else "single_label_classification"
    if label_names is not None:
        config.id2label = dict(enumerate(label_names))
        config.label2id = {name: i for i, name in enumerate(label_names)}
    _seed(options.seed)
    model = _for_training(source, config, options.from_scratch)
    if gguf_file:
        _as_plain_weights(model)
    model.to(base.device)
    max_length = min(options.max_length, base.max_length)
    train_encoded = encode_task(tokenizer, train, max_length)
    dev_encoded = encode_task(tokenizer, dev, max_length)
    y_train, y_dev = _labels(train), _labels(dev)

    steps_per_epoch = math.ceil(len(train.examples) / options.batch_size)
    # epochs 0: no step at all; the pre-trained encoder is scored with its untrained, seeded
    # classifier head (Kovaleva et al.'s Table 1 "pre-trained" column). Any other share of an
    # epoch takes at least one step.
    total = max(1, round(options.epochs * steps_per_epoch)) if options.epochs > 0 else 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate, weight_decay=options.weight_decay)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, round(options.warmup * total), total)
    checkpoints = checkpoints or Checkpoints()
    micro = min(checkpoints.micro_batch_size or options.batch_size, options.batch_size)
    state = TrainState(order_rng=np.random.default_rng(options.seed))
    saved = Checkpoint(out_dir, _training_key(base.weights_hash, train, options, micro, max_length))
    resumed_from = state.step if saved.load(model, optimizer, schedule, state) else 0
    model.train()
    started_at = datetime.now().astimezone()
    started = time.perf_counter() - state.seconds
    last_saved = time.monotonic()
    autocast = torch.autocast(base.device.type, dtype=torch.bfloat16, enabled=options.precision == "bfloat16")
    with _stop_between_steps() as stop:
        while state.step < total:
            if state.start == 0 or state.order is None:
                state.order = state.order_rng.permutation(len(train.examples))
            indices = state.order[state.start : state.start + options.batch_size].tolist()
            loss = 0.0
            # The batch's mean loss is the micro-batches' means weighted by their sizes: their
            # gradients add up to the whole batch's.
            for first in range(0, len(indices), micro):
                part = indices[first : first + micro]
                batch = collate(train_encoded, part, tokenizer.pad_token_id, base.device)
                target = torch.from_numpy(y_train[part]).to(base.device)
                with autocast:
                    part_loss = model(**forward_inputs(model, batch), labels=target).loss * (len(part) / len(indices))
                part_loss.backward()
                loss += part_loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            state.step += 1
            state.start = state.start + options.batch_size
            if state.start >= len(train.examples):
                state.start = 0
            state.losses.append(loss)
            state.running = loss if state.running is None else 0.9 * state.running + 0.1 * loss
            if on_step:
                on_step(state.step, total, state.running)
            due = (checkpoints.every_steps and state.step % checkpoints.every_steps == 0) or (
                checkpoints.every_minutes is not None and time.monotonic() - last_saved > 60 * checkpoints.every_minutes
            )
            if state.step < total and (due or stop.requested):
                state.seconds = time.perf_counter() - started
                saved.save(model, optimizer, schedule, state)
                last_saved = time.monotonic()
                if stop.requested:
                    raise Interrupted(
                        f"interrupted at step {state.step} of {total}; rerun the same command to resume from it "
                        f"(checkpoint in {saved.folder}; nothing was written to the warehouse)"
                    )
    train_seconds = time.perf_counter() - started
    running = state.running

    predictions = predict(model, tokenizer, dev_encoded, regression, micro, base.device)
    scores = metrics.score(train.task, y_dev, predictions, regression)
    finished_at = datetime.now().astimezone()
    out_dir.mkdir(parents=True, exist_ok=True)
    # The note is written last: a folder whose model files were replaced but whose note is
    # missing (interrupted in between) is not taken for a finished model.
    (out_dir / LINEAGE_FILE).unlink(missing_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    tuned_hash = parameters_hash(model.float())
    result = FinetuneResult(
        out_dir=out_dir,
        base_name=base.name if model_name is not None else DEFAULT_MODEL_NAME,
        base_weights_hash=base.weights_hash,
        tuned_weights_hash=tuned_hash,
        task=train.task,
        train_examples=len(train.examples),
        dev_examples=len(dev.examples),
        train_seconds=train_seconds,
        final_loss=running,
        scores=scores,
        started_at=started_at,
        finished_at=finished_at,
        dev_split=dev.split,
        step_losses=tuple(state.losses),
        resumed_from=resumed_from,
    )
    lineage = {
        "base": result.base_name,
        "base_weights_hash": result.base_weights_hash,
        "task": result.task,
        "from_scratch": options.from_scratch,
        "options": asdict(options),
        "scores": scores,
    }
    if lineage_extra is not None:
        lineage.update(lineage_extra(result))
    (out_dir / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2), encoding="utf-8")
    saved.remove()
    return result


@dataclass
class TrainState:
    """Where training is, besides the weights, optimizer and schedule: what a checkpoint
    keeps so that the next step is the one an unstopped run takes."""

    order_rng: np.random.Generator
    step: int = 0
    start: int = 0  # position of the next batch in this epoch's order
    order: np.ndarray | None = None  # this epoch's order of the train examples
    running: float | None = None  # the loss shown (an exponential mean)
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0  # training time before this process


CHECKPOINT_DIR = "attnwh-checkpoint"


def _training_key(base_hash: str, train: TaskData, options: FinetuneOptions, micro: int, max_length: int) -> str:
    """What a checkpoint must have been saved by to be resumed: the same base weights,
    training examples, options, micro-batch size and length."""
    digest = hashlib.blake2b(digest_size=16)
    for example in train.examples:
        digest.update(json.dumps([example.text_a, example.text_b, example.label]).encode())
    identity = [base_hash, digest.hexdigest(), asdict(options), micro, max_length]
    return hashlib.blake2b(json.dumps(identity, sort_keys=True).encode(), digest_size=16).hexdigest()


class Checkpoint:
    """The checkpoint of one training in ``out_dir/attnwh-checkpoint``: one file, written to
    a temporary name and renamed over the last, so a kill while saving leaves the last whole."""

    def __init__(self, out_dir: Path, key: str) -> None:
        self.folder = out_dir / CHECKPOINT_DIR
        self.path = self.folder / "state.pt"
        self.key = key

    def save(self, model: Any, optimizer: Any, schedule: Any, state: TrainState) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        payload = {
            "key": self.key,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "order_rng": state.order_rng.bit_generator.state,
            "step": state.step,
            "start": state.start,
            "order": None if state.order is None else torch.from_numpy(state.order.copy()),
            "running": state.running,
            "losses": list(state.losses),
            "seconds": state.seconds,
        }
        temporary = self.path.with_name(f"state.{os.getpid()}.tmp")
        torch.save(payload, temporary)
        os.replace(temporary, self.path)

    def load(self, model: Any, optimizer: Any, schedule: Any, state: TrainState) -> bool:
        """Restore a checkpoint of this training into the objects given; False when there is
        none (or one of another training, which is left to be overwritten)."""
        if not self.path.exists():
            return False
        payload = torch.load(self.path, map_location="cpu", weights_only=False)
        if payload.get("key") != self.key:
            return False
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        schedule.load_state_dict(payload["schedule"])
        torch.set_rng_state(payload["torch_rng"])
        if payload["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["cuda_rng"])
        state.order_rng.bit_generator.state = payload["order_rng"]
        state.step, state.start = payload["step"], payload["start"]
        state.order = None if payload["order"] is None else payload["order"].numpy()
        state.running, state.losses, state.seconds = payload["running"], payload["losses"], payload["seconds"]
        return True

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        if self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()


class _StopRequest:
    requested = False


@contextlib.contextmanager
def _stop_between_steps() -> Iterator[_StopRequest]:
    """Ctrl-C during training asks to stop after the step under way (checkpointed), rather
    than in the middle of an optimizer update; a second Ctrl-C stops at once. Off the main
    thread (where signals cannot be caught) it changes nothing."""
    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def ask(signum: int, frame: Any) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested = True

    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


@torch.inference_mode()
def predict(model, tokenizer, encoded, regression: bool, batch_size: int, device: torch.device) -> np.ndarray:
    """Class ids (or scores, for regression) for every encoded example, in order."""
    model.eval()
    out = []
    for start in range(0, len(encoded.input_ids), batch_size):
        indices = list(range(start, min(start + batch_size, len(encoded.input_ids))))
        logits = model(**forward_inputs(model, collate(encoded, indices, tokenizer.pad_token_id, device))).logits
        out.append(logits[:, 0].float().cpu().numpy() if regression else logits.argmax(-1).cpu().numpy())
    return np.concatenate(out)


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def record(
    con,
    result: FinetuneResult,
    options: FinetuneOptions,
    base_facts: dict[str, object],
    tuned_facts: dict[str, object],
    train: TaskData,
    device: str,
    command: str | None,
    example_limit: int | None = None,
) -> int:
    """Store a fine-tuning run: both models (the tuned one linked to its base), the run, its
    settings and its dev scores, in one transaction; returns the run id. Every fine-tuning
    is its own run: its identity holds the time it is recorded.

    The run row describes what the model was trained on: `train` (the sample it was trained on,
    `example_limit` the sample size asked for, e.g. --max-train-examples), from the start of
    training to the end of scoring; the scores keep the size of the split they were scored on."""
    from attnwh.ingest.runs.rows import library_versions
    from attnwh.sql import runs
    from attnwh.sql.warehouse import transaction

    out_dir = str(result.out_dir.resolve())
    identity = {"tuned_weights": result.tuned_weights_hash, "out_dir": out_dir, "recorded_ns": time.time_ns()}
    with transaction(con):
        base_id = runs.upsert_model(con, base_facts)
        tuned_id = runs.upsert_model(con, tuned_facts)  # its facts link it to the base
        run_id = runs.create_run(
            con,
            "finetune",
            identity,
            {
                "model_id": tuned_id,
                "base_model_id": base_id,
                "dataset": train.dataset,
                "task": train.task,
                "split": train.split,
                "source": train.source,
                "example_limit": example_limit,
                "seed": options.seed,
                "max_length": options.max_length,
                "n_examples": result.train_examples,
                "n_truncated": 0,
                "device": device,
                "dtype": "float32",
                "batch_size": options.batch_size,
                "versions": json.dumps(library_versions()),
                "command": command,
                **({"started_at": result.started_at} if result.started_at is not None else {}),
            },
        ).run_id
        runs.finish_run(con, run_id, "complete", result.train_seconds, finished_at=result.finished_at)
        con.execute(
            "INSERT INTO finetunes (run_id, from_scratch, train_examples, epochs, learning_rate, warmup,"
            " train_seconds, final_loss, out_dir, eval_split) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                options.from_scratch,
                result.train_examples,
                options.epochs,
                options.learning_rate,
                options.warmup,
                result.train_seconds,
                result.final_loss,
                out_dir,
                result.dev_split,
            ],
        )
        for metric, value in result.scores.items():
            con.execute("INSERT INTO scores VALUES (?, ?, ?, ?)", [run_id, metric, value, result.dev_examples])
    return run_id
