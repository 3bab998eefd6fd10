"""The `attnwh` command line: a thin Typer app over the library.

Library errors (`attnwh.errors.AttnwhError`) become one line on stderr and a non-zero exit
here, at the edge, and nowhere else.
"""

from __future__ import annotations

import sys

import typer

from attnwh.errors import AttnwhError
from attnwh.ingest.cli import ingest
from attnwh.sql.cli import queries, query, sql

app = typer.Typer(
    name="attnwh",
    help="attnwh: an attention warehouse for transformer encoders. Ingest per-head attention "
    "statistics into DuckDB, then query them with SQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(ingest)
app.command()(sql)
app.command()(queries)
app.command()(query)


def main() -> None:
    """Entry point of the console script and of `python -m attnwh`."""
    try:
        app()
    except AttnwhError as exc:
        print(f"attnwh: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
