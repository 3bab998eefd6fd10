"""The `attnwh report` group. Bare `attnwh report` writes the paper's figures from the
warehouse as one self-contained HTML page (attnwh.api.report); `attnwh report results` writes
a results page, Markdown beside the papers' numbers (attnwh.reports.results). This module says
what they wrote, and on stderr which runs' token maps the page left out."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from attnwh import api
from attnwh.cli.helpformat import HelpCommand, HelpGroup
from attnwh.cli.options import cli_command, refuse_options_before
from attnwh.options import DEFAULT_DB, ReadDbOpt
from attnwh.reports.results import ResultsPage

# The group's help is the docstring of its callback, `report`.
report_app = typer.Typer(
    cls=HelpGroup,
    no_args_is_help=False,  # bare `attnwh report` writes report.html from attnwh.duckdb
    add_completion=False,
    pretty_exceptions_enable=False,
)


def show_report(call: tuple[typer.Context, Callable[[], Any]]) -> None:
    """Bare `attnwh report` runs attnwh.api.report and says what it wrote; before a subcommand,
    it refuses its own options and lets the subcommand work."""
    ctx, report = call
    if ctx.invoked_subcommand is not None:
        refuse_options_before(ctx, ctx.invoked_subcommand)
        return
    done: api.Reported = report()
    built = done.report
    drawn = sum(1 for s in built.sections if not s.note)
    print(f"wrote {done.page} ({len(built.charts())} charts, {drawn} of {len(built.sections)} sections with data)")
    for path in done.images:
        print(f"wrote {path}")
    for note in built.token_map_notes:  # the page says so too, where few would look
        print(f"attnwh: warning: token maps left out of the head panel for {note}", file=sys.stderr)


report = cli_command(api.report, show_report, context=True)


def results(
    page: Annotated[
        ResultsPage,
        typer.Option(
            help="study: an encoder's `attnwh study` against Kovaleva et al. (2019); decoder: a causal language "
            "model's attention sinks and a task through its prompt; roles: its head roles and which heads need "
            "the whole context."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Markdown file to write; its figures go into a folder of its name.")
    ],
    db: ReadDbOpt = DEFAULT_DB,
    name: Annotated[
        str | None, typer.Option(help="The model's name on the page (default: its folder's or file's name).")
    ] = None,
    time_dir: Annotated[
        Path | None, typer.Option(help="Folder of `/usr/bin/time -v` outputs (time-<what>.txt), for the cost table.")
    ] = None,
    log: Annotated[
        list[Path] | None,
        typer.Option(help="study: the study's stderr, for the cost table of its stages (repeatable)."),
    ] = None,
    cost_note: Annotated[
        str | None, typer.Option(help="study: a sentence on how the costs were measured (beside other work, say).")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(help="decoder: the model's file or folder; its stored statistics are checked against it."),
    ] = None,
    companion: Annotated[
        str | None, typer.Option(help="decoder, roles: the model's other results page, linked (a relative path).")
    ] = None,
    figures: Annotated[
        bool, typer.Option("--figures/--no-figures", help="Write the page's charts as PNG (the report's own).")
    ] = True,
) -> None:
    """Write a results page: the warehouse's numbers beside the papers', each table naming its query."""
    from attnwh.reports.results import write_results_page

    done = write_results_page(
        db,
        page,
        out,
        name=name,
        time_dir=time_dir,
        logs=log or [],
        cost_note=cost_note,
        model=model,
        companion=companion,
        figures=figures,
    )
    print(f"wrote {done.page}" + (f" and {len(done.figures)} figures" if done.figures else ""))


report_app.callback(invoke_without_command=True)(report)
report_app.command("results", cls=HelpCommand)(results)
