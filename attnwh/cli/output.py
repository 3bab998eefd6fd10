"""Where a command's results are printed: standard output, as wide as they are."""

from __future__ import annotations

import os

from rich.console import Console

# Wider than any table attnwh prints: a result written to a file is never cut or folded.
UNBOUNDED = 100_000


def results_console() -> Console:
    """The console for a command's results. In a terminal, the terminal's width; written to a
    file or a pipe, where rich would draw 80 columns and cut the tables to fit, as wide as
    what is printed (unless COLUMNS says otherwise)."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=UNBOUNDED)
