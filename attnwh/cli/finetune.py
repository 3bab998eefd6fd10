"""`attnwh finetune`: fine-tune an encoder on a task and record it in the warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from attnwh.cli.options import (
    DEFAULT_DB,
    DatasetConfigOpt,
    DatasetOpt,
    Device,
    GlueDirOpt,
    LabelColumnOpt,
    PairColumnOpt,
    RecordDbOpt,
    TextColumnOpt,
    command_line,
)
from attnwh.cli.progress import Bars, interrupts_as, loading
from attnwh.errors import UsageError
from attnwh.ingest.runs.folders import check_out_dir
from attnwh.ingest.sources.tasks import load_tasks

if TYPE_CHECKING:
    from rich.progress import ProgressColumn

    from attnwh.ingest.sources.examples import TaskData


def steps_column() -> ProgressColumn:
    """The stat column of a fine-tuning bar, which counts optimizer steps: their speed in
    step/s and the running loss (the task field `loss`, "–" until the first step)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Steps(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = f"{task.speed:.1f} step/s" if task.speed else "– step/s"
            return Text(f"{speed} · loss {task.fields.get('loss', '–')}", style="cyan", no_wrap=True)

    return Steps()


def finetune(
    out: Annotated[Path, typer.Option(help="Folder to save the fine-tuned model and tokenizer in.")],
    model: Annotated[
        str | None, typer.Option(help="Hub name or local directory of the encoder; default: the bundled MiniLM.")
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="GLUE task (sst2, mrpc, rte, cola, stsb, ...) or sample task (sentiment, entailment; the default "
            "without a data source); with --data or --dataset, the task's name."
        ),
    ] = None,
    glue_dir: GlueDirOpt = None,
    dataset: DatasetOpt = None,
    dataset_config: DatasetConfigOpt = None,
    data: Annotated[Path | None, typer.Option(help="A local CSV, TSV, JSONL or Parquet file to train on.")] = None,
    eval_data: Annotated[Path | None, typer.Option(help="With --data: the file to score on.")] = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    train_split: Annotated[str, typer.Option(help="Split to train on (with --data: the whole file).")] = "train",
    eval_split: Annotated[str, typer.Option(help="Split to score the tuned model on.")] = "dev",
    max_train_examples: Annotated[
        int | None, typer.Option(min=1, help="Train on a seeded random sample of this many examples.")
    ] = None,
    epochs: Annotated[float, typer.Option(min=0.01, help="Passes over the training data.")] = 3.0,
    lr: Annotated[float, typer.Option(min=0.0, help="Peak learning rate (AdamW, linear warm-up and decay).")] = 5e-5,
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per step.")] = 32,
    max_length: Annotated[int, typer.Option(min=4, help="Truncate inputs to this many tokens.")] = 128,
    warmup: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of steps with linear warm-up.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the sample, the head's initialisation and the batch order.")] = 42,
    from_scratch: Annotated[
        bool, typer.Option(help="Same architecture with random weights (the paper's Table 1 baseline).")
    ] = False,
    device: Annotated[Device, typer.Option(help="auto, cpu or cuda.")] = Device.auto,
    db: RecordDbOpt = DEFAULT_DB,
) -> None:
    """Fine-tune an encoder on a classification (or STS-B regression) task, score it on the eval split with the task's metric, save it with save_pretrained, and record the run, its scores and the tuned model's link to its base in the warehouse.

    Defaults follow Kovaleva et al.'s setup: batch 32, 3 epochs, max length 128, 10 % warm-up, seed 42; the learning rate 5e-5 is the top of BERT's fine-tuning grid, which small encoders need.
    """
    console = Console(stderr=True)
    # A list like every command's --task, but one model is trained on one task.
    names = [t.strip() for item in task or [] for t in item.split(",") if t.strip()]
    if len(names) > 1:
        raise UsageError("attnwh finetune trains on one task; give one --task (`attnwh study` fine-tunes on several)")
    one_task = names[0] if names else None
    if data is not None and (eval_data is None or label_column is None):
        raise UsageError("--data needs --eval-data and --label-column to fine-tune and score")
    check_out_dir(out)
    with loading(console, db, models=[model]):
        if one_task is None and glue_dir is None and dataset is None and data is None:
            one_task = "sentiment"
        if one_task is None and data is not None:
            one_task = data.stem  # the train file names the task, for its scoring file too

        def load(split: str, file: Path | None) -> TaskData:
            return load_tasks(
                [one_task] if one_task else None,
                glue_dir,
                dataset,
                dataset_config,
                file,
                text_column,
                pair_column,
                label_column,
                split,
            )[0]

        train = load(train_split, data).sample(max_train_examples, seed)
        dev = load(eval_split, eval_data)
        # The data and the model's name are checked; now the model libraries.
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.runs.finetune import FinetuneOptions, record
        from attnwh.ingest.runs.finetune import finetune as run_finetune

        options = FinetuneOptions(
            epochs=epochs,
            learning_rate=lr,
            batch_size=batch_size,
            max_length=max_length,
            warmup=warmup,
            seed=seed,
            from_scratch=from_scratch,
        )
    with (
        Bars(console, unit="step", stat=steps_column()) as bars,
        interrupts_as(f"interrupted; the model was not saved to {out} and nothing was written to {db}"),
    ):
        bars.start(f"{'from scratch' if from_scratch else 'fine-tuning'} {train.task}", None, loss="–")

        def on_step(step: int, total: int, loss: float) -> None:
            bars.update(step, total, loss=f"{loss:.4f}")

        result = run_finetune(model, train, dev, out, options, device.value, on_step)
    base = load_encoder(model, device.value)
    tuned = load_encoder(str(out), device.value)
    from attnwh.sql import warehouse

    con = warehouse.connect(db)
    try:
        run_id = record(
            con,
            result,
            options,
            base.facts(),
            tuned.facts(),
            train,
            str(tuned.device),
            command_line(),
            max_train_examples,
        )
    finally:
        con.close()
    scores = ", ".join(f"{k} {v:.4f}" for k, v in result.scores.items())
    Console().print(
        f"{train.task}: trained on {result.train_examples} examples in {result.train_seconds:.1f} s; "
        f"{dev.split} ({result.dev_examples}): {scores}\nsaved to {out.resolve()}; run {run_id} in {db.resolve()}",
        highlight=False,
    )
