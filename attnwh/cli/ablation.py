"""`attnwh ingest ablation`: disable every head and every layer of a fine-tuned classifier,
score each configuration and test each effect (attnwh.api.ablation); this module prints the
headline of each run."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.summaries import print_ablation, print_loss_ablation, print_shards


def show_ablation(done: api.Done) -> None:
    if done.sharded:
        print_shards(done.results, done.seconds)
    elif done.results and hasattr(done.results[0], "n_tokens"):  # a sweep scored by next-token loss
        print_loss_ablation(done.results, done.db, done.seconds)
    else:
        print_ablation(done.results, done.db, done.seconds)


ablation = cli_command(api.ablation, show_ablation)
