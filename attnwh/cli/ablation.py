"""`attnwh ingest ablation`: disable every head and every layer of a fine-tuned classifier,
score each configuration, and test each effect for significance.

Only typer is imported at module level; torch loads when the command runs.
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.console import Console

from attnwh.cli.options import (
    DEFAULT_DB,
    DataSource,
    DbOpt,
    Device,
    DeviceOpt,
    Engine,
    Reading,
    ReplaceOpt,
    with_option_groups,
)
from attnwh.cli.progress import loading, run_resumable
from attnwh.cli.summaries import describe, print_ablation, print_shards


class Mode(str, enum.Enum):
    uniform = "uniform"
    zero = "zero"


@with_option_groups
def ablation(
    model: Annotated[
        str,
        typer.Option(
            help="A fine-tuned classifier (hub name or local directory, e.g. the --out of `attnwh finetune`)."
        ),
    ],
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="Task(s) to read, as in `attnwh ingest`. Without a data source: the sample task the model "
            "was fine-tuned on by `attnwh finetune`, else both sample tasks."
        ),
    ] = None,
    *,
    source: DataSource,
    seed: Annotated[int, typer.Option(help="Seed of the --limit sample, the bootstrap and the permutations.")] = 42,
    reading: Reading,
    mode: Annotated[
        list[Mode] | None,
        typer.Option(
            help="uniform: a disabled head's weights become 1/n (Kovaleva et al.); zero: its output becomes "
            "0 (Michel et al.). Repeat for both; one run per mode. Default: uniform."
        ),
    ] = None,
    top_k: Annotated[
        int, typer.Option(min=1, help="Length of the top-k curve (the k heads that helped most, together).")
    ] = 10,
    resamples: Annotated[
        int, typer.Option(min=100, help="Bootstrap resamples and permutations per configuration.")
    ] = 1000,
    importance: Annotated[bool, typer.Option(help="Also store gradient importance per head (Michel et al.).")] = True,
    configs_per_pass: Annotated[
        int | None,
        typer.Option(min=1, help="Configurations evaluated together in one batch (default: 8 on a GPU, 1 on a CPU)."),
    ] = None,
    prefix_cache: Annotated[
        bool, typer.Option(help="Reuse the layers below the first disabled one (exact; off only to check it).")
    ] = True,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> None:
    """Disable each head (L×H configurations) and each whole layer (L) of a fine-tuned classifier, score every configuration with the task's metric, and store the scores with every per-example prediction in ablation_configs, ablation_predictions and ablations.

    Each configuration is compared with the baseline on the same examples: exact McNemar test (accuracy) or paired permutation test (F1, MCC, correlations), a paired bootstrap interval of the delta, and Benjamini–Hochberg adjustment across the sweep. Then all individually helpful heads are disabled together, a top-k curve is scored, every sink head is disabled together (mean attention to [CLS], [SEP] or punctuation above 0.3, read from a statistics run of the same model that holds these examples: run `attnwh ingest` on them first), and gradient importance per head goes into head_importance. Rerunning resumes an interrupted run and skips a complete one (--replace redoes it).
    """
    console = Console(stderr=True)
    modes = list(dict.fromkeys(m.value for m in mode or [Mode.uniform]))
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, source, models=[model]):
        # Data errors before torch is imported; only a sweep of the bundled sample without
        # --task waits for the model, whose fine-tuning task it is swept on.
        loaded = source.load(task) if task or source.given else None
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.runs.ablation import (
            AblationOptions,
            check_classifier,
            gold_labels,
            ingest_ablation,
            prepare_ablation,
            shard_ablation,
        )
        from attnwh.ingest.sources.files import SAMPLE_TASKS

        encoder = load_encoder(model, device.value)
        check_classifier(encoder)
        if loaded is None:
            # On the bundled sample, a model made by `attnwh finetune` is swept on its own task.
            tuned_on = (encoder.lineage or {}).get("task")
            loaded = source.load([tuned_on] if tuned_on in SAMPLE_TASKS else None)
        options = reading.ingest_options(replace)
        per_pass = configs_per_pass or (8 if encoder.device.type == "cuda" else 1)
        settings = [
            AblationOptions(
                mode=m,
                top_k=top_k,
                n_resamples=resamples,
                importance=importance,
                prefix_cache=prefix_cache,
                configs_per_pass=per_pass,
            )
            for m in modes
        ]
        prepared = {s.mode: prepare_ablation(encoder, loaded, options, s) for s in settings}
        for p in prepared[modes[0]]:
            gold_labels(encoder, p.data)  # label mismatches fail before anything is written

    n_configs = 1 + encoder.num_layers * encoder.num_heads + encoder.num_layers
    console.print(
        f"{describe(encoder)}: {n_configs} configurations per task and mode ({', '.join(modes)}), "
        f"{per_pass} per pass, prefix cache {'on' if prefix_cache else 'off'}",
        highlight=False,
    )
    if run_on.shard:
        shards, seconds = run_resumable(
            console,
            run_on.shard_dir or db,
            lambda bars: [
                summary
                for s in settings
                for summary in shard_ablation(encoder, prepared[s.mode], options, s, run_on, bars.start, bars.advance)
            ],
        )
        print_shards(shards, seconds)
        return
    summaries, seconds = run_resumable(
        console,
        db,
        lambda bars: [
            summary
            for s in settings
            for summary in ingest_ablation(db, encoder, prepared[s.mode], options, s, bars.start, bars.advance, run_on)
        ],
    )
    print_ablation(summaries, db, seconds)
