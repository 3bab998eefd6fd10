"""`attnwh ingest massive-ablation`: a decoder's massive activations set to zero and to their
mean (attnwh.api.massive_ablation); this module prints what it found and measured."""

from __future__ import annotations

from rich.table import Table

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console
from attnwh.cli.summaries import print_shards


def show_massive_ablation(done: api.Done) -> None:
    from attnwh.ingest.measures.lm_loss import MIN_TESTED_SEQUENCES  # loaded by the run already

    if done.sharded:
        print_shards(done.results, done.seconds)
        return
    out = results_console()
    wh = api.Warehouse(done.db)
    for summary in done.results:
        run = int(summary.run_id)
        entries = wh.sql(
            "SELECT layer, dim, token_kind, mean_value, sequences, sites FROM massive_ablation_entries "
            f"WHERE run_id = {run} ORDER BY layer, dim, token_kind"
        )
        results = wh.query("massive_ablation", run=run)
        sequences = int(results["sequences"][0])
        on = {"first token": "the first token", "punctuation": "punctuation", "other": "other tokens"}
        found = "; ".join(
            f"dim {e['dim']} on {on.get(e['token_kind'], e['token_kind'])} from layer {e['layer']} "
            f"(mean {_number(e['mean_value'])}, in {e['sequences']} of {sequences} sequences)"
            for e in entries.iter_rows(named=True)
        )
        out.print(f"massive activations: {found}", highlight=False, soft_wrap=True)
        tested = sequences >= MIN_TESTED_SEQUENCES
        table = Table(title=f"massive-ablation run {run}: the massive activations set at the layer they appear in")
        for column in ("intervention", "loss (nats/token)", "perplexity", "Δ loss", "95 % interval", "p"):
            table.add_column(column, justify="left" if column == "intervention" else "right")
        for row in results.iter_rows(named=True):
            none = row["intervention"] == "none"
            table.add_row(
                {"none": "as it is", "zero": "set to zero", "mean": "set to their mean"}[row["intervention"]],
                f"{row['loss']:.4f}",
                f"{row['perplexity']:,.2f}",
                "" if none else f"{row['delta']:+.4f}",
                "" if none or not tested else f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
                "" if none or not tested else f"{row['p_value']:.3g}",
            )
        out.print(table)
        if not tested:
            out.print(
                f"{sequences} sequence{'s' if sequences != 1 else ''}: too few for any test (a two-sided sign-flip "
                f"test of n sequences reaches p = 2/2ⁿ at best, under 0.05 from {MIN_TESTED_SEQUENCES}), so no "
                "interval is shown; measure more sequences (--limit, or a longer --text)",
                highlight=False,
            )
        if summary.outcome == "already complete":
            out.print(f"run {run}: already complete (--replace redoes it) → {done.db.resolve()}", soft_wrap=True)
        else:
            out.print(f"run {run} {summary.outcome} in {summary.seconds:.1f} s → {done.db.resolve()}", soft_wrap=True)


def _number(value: float) -> str:
    """A value as a reader takes it in: whole with separators from 1,000 on, else 4 digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


massive_ablation = cli_command(api.massive_ablation, show_massive_ablation)
