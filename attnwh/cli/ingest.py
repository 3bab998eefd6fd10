"""The `attnwh ingest` group. Bare `attnwh ingest` runs an encoder over a dataset and stores
per-head attention statistics; its subcommands `compare`, `relations`, `ablation`, `roles`,
`restriction`, `streaming`, `massive-ablation` and `loss-curve` (one module each) are registered here.

Only typer is imported at module level: torch, transformers and datasets load when the
command runs, so `attnwh sql` and `attnwh --help` stay fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from attnwh import api
from attnwh.cli.ablation import ablation
from attnwh.cli.compare import compare
from attnwh.cli.helpformat import HelpCommand, HelpGroup
from attnwh.cli.loss_curve import loss_curve
from attnwh.cli.massive_ablation import massive_ablation
from attnwh.cli.options import cli_command, refuse_options_before
from attnwh.cli.relations import relations
from attnwh.cli.restriction import restriction
from attnwh.cli.roles import roles
from attnwh.cli.streaming import streaming
from attnwh.cli.summaries import print_runs, print_shards

# The group's help is the docstring of its callback, `ingest`.
ingest_app = typer.Typer(
    cls=HelpGroup,
    no_args_is_help=False,  # bare `attnwh ingest` runs the statistics ingest on the defaults
    add_completion=False,
    pretty_exceptions_enable=False,
)


def show_ingest(call: tuple[typer.Context, Callable[[], Any]]) -> None:
    """Bare `attnwh ingest` runs attnwh.api.ingest and prints its runs; before a subcommand,
    it refuses its own options and lets the subcommand work."""
    ctx, ingest = call
    if ctx.invoked_subcommand is not None:
        refuse_options_before(ctx, ctx.invoked_subcommand)
        return
    done = ingest()
    if done.sharded:
        print_shards(done.results, done.seconds)
    else:
        print_runs(done.results, done.db, done.seconds)


ingest = cli_command(api.ingest, show_ingest, context=True)


ingest_app.callback(invoke_without_command=True)(ingest)
ingest_app.command("compare", cls=HelpCommand)(compare)
ingest_app.command("relations", cls=HelpCommand)(relations)
ingest_app.command("ablation", cls=HelpCommand)(ablation)
ingest_app.command("roles", cls=HelpCommand)(roles)
ingest_app.command("restriction", cls=HelpCommand)(restriction)
ingest_app.command("massive-ablation", cls=HelpCommand)(massive_ablation)
ingest_app.command("loss-curve", cls=HelpCommand)(loss_curve)
ingest_app.command("streaming", cls=HelpCommand)(streaming)
