"""The `attnwh` command line: a thin Typer app over attnwh.api (assembled in `root`).

The app is built on first use (``attnwh.cli.app``, ``attnwh.cli.main``), not when this
package is imported: attnwh.api takes its option types from `attnwh.cli.options`, and the
commands call attnwh.api.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("app", "main"):
        from attnwh.cli import root

        return getattr(root, name)
    raise AttributeError(f"module 'attnwh.cli' has no attribute {name!r}")
