"""The `attnwh report` group. Bare `attnwh report` writes the paper's figures from the
warehouse as one self-contained HTML page (attnwh.api.report); `attnwh report results` writes
a results page, Markdown beside the papers' numbers (attnwh.reports.results). This module says
what they wrote, and on stderr which runs' token maps the page left out."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import typer

from attnwh import api
from attnwh.cli.helpformat import HelpCommand, HelpGroup
from attnwh.cli.options import cli_command, refuse_options_before

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


def show_results(done: Any) -> None:
    print(f"wrote {done.page}" + (f" and {len(done.figures)} figures" if done.figures else ""))


results = cli_command(api.report_results, show_results)


report_app.callback(invoke_without_command=True)(report)
report_app.command("results", cls=HelpCommand)(results)
