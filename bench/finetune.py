"""Benchmark: fine-tuning a 12-layer encoder at batch 32 whole, in micro-batches, and with
transformers' Trainer.

Three ways to take the same optimizer steps of --batch-size examples (default 32) on SST-2
train examples (with --glue-dir; else the bundled sentiment task) with all-mpnet-base-v2
(`models/all-mpnet-base-v2`, fetched by tools/fetch_all_mpnet.py) or --model:

- whole: attnwh's loop, each step one forward and backward of the whole batch (the baseline);
- micro: attnwh's loop with --micro-batch-size (default 8), gradients accumulated;
- trainer: transformers' Trainer with per-device batches of the micro size and gradient
  accumulation to the same batch, the same AdamW, schedule, clipping and seed.

Each variant runs in a process of its own (so its peak resident memory is its own), --steps
steps, --repeats times after a warm-up round, the variants taking turns. Prints per variant
the median seconds per step (training only: loading and scoring left out) with its range,
the median ratio to whole within a repeat with its range, the peak resident memory, and the
per-step losses of the last repeat side by side (the Trainer's as it logs them).
Usage: ``python bench/finetune.py [--glue-dir ../shared/data/glue] [--repeats 5] [--steps 4]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_train(glue_dir: str | None, n: int):
    from attnwh.ingest.sources import files as loaders

    data = loaders.load_glue(Path(glue_dir), "sst2", "train") if glue_dir else loaders.load_sample("sentiment", "train")
    return data.sample(n, 42)


def attnwh_loop(args: argparse.Namespace, out: Path) -> dict:
    from attnwh.ingest.runs.finetune import Checkpoints, FinetuneOptions, finetune

    train = load_train(args.glue_dir, args.steps * args.batch_size)
    dev = train.sample(8, 0)
    options = FinetuneOptions(epochs=1.0, batch_size=args.batch_size, max_length=128, seed=42)
    micro = args.micro if args.variant == "micro" else None
    result = finetune(args.model, train, dev, out, options, "cpu", checkpoints=Checkpoints(micro, None, None))
    return {"seconds": result.train_seconds, "losses": list(result.step_losses)}


def trainer_loop(args: argparse.Namespace, out: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    train = load_train(args.glue_dir, args.steps * args.batch_size)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    labels = {name: i for i, name in enumerate(train.labels)}
    length = min(128, tokenizer.model_max_length)  # attnwh's loop truncates the same way
    encoded = tokenizer([e.text_a for e in train.examples], truncation=True, max_length=length)
    dataset = Dataset.from_dict({**encoded, "labels": [labels[e.label] for e in train.examples]})
    torch.manual_seed(42)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=len(labels))
    losses: list[float] = []

    began: list[float] = []

    class Losses(TrainerCallback):
        def on_train_begin(self, arguments, state, control, **kwargs):
            began.append(time.perf_counter())  # after the Trainer's own set-up, as attnwh's loop times

        def on_log(self, arguments, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    arguments = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=args.micro,
        gradient_accumulation_steps=args.batch_size // args.micro,
        learning_rate=5e-5,
        weight_decay=0.01,
        warmup_steps=round(0.1 * args.steps),
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=42,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=dataset,
        data_collator=DataCollatorWithPadding(tokenizer),
        callbacks=[Losses()],
    )
    trainer.train()
    return {"seconds": time.perf_counter() - began[0], "losses": losses}


def child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = trainer_loop if args.variant == "trainer" else attnwh_loop
        found = run(args, Path(tmp) / "out")
    found["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "all-mpnet-base-v2"))
    parser.add_argument("--glue-dir", default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default="whole,micro,trainer")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.variant:
        child(args)
        return
    variants = args.variants.split(",")
    found: dict[str, list[dict]] = {v: [] for v in variants}
    for repeat in range(args.repeats + 1):  # a warm-up round first
        for variant in variants if repeat % 2 == 0 else list(reversed(variants)):
            command = [sys.executable, __file__, *sys.argv[1:], "--variant", variant]
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if done.returncode:
                raise SystemExit(f"{variant} failed: {done.stderr[-2000:]}")
            if repeat:
                found[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
    per_step = {v: [r["seconds"] / args.steps for r in runs] for v, runs in found.items()}
    print(f"{args.steps} steps of {args.batch_size} examples, micro-batches of {args.micro}, {args.repeats} repeats")
    for variant, runs in found.items():
        seconds = sorted(per_step[variant])
        ratios = sorted(s / w for s, w in zip(per_step[variant], per_step[variants[0]], strict=True))
        peak = statistics.median(r["peak_rss"] for r in runs) / 2**30
        print(
            f"{variant:8s} {statistics.median(seconds):6.2f} s/step [{seconds[0]:.2f}, {seconds[-1]:.2f}]  "
            f"/ {variants[0]} {statistics.median(ratios):.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]  "
            f"peak RSS {peak:.2f} GiB"
        )
    print("step  " + "  ".join(f"{v:>8s}" for v in variants))
    for step in range(args.steps):
        row = [found[v][-1]["losses"][step] if step < len(found[v][-1]["losses"]) else float("nan") for v in variants]
        print(f"{step + 1:4d}  " + "  ".join(f"{loss:8.4f}" for loss in row))


if __name__ == "__main__":
    main()
