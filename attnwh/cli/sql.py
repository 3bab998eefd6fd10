"""`attnwh sql`, `attnwh queries`, `attnwh query`: read-only SQL on a warehouse file."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnwh.cli.options import DEFAULT_DB, ReadDbOpt
from attnwh.errors import UsageError
from attnwh.sql import queries as named
from attnwh.sql import warehouse


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout (required for parquet).")
]


def sql(
    statement: Annotated[str, typer.Argument(help='SQL to run, e.g. "SELECT * FROM runs".')],
    db: ReadDbOpt = DEFAULT_DB,
    format: FormatOption = Format.table,
    out: OutOption = None,
) -> None:
    """Run ad hoc SQL on the warehouse (read-only connection)."""
    con = warehouse.connect(db, read_only=True)
    try:
        emit(pl.from_arrow(named.run_sql(con, statement)), format, out)
    finally:
        con.close()


def queries() -> None:
    """List the named queries with their titles and parameters."""
    table = Table("name", "parameters", "title", box=None, header_style="bold")
    for query in named.named_queries().values():
        table.add_row(query.name, ", ".join(query.params) or "-", query.title)
    Console().print(table)


def query(
    name: Annotated[str, typer.Argument(help="A named query; `attnwh queries` lists them.")],
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="A parameter as key=value; repeatable.")
    ] = None,
    db: ReadDbOpt = DEFAULT_DB,
    format: FormatOption = Format.table,
    out: OutOption = None,
) -> None:
    """Run a named query on the warehouse (read-only connection)."""
    params = {}
    for item in param or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--param {item!r} is not key=value")
        params[key.strip()] = value
    found = named.get_query(name)
    con = warehouse.connect(db, read_only=True)
    try:
        emit(pl.from_arrow(named.run_query(con, found, params)), format, out)
    finally:
        con.close()


def emit(frame: pl.DataFrame | pl.Series, format: Format, out: Path | None) -> None:
    """Write a result in the chosen format to `out` or stdout."""
    if isinstance(frame, pl.Series):
        frame = frame.to_frame()
    if format is Format.parquet:
        if out is None:
            raise UsageError("--format parquet needs --out FILE")
        frame.write_parquet(out)
    elif format is Format.csv:
        frame.write_csv(out) if out else sys.stdout.write(frame.write_csv())
    elif format is Format.json:
        frame.write_json(out) if out else sys.stdout.write(frame.write_json() + "\n")
    else:
        cells = [[_cell(v) for v in row] for row in frame.iter_rows()]
        table = Table(*frame.columns, header_style="bold")
        for row in cells:
            table.add_row(*row)
        # Off a terminal (a file, a pipe) draw the table as wide as its content, never folded.
        widths = [max([len(c)] + [len(row[k]) for row in cells]) for k, c in enumerate(frame.columns)]
        console = Console(file=out.open("w", encoding="utf-8") if out else None)
        if out is not None or not console.is_terminal:
            console.width = max(80, sum(widths) + 3 * len(widths) + 1)
        console.print(table)
        console.print(f"{frame.height} row{'s' if frame.height != 1 else ''}", style="dim")


def _cell(value: object) -> Text:
    # Text, not str: a sentence like "[red]" from the data must not be read as rich markup.
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, float):
        return Text(f"{value:.4g}")
    return Text(str(value))
