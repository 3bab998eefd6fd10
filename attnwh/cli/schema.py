"""`attnwh schema`: the warehouse's tables and views, their columns and types, and what each
holds (the comments of migration 0007), read from the file itself (attnwh.sql.catalog)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnwh.cli.sql import Format, FormatOption, OutOption, emit
from attnwh.options import DEFAULT_DB, ReadDbOpt
from attnwh.sql import warehouse
from attnwh.sql.catalog import describe


def schema(
    table: Annotated[str | None, typer.Argument(help="Show only this table or view.")] = None,
    db: ReadDbOpt = DEFAULT_DB,
    format: FormatOption = Format.table,
    out: OutOption = None,
) -> None:
    """List the warehouse's tables and views, their columns, types and what each holds (read-only)."""
    con = warehouse.connect(db, read_only=True)
    try:
        frame = describe(con, table)
    finally:
        con.close()
    if format is not Format.table:
        emit(frame, format, out)
        return
    _print(frame, out)


def _print(frame: pl.DataFrame, out: Path | None) -> None:
    console = Console(file=out.open("w", encoding="utf-8") if out else None)
    if out is not None or not console.is_terminal:
        console.width = 120
    first = True
    for (name, kind, table_comment), group in frame.group_by(["table", "kind", "table_comment"], maintain_order=True):
        if not first:
            console.print()
        first = False
        # Text, not str: a comment like "[CLS]" must not be read as rich markup.
        heading = Text(str(name), style="bold")
        heading.append(f" ({kind})", style="dim")
        if table_comment:
            heading.append(f": {table_comment}")
        console.print(heading)
        columns = Table("column", "type", "comment", box=None, header_style="bold", padding=(0, 2, 0, 2))
        for column, dtype, comment in group.select("column", "type", "comment").iter_rows():
            columns.add_row(Text(column), Text(dtype, style="dim"), Text(comment or ""))
        console.print(columns)
