"""`attnwh ingest roles`: each decoder head's role on probe inputs (attnwh.api.roles); this module
prints the runs and the heads that score highest."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console
from attnwh.cli.summaries import print_shards

SINK_EPS = 0.3  # Gu et al. (2025)'s ε


def show_roles(done: api.Done) -> None:
    from attnwh.sql import queries, warehouse

    if done.sharded:
        print_shards(done.results, done.seconds)
        return
    out = results_console()
    con = warehouse.connect(done.db, read_only=True)
    named = queries.named_queries()["head_roles"]
    try:
        for summary in done.results:
            top = queries.run_query(con, named, {"run": summary.run_id}).to_pylist()
            if summary.seconds is None:
                out.print(f"{summary.kind} run {summary.run_id}: already complete (--replace redoes it)")
            else:
                out.print(
                    f"{summary.kind} run {summary.run_id} {summary.outcome}: {summary.n_written} of "
                    f"{summary.n_probes} probes in {summary.seconds:.1f} s"
                )
            if summary.kind in ("random", "text"):
                # Where sinks emerge (Gu et al. 2025): heads whose mean first-token share exceeds 0.3.
                sinks = sum(1 for r in top if r["sink"] > SINK_EPS)
                out.print(
                    f"  sink heads (first-token share > {SINK_EPS}): {sinks} of {len(top)} ({sinks / len(top):.0%})"
                )
                continue
            score = "induction" if summary.kind == "induction" else "retrieval"
            best = sorted(top, key=lambda r: -(r[score] or 0))[:5]
            heads = ", ".join(f"L{r['layer']}H{r['head']} {r[score]:.3f}" for r in best if r[score] is not None)
            out.print(f"  top {score} heads: {heads}")
    finally:
        con.close()
    out.print(f"done in {done.seconds:.1f} s → {done.db.resolve()}", soft_wrap=True)


roles = cli_command(api.roles, show_roles)
