"""`attnwh ingest loss-curve`: a causal language model's next-token loss at every position of
long text (attnwh.api.loss_curve); this module prints the in-context learning score it gives."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console
from attnwh.cli.summaries import print_shards


def show_loss_curve(done: api.Done) -> None:
    from attnwh.ingest.runs.loss_curve import EARLY, LATE

    if done.sharded:
        print_shards(done.results, done.seconds)
        return
    out = results_console()
    wh = api.Warehouse(done.db)
    for summary in done.results:
        if summary.outcome == "already complete":
            out.print(f"loss-curve run {summary.run_id}: already complete (--replace redoes it)", highlight=False)
        if summary.context_length > LATE:
            row = wh.icl_score(run=summary.run_id).row(0, named=True)
            out.print(
                f"ICL score (loss at token {LATE} − loss at token {EARLY}, 0-based, over {row['sequences']} sequences): "
                f"{row['icl_score']:+.3f} nats, 95 % interval [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}], "
                f"p = {row['p_value']:.3g}; loss {row['loss_early']:.3f} at {EARLY}, {row['loss_late']:.3f} at {LATE}",
                highlight=False,
                soft_wrap=True,
            )
        else:
            curve = wh.loss_by_position(run=summary.run_id)
            out.print(
                f"loss {curve['loss'][0]:.3f} at position 1, {curve['loss'][-1]:.3f} at {curve['position'][-1]} "
                f"over {summary.sequences} sequences; no ICL score: position {LATE} needs --context-length "
                f"{LATE + 1} or more (attnwh query loss_by_position -p run={summary.run_id} gives the curve)",
                highlight=False,
                soft_wrap=True,
            )
        if summary.outcome != "already complete":
            out.print(
                f"run {summary.run_id} {summary.outcome} in {summary.seconds:.1f} s → {done.db.resolve()}",
                soft_wrap=True,
            )


loss_curve = cli_command(api.loss_curve, show_loss_curve)
