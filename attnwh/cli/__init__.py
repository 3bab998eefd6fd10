"""The `attnwh` command line: a thin Typer app over the library.

Library errors (`attnwh.errors.AttnwhError`) become one line on stderr and a non-zero exit
here, at the edge, and nowhere else.
"""

from __future__ import annotations

import sys

import typer

from attnwh.cli.finetune import finetune
from attnwh.cli.helpformat import HelpCommand, HelpGroup
from attnwh.cli.ingest import ingest_app
from attnwh.cli.merge import merge
from attnwh.cli.patterns import patterns_app
from attnwh.cli.report import report
from attnwh.cli.schema import schema
from attnwh.cli.sql import queries, query, sql
from attnwh.cli.study import study
from attnwh.errors import AttnwhError

app = typer.Typer(
    name="attnwh",
    cls=HelpGroup,
    help="attnwh: an attention warehouse for transformer encoders. Ingest per-head attention "
    "statistics into DuckDB, then query them with SQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# A group: bare `attnwh ingest` runs the statistics ingest; `attnwh ingest compare | relations | ablation`.
app.add_typer(ingest_app, name="ingest")
app.command(cls=HelpCommand)(merge)
app.command(cls=HelpCommand)(sql)
app.command(cls=HelpCommand)(queries)
app.command(cls=HelpCommand)(query)
app.command(cls=HelpCommand)(schema)
app.command(cls=HelpCommand)(report)
app.command(cls=HelpCommand)(finetune)
app.command(cls=HelpCommand)(study)
# A group: `attnwh patterns reclassify | import-labels | train`.
app.add_typer(patterns_app, name="patterns")


def main() -> None:
    """Entry point of the console script and of `python -m attnwh`."""
    try:
        # standalone_mode=False: click's own errors reach us too, to be shown as one line.
        app(standalone_mode=False)
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


def _usage_hint(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else ""


def _fail(message: str, code: int) -> None:
    print(f"attnwh: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)
