"""`attnwh report`: the paper's figures from the warehouse, as one self-contained HTML page.

Kept import-light: altair, polars and vl-convert are imported when the command runs, so
`attnwh --help` and the other commands do not pay for them.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from attnwh.cli.options import DEFAULT_DB, ReadDbOpt
from attnwh.errors import UsageError


class ReportFormat(str, enum.Enum):
    html = "html"
    png = "png"
    svg = "svg"


def report(
    db: ReadDbOpt = DEFAULT_DB,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="HTML file to write (default report.html); with --format png|svg, a folder."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Only runs of this model (its name as stored).")] = None,
    task: Annotated[str | None, typer.Option(help="Only runs of this task.")] = None,
    format: Annotated[
        ReportFormat,
        typer.Option("--format", "-f", help="html: the page; png or svg: the page plus every chart as an image."),
    ] = ReportFormat.html,
) -> None:
    """Write an HTML report (charts from named SQL queries, provenance) of the warehouse."""
    from attnwh.reports.build import build_report, write_html, write_images

    if format is ReportFormat.html:
        target = out or Path("report.html")
        if target.is_dir():
            raise UsageError(f"--out {target} is a folder; give a file name such as {target / 'report.html'}")
    else:
        folder = out or Path("report")
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"--format {format.value} writes a folder of images; --out {folder} is a file")
        target = folder / "report.html"
    built = build_report(db, model=model, task=task)
    page = write_html(built, target)
    drawn = sum(1 for s in built.sections if not s.note)
    print(f"wrote {page} ({len(built.charts())} charts, {drawn} of {len(built.sections)} sections with data)")
    if format is not ReportFormat.html:
        for path in write_images(built, target.parent, format.value):
            print(f"wrote {path}")
