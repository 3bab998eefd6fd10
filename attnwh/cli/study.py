"""`attnwh study`: every stage of the study in one command (attnwh.api.study, library
`attnwh.study`); this module prints the closing summary."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.summaries import print_study


def show_study(done: api.Done) -> None:
    print_study(done.results[0], done.seconds)


study = cli_command(api.study, show_study)
