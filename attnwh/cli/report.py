"""`attnwh report`: the paper's figures from the warehouse, as one self-contained HTML page
(attnwh.api.report); this module says what it wrote."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command


def show_report(done: api.Reported) -> None:
    built = done.report
    drawn = sum(1 for s in built.sections if not s.note)
    print(f"wrote {done.page} ({len(built.charts())} charts, {drawn} of {len(built.sections)} sections with data)")
    for path in done.images:
        print(f"wrote {path}")


report = cli_command(api.report, show_report)
