"""`attnwh show`: one example's attention, token by token, as a self-contained page
(attnwh.api.show)."""

from __future__ import annotations

from pathlib import Path

from attnwh import api
from attnwh.cli.options import cli_command


def show_page(page: Path) -> None:
    print(f"wrote {page}")


show = cli_command(api.show, show_page)
