"""`attnwh report`: the paper's figures from the warehouse, as one self-contained HTML page
(attnwh.api.report); this module says what it wrote, and on stderr which runs' token maps
it left out."""

from __future__ import annotations

import sys

from attnwh import api
from attnwh.cli.options import cli_command


def show_report(done: api.Reported) -> None:
    built = done.report
    drawn = sum(1 for s in built.sections if not s.note)
    print(f"wrote {done.page} ({len(built.charts())} charts, {drawn} of {len(built.sections)} sections with data)")
    for path in done.images:
        print(f"wrote {path}")
    for note in built.token_map_notes:  # the page says so too, where few would look
        print(f"attnwh: warning: token maps left out of the head panel for {note}", file=sys.stderr)


report = cli_command(api.report, show_report)
