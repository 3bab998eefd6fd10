"""`attnwh ingest streaming`: StreamingLLM's experiment, every key/value group keeping only its
sinks and a window (attnwh.api.streaming); this module prints the loss per length and S."""

from __future__ import annotations

from rich.table import Table

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console
from attnwh.cli.summaries import print_shards


def show_streaming(done: api.Done) -> None:
    from attnwh.ingest.measures.lm_loss import MIN_TESTED_SEQUENCES  # loaded by the run already

    if done.sharded:
        print_shards(done.results, done.seconds)
        return
    out = results_console()
    for summary in done.results:
        if summary.outcome == "already complete":
            out.print(f"streaming run {summary.run_id}: already complete (--replace redoes it)", highlight=False)
        found = api.Warehouse(done.db).query("streaming_loss", run=summary.run_id)
        if found.is_empty():
            continue
        window = int(found["window"][0])
        fewest = int(found["sinks"].min())  # type: ignore[arg-type]
        tested = int(found["sequences"].min()) >= MIN_TESTED_SEQUENCES  # type: ignore[arg-type]
        table = Table(
            title=f"streaming run {summary.run_id}: every key/value group keeps S sinks + {window} recent",
            caption="S = all: the model as it is, every key kept",
        )
        columns = ["L", "S", "loss (nats/token)", "perplexity", "Δ loss", "95 % interval", f"Δ vs S={fewest}"]
        columns += [f"vs S={fewest} interval"]
        for column in columns:
            table.add_column(column, justify="right")
        for length in found["context_length"].unique(maintain_order=True).to_list():
            rows = found.filter(found["context_length"] == length).to_dicts()
            first = rows[0]
            table.add_row(
                str(length), "all", f"{first['baseline_loss']:.4f}", f"{first['baseline_perplexity']:.2f}", *[""] * 4
            )
            for row in rows:
                versus = row["versus_delta"] is not None
                table.add_row(
                    "",
                    str(row["sinks"]),
                    f"{row['loss']:.4f}",
                    f"{row['perplexity']:.2f}",
                    f"{row['delta']:+.4f}",
                    _interval(tested, row["ci_low"], row["ci_high"]),
                    f"{row['versus_delta']:+.4f}" if versus else "",
                    _interval(tested, row["versus_ci_low"], row["versus_ci_high"]) if versus else "",
                )
            table.add_section()
        out.print(table)
        sequences = int(found["sequences"].min())  # type: ignore[arg-type]
        if not tested:
            out.print(
                f"{sequences} sequence{'s' if sequences != 1 else ''} of some length: too few for any test (a "
                f"two-sided sign-flip test of n sequences reaches p = 2/2ⁿ at best, under 0.05 from "
                f"{MIN_TESTED_SEQUENCES}), so no interval is shown; measure more (--limit, or a longer --text)",
                highlight=False,
            )
        if summary.outcome != "already complete":
            out.print(
                f"run {summary.run_id} {summary.outcome} in {summary.seconds:.1f} s → {done.db.resolve()}",
                soft_wrap=True,
            )


def _interval(tested: bool, low: float | None, high: float | None) -> str:
    """An interval as the table shows it; a dash where too few sequences allow a test."""
    return f"[{low:+.4f}, {high:+.4f}]" if tested and low is not None and high is not None else "–"


streaming = cli_command(api.streaming, show_streaming)
