"""The `attnwh` command line: a thin Typer app over attnwh.api (assembled in `root`). Each
command calls the API function of the same name and prints what it returns; the API imports
nothing from here."""

from __future__ import annotations

from attnwh.cli.root import app, main

__all__ = ["app", "main"]
