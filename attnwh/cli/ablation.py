"""`attnwh ingest ablation`: disable every head and every layer of a fine-tuned classifier,
score each configuration, and test each effect for significance.

Only typer is imported at module level; torch loads when the command runs.
"""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from attnwh.errors import Interrupted

from attnwh.cli.ingest import (
    DEFAULT_DB,
    BatchSizeOpt,
    DatasetConfigOpt,
    DatasetOpt,
    DataOpt,
    DbOpt,
    Device,
    DeviceOpt,
    GlueDirOpt,
    LabelColumnOpt,
    LimitOpt,
    MaxLengthOpt,
    PairColumnOpt,
    ReplaceOpt,
    SplitOpt,
    TextColumnOpt,
    TruncateOpt,
    _progress,
    ingest_app,
    ingest_options,
    load_tasks,
)


class Mode(str, enum.Enum):
    uniform = "uniform"
    zero = "zero"


@ingest_app.command("ablation")
def ablation(
    model: Annotated[
        str,
        typer.Option(help="A fine-tuned classifier (hub name or local directory, e.g. the --out of `attnwh finetune`)."),
    ],
    task: Annotated[
        list[str] | None,
        typer.Option(help="Task(s) to read, as in `attnwh ingest`. Without a data source: the sample task the model "
                     "was fine-tuned on by `attnwh finetune`, else both sample tasks."),
    ] = None,
    glue_dir: GlueDirOpt = None,
    dataset: DatasetOpt = None,
    dataset_config: DatasetConfigOpt = None,
    data: DataOpt = None,
    text_column: TextColumnOpt = None,
    pair_column: PairColumnOpt = None,
    label_column: LabelColumnOpt = None,
    split: SplitOpt = None,
    limit: LimitOpt = None,
    seed: Annotated[int, typer.Option(help="Seed of the --limit sample, the bootstrap and the permutations.")] = 42,
    max_length: MaxLengthOpt = None,
    truncate: TruncateOpt = True,
    batch_size: BatchSizeOpt = 32,
    mode: Annotated[
        list[Mode] | None,
        typer.Option(help="uniform: a disabled head's weights become 1/n (Kovaleva et al.); zero: its output becomes "
                     "0 (Michel et al.). Repeat for both; one run per mode. Default: uniform."),
    ] = None,
    top_k: Annotated[int, typer.Option(min=1, help="Length of the top-k curve (the k heads that helped most, together).")] = 10,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples and permutations per configuration.")] = 1000,
    importance: Annotated[bool, typer.Option(help="Also store gradient importance per head (Michel et al.).")] = True,
    configs_per_pass: Annotated[
        int | None, typer.Option(min=1, help="Configurations evaluated together in one batch (default: 8 on a GPU, 1 on a CPU).")
    ] = None,
    prefix_cache: Annotated[
        bool, typer.Option(help="Reuse the layers below the first disabled one (exact; off only to check it).")
    ] = True,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
) -> None:
    """Disable each head (L×H configurations) and each whole layer (L) of a fine-tuned classifier, score every configuration with the task's metric, and store the scores with every per-example prediction in ablation_configs, ablation_predictions and ablations.

    Each configuration is compared with the baseline on the same examples: exact McNemar test (accuracy) or paired permutation test (F1, MCC, correlations), a paired bootstrap interval of the delta, and Benjamini–Hochberg adjustment across the sweep. Then all individually helpful heads are disabled together, a top-k curve is scored, and gradient importance per head goes into head_importance. Rerunning resumes an interrupted run and skips a complete one (--replace redoes it).
    """
    console = Console(stderr=True)
    modes = list(dict.fromkeys(m.value for m in mode or [Mode.uniform]))

    from attnwh.sql import warehouse

    warehouse.check_writable(db)
    with console.status("Loading data and model…"):
        from attnwh.ingest.runs.ablation import AblationOptions, check_classifier, gold_labels, ingest_ablation
        from attnwh.ingest.sources.files import SAMPLE_TASKS
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.runs.loop import model_identity, prepare_tasks

        encoder = load_encoder(model, device.value)
        check_classifier(encoder)
        if not task and glue_dir is None and dataset is None and data is None:
            # On the bundled sample, a model made by `attnwh finetune` is swept on its own task.
            tuned_on = (encoder.lineage or {}).get("task")
            task = [tuned_on] if tuned_on in SAMPLE_TASKS else None
        loaded = load_tasks(task, glue_dir, dataset, dataset_config, data, text_column, pair_column, label_column, split)
        options = ingest_options(limit, seed, max_length, truncate, batch_size, replace)
        per_pass = configs_per_pass or (8 if encoder.device.type == "cuda" else 1)
        settings = [
            AblationOptions(mode=m, top_k=top_k, n_resamples=resamples, importance=importance,
                            prefix_cache=prefix_cache, configs_per_pass=per_pass)
            for m in modes
        ]
        prepared = {
            s.mode: prepare_tasks(encoder, loaded, options, {**model_identity(encoder, "ablation"), **s.identity()})
            for s in settings
        }
        for p in prepared[modes[0]]:
            gold_labels(encoder, p.data)  # label mismatches fail before anything is written

    n_configs = 1 + encoder.num_layers * encoder.num_heads + encoder.num_layers
    console.print(
        f"[bold]{encoder.name}[/] ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads) on "
        f"{encoder.device}: {n_configs} configurations per task and mode ({', '.join(modes)}), "
        f"{per_pass} per pass, prefix cache {'on' if prefix_cache else 'off'}",
        highlight=False,
    )
    started = time.perf_counter()
    summaries = []
    with _progress(console) as progress:
        current: list[int] = []

        def on_start(name: str, n: int) -> None:
            current[:] = [progress.add_task(name, total=n)]

        def on_batch(n: int) -> None:
            progress.advance(current[0], n)

        try:
            for s in settings:
                summaries += ingest_ablation(db, encoder, prepared[s.mode], options, s, on_start, on_batch)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; rerun the same command to resume (the work so far is in {db})") from None
    _print_summary(summaries, db, time.perf_counter() - started)


def _print_summary(summaries, db: Path, seconds: float) -> None:
    from rich.table import Table

    def effect(name: str, delta: float, p_adjusted: float | None) -> str:
        return f"{name} {delta:+.4f} (p adj {p_adjusted:.2g})" if p_adjusted is not None else f"{name} {delta:+.4f}"

    table = Table("task · mode", "run", "baseline", "best head", "best layer", "helpful (signif.)", "all helpful",
                  box=None)
    for s in summaries:
        head, layer = s.best_head, s.best_layer
        table.add_row(
            f"{s.task} · {s.mode}", f"{s.run_id} {s.outcome}", f"{s.metric} {s.baseline:.4f}",
            "–" if head is None else effect(f"{head[0]}-{head[1]}", head[2], head[3]),
            "–" if layer is None else effect(str(layer[0]), layer[1], layer[2]),
            f"{s.n_helpful} ({s.n_significant})",
            "–" if s.helpful_delta is None else f"{s.helpful_delta:+.4f}",
        )
    out = Console()
    out.print(table)
    out.print(
        f"Δ: score with it disabled minus baseline; signif.: adjusted p < 0.05 (Benjamini–Hochberg over the "
        f"run's heads and layers). Done in {seconds:.1f} s → {db.resolve()}",
        highlight=False,
    )
