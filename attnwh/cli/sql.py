"""`attnwh sql`, `attnwh queries`, `attnwh query`: read-only SQL on a warehouse file."""

from __future__ import annotations

import enum
import json
import sys
import textwrap
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnwh import api
from attnwh.errors import UsageError
from attnwh.options import DEFAULT_DB, ReadDbOpt
from attnwh.sql import queries as named


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
    emit(api.Warehouse(db).sql(statement), format, out)


def queries() -> None:
    """List the named queries with their parameters, each with its title below."""
    console = Console()  # a listing to read: wrapped at 80 columns in a log, as in a terminal
    width = max(console.width, 40)
    # Name and parameters on one line, the title indented below: a title column beside them
    # would get a quarter of an 80-column terminal (or log) and wrap over five lines. Wrapped
    # here rather than by rich, which would pad every line with spaces to the full width.
    for query in named.named_queries().values():
        params = f"parameters: {', '.join(query.params)}" if query.params else "no parameters"
        indent = " " * (len(query.name) + 2)
        head = textwrap.wrap(
            f"{query.name}  {params}", width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
        )
        lines = [Text.assemble((query.name, "bold cyan"), (head[0][len(query.name) :], "dim"))]
        lines += [Text(line, style="dim") for line in head[1:]]
        lines += [
            Text(line) for line in textwrap.wrap(query.title, width, initial_indent="    ", subsequent_indent="    ")
        ]
        for line in lines:
            console.print(line, soft_wrap=True)


def query(
    name: Annotated[str, typer.Argument(help="A named query; `attnwh queries` lists them.")],
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="A parameter as key=value; repeatable.")
    ] = None,
    db: ReadDbOpt = DEFAULT_DB,
    format: FormatOption = Format.table,
    out: OutOption = None,
) -> None:
    """Run a named query on the warehouse (read-only connection).

    A parameter value that can match nothing (a task or model the warehouse lacks, an unknown statistic, a layer or head past the model's last) is refused with the values there are; a valid value that selects no rows gives an empty result.
    """
    params = {}
    for item in param or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--param {item!r} is not key=value")
        params[key.strip()] = value
    named.get_query(name)  # an unknown name is refused before the file is opened
    # A value that can match nothing (a misspelt task, a layer past the last) is refused there.
    emit(api.Warehouse(db).query(name, **params), format, out)


def _is_nested(dtype: pl.DataType) -> bool:
    return isinstance(dtype, (pl.List, pl.Array, pl.Struct)) or type(dtype).__name__ == "Map"


def _contains(dtype: pl.DataType, kinds: tuple[str, ...]) -> bool:
    """Whether a (possibly nested) type is or holds a type named in `kinds`."""
    return any(kind in str(dtype) for kind in kinds)


def _as_json_text(column: pl.Series) -> pl.Series:
    """A nested column as one JSON text per value (nulls stay null): polars' own encoder
    where it can (float32 written short), Python's json where it cannot (BLOBs, maps: polars'
    encoder panics on BLOBs rather than raising)."""
    try:
        if _contains(column.dtype, ("Binary", "Map")):
            raise TypeError(column.dtype)
        encoded = pl.struct("v").struct.json_encode().str.strip_prefix('{"v":').str.strip_suffix("}")
        texts = pl.when(pl.col("v").is_null()).then(None).otherwise(encoded)
        return pl.DataFrame({"v": column}).select(texts).to_series().alias(column.name)
    except Exception:
        values = [
            None if v is None else json.dumps(v, default=_json_default, separators=(",", ":")) for v in column.to_list()
        ]
        return pl.Series(column.name, values, pl.String)


def _json_default(value: object) -> object:
    return value.hex() if isinstance(value, bytes) else str(value)


def _flat(frame: pl.DataFrame, format: Format) -> pl.DataFrame:
    """What CSV and JSON cannot write as it is, as text: BLOBs as hex; in CSV, lists,
    structs and maps as JSON text; in JSON, a nested value holding a BLOB or a map as JSON
    text."""
    columns = []
    for column in frame.iter_columns():
        if column.dtype == pl.Binary:
            column = column.bin.encode("hex")
        elif _is_nested(column.dtype) and (format is Format.csv or _contains(column.dtype, ("Binary", "Map"))):
            column = _as_json_text(column)
        columns.append(column)
    return pl.DataFrame(columns)


def emit(frame: pl.DataFrame | pl.Series, format: Format, out: Path | None) -> None:
    """Write a result in the chosen format to `out` or stdout. CSV has no nested values:
    lists and structs (a thumbnail) are written as JSON text, BLOBs as hex."""
    if isinstance(frame, pl.Series):
        frame = frame.to_frame()
    if format is Format.parquet:
        if out is None:
            raise UsageError("--format parquet needs --out FILE")
        frame.write_parquet(out)
    elif format is Format.csv:
        flat = _flat(frame, format)
        flat.write_csv(out) if out else sys.stdout.write(flat.write_csv())
    elif format is Format.json:
        flat = _flat(frame, format)
        flat.write_json(out) if out else sys.stdout.write(flat.write_json() + "\n")
    else:
        console = Console(file=out.open("w", encoding="utf-8") if out else None)
        print_table(console, frame, fit=out is None and console.is_terminal)


def print_table(console: Console, frame: pl.DataFrame, fit: bool) -> None:
    """A result as a table; with `fit` (a terminal), one that does not fit the console's width
    as records instead, one block per row with a line per column, values wrapped: a table
    squeezed into a terminal would cut every cell to "…". Without `fit` (a file, a pipe) the
    table is drawn as wide as its content, never folded."""
    cells = [[_cell(v) for v in row] for row in frame.iter_rows()]
    widths = [max([len(c)] + [len(row[k]) for row in cells]) for k, c in enumerate(frame.columns)]
    needed = sum(widths) + 3 * len(widths) + 1  # rich's borders and one space of padding a side
    if fit and needed > console.width:
        _print_records(console, frame.columns, cells)
    else:
        if not fit:
            console.width = max(80, needed)
        table = Table(*frame.columns, header_style="bold")
        for row in cells:
            table.add_row(*row)
        console.print(table)
    console.print(f"{frame.height} row{'s' if frame.height != 1 else ''}", style="dim")


def _print_records(console: Console, columns: list[str], cells: list[list[Text]]) -> None:
    """One block per row (as psql's expanded display): a rule naming the row, then each
    column's name and its value, wrapped to the width (never cut)."""
    label = min(max(len(c) for c in columns), max(console.width // 3, 8))
    for number, row in enumerate(cells, 1):
        console.rule(Text(f"row {number} of {len(cells)}", style="dim"), align="left", style="dim")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", width=label, overflow="fold")
        grid.add_column(overflow="fold")
        for name, value in zip(columns, row, strict=True):
            grid.add_row(name, value)
        console.print(grid)


def _cell(value: object) -> Text:
    # Text, not str: a sentence like "[red]" from the data must not be read as rich markup.
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, float):
        return Text(f"{value:.4g}")
    return Text(str(value))
