"""`attnwh ingest compare`: store how attention changed between a base and a tuned model
(attnwh.api.compare); this module prints what it did."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.summaries import print_runs, print_shards


def show_compare(done: api.Done) -> None:
    if done.sharded:
        print_shards(done.results, done.seconds)
    else:
        print_runs(done.results, done.db, done.seconds, "attention-change")


compare = cli_command(api.compare, show_compare)
