"""`attnwh ingest restriction`: which key/value groups of a decoder need the whole context
(attnwh.api.restriction); this module prints the plan it measured."""

from __future__ import annotations

from rich.table import Table

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console
from attnwh.cli.summaries import print_shards


def show_restriction(done: api.Done) -> None:
    from attnwh.ingest.measures.lm_loss import MIN_TESTED_SEQUENCES  # loaded by the run already

    if done.sharded:
        print_shards(done.results, done.seconds)
        return
    out = results_console()
    for summary in done.results:
        if summary.outcome == "already complete":
            out.print(f"restriction run {summary.run_id}: already complete (--replace redoes it)", highlight=False)
            continue
        plan = api.Warehouse(done.db).restriction_plan(run=summary.run_id)
        table = Table(title=f"restriction run {summary.run_id}: the k least harmed groups restricted together")
        needles = bool(plan["needles"][0])
        sequences = int(plan["sequences"][0])
        tested = sequences >= MIN_TESTED_SEQUENCES
        columns = ("k", "loss (nats/token)", "Δ loss", "95 % interval", "needle accuracy", "KV saved", "of the cache")
        for column in columns if needles else (c for c in columns if c != "needle accuracy"):
            table.add_column(column, justify="right")
        for row in plan.iter_rows(named=True):
            cells = [
                str(row["k"]),
                f"{row['loss']:.4f}",
                f"{row['delta']:+.4f}",
                f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]" if tested else "–",
                *([f"{row['needle_accuracy']:.0%}"] if needles else []),
                f"{row['kv_bytes_saved'] / 2**20:,.1f} MiB at {row['kv_context']:,}",
                f"{row['saved_share']:.0%}",
            ]
            table.add_row(*cells)
        out.print(table)
        if not tested:
            out.print(
                f"{sequences} sequence{'s' if sequences != 1 else ''}: too few for any test (a two-sided sign-flip "
                f"test of n sequences reaches p = 2/2ⁿ at best, under 0.05 from {MIN_TESTED_SEQUENCES}), so no "
                "interval is shown; measure more sequences (--limit, or a longer --text)",
                highlight=False,
            )
        out.print(
            f"run {summary.run_id} {summary.outcome} in {summary.seconds:.1f} s → {done.db.resolve()}", soft_wrap=True
        )


restriction = cli_command(api.restriction, show_restriction)
