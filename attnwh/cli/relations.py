"""`attnwh ingest relations`: which heads track dependency relations, feature words and frames
(attnwh.api.relations); this module prints what it found."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console
from attnwh.cli.summaries import print_relations, print_shards


def show_relations(done: api.Done) -> None:
    if done.sharded:
        print_shards(done.results, done.seconds)
        return
    for summary in done.results:
        print_relations(summary, done.db)
    results_console().print(f"done in {done.seconds:.1f} s → {done.db.resolve()}", soft_wrap=True)


relations = cli_command(api.relations, show_relations)
