"""The `attnwh` app: every command in its panel, and the entry point.

Library errors (`attnwh.errors.AttnwhError`) become one line on stderr and a non-zero exit
here, at the edge, and nowhere else.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Annotated, Any

import typer

from attnwh.cli.finetune import finetune
from attnwh.cli.helpformat import HelpCommand, HelpGroup
from attnwh.cli.ingest import ingest_app
from attnwh.cli.merge import merge
from attnwh.cli.patterns import patterns_app
from attnwh.cli.report import report_app
from attnwh.cli.schema import schema
from attnwh.cli.show import show
from attnwh.cli.sql import queries, query, sql
from attnwh.cli.status import status
from attnwh.cli.study import study
from attnwh.errors import AttnwhError, Interrupted
from attnwh.ingest.runs import threads
from attnwh.options import TYPED, command_line
from attnwh.sql import sharing

# The panels of `attnwh --help`, and the order of the commands in them: what a newcomer runs
# first, then what reads the warehouse, then the rest.
RUN, READ, MORE = "Run models", "Read the warehouse", "More"
ORDER = (
    "study",
    "ingest",
    "finetune",
    "status",
    "report",
    "show",
    "query",
    "queries",
    "sql",
    "schema",
    "patterns",
    "merge",
)


class _RootGroup(HelpGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(super().list_commands(ctx), key=lambda name: (ORDER + (name,)).index(name))


def _version(value: bool) -> None:
    if value:
        print(f"attnwh {importlib.metadata.version('attnwh')}")
        raise typer.Exit()


app = typer.Typer(
    name="attnwh",
    cls=_RootGroup,
    help="attnwh: an attention warehouse for transformers, encoders and causal language models. Ingest per-head attention "
    "statistics into DuckDB, then query them with SQL.",
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_version, help="Show attnwh's version and exit.")
    ] = False,
) -> None:
    """The root of every command: --version, and the help for a bare `attnwh`."""
    if ctx.invoked_subcommand is None:  # bare `attnwh`: the help
        print(ctx.get_help())


app.command(cls=HelpCommand, rich_help_panel=RUN)(study)
# A group: bare `attnwh ingest` runs the statistics ingest; `attnwh ingest compare | relations | ablation`.
app.add_typer(ingest_app, name="ingest", rich_help_panel=RUN)
app.command(cls=HelpCommand, rich_help_panel=RUN)(finetune)
app.command(cls=HelpCommand, rich_help_panel=READ)(status)
# A group: bare `attnwh report` writes the HTML report; `attnwh report results` a results page.
app.add_typer(report_app, name="report", rich_help_panel=READ)
app.command(cls=HelpCommand, rich_help_panel=READ)(show)
app.command(cls=HelpCommand, rich_help_panel=READ)(query)
app.command(cls=HelpCommand, rich_help_panel=READ)(queries)
app.command(cls=HelpCommand, rich_help_panel=READ)(sql)
app.command(cls=HelpCommand, rich_help_panel=READ)(schema)
# A group: `attnwh patterns reclassify | import-labels | train`.
app.add_typer(patterns_app, name="patterns", rich_help_panel=MORE)
app.command(cls=HelpCommand, rich_help_panel=MORE)(merge)


def main() -> None:
    """Entry point of the console script and of `python -m attnwh`."""
    # Before any command imports torch: its OpenMP threads then spin briefly before they sleep,
    # so a busy machine costs time, not CPU (attnwh.ingest.runs.threads).
    threads.configure()
    typed = TYPED.set(sys.argv[1:])
    try:
        # standalone_mode=False: click's own errors reach us too, to be shown as one line.
        # Typer turns a Ctrl-C outside the commands' own handling (while a model loads, say)
        # into the return value 130 rather than an exception.
        # writing(): a command that writes a warehouse holds it to its end and keeps its
        # status there for `attnwh status`.
        with sharing.writing(command_line()):
            if app(standalone_mode=False) == 130:
                raise Interrupted("interrupted")
    except AttnwhError as exc:
        _fail(str(exc), exc.exit_code)
    except typer.TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(0)
        _fail(exc.format_message() + _usage_hint(exc), exc.exit_code)
    except typer.Abort:
        _fail("interrupted", 130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    finally:
        TYPED.reset(typed)


def _usage_hint(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else ""


def _fail(message: str, code: int) -> None:
    print(f"attnwh: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)
