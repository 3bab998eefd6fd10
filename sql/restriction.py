"""Reading a restriction run back (`attnwh ingest restriction`): its plan, and the chosen set
for a loss budget, the largest measured set of key/value groups that may keep only their sinks
and window while the loss rises by at most the budget, with the groups that must keep the
whole context. The API and the report both read it here. No torch."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import polars as pl

from attnwh.errors import UsageError
from attnwh.sql import queries as named

# The report's budget: a rise of the next-token loss by at most this many nats per token.
DEFAULT_LOSS_BUDGET = 0.05


@dataclass(frozen=True)
class RestrictionChoice:
    """The largest k of a run's plan whose measured loss increase `delta` is within
    `loss_budget` (nats per token): `restricted` keep only sinks and window, `whole_context`
    (layer, kv_group, rank, delta alone) keep every token; `kv_bytes_saved` of `kv_bytes` at
    `kv_context` tokens; `needle_accuracy` the share of the needle probes' answer tokens
    still predicted with that set restricted (None where the run read no needles)."""

    run_id: int
    loss_budget: float
    k: int
    delta: float
    ci_low: float
    ci_high: float
    kv_bytes_saved: int
    kv_bytes: int
    kv_context: int
    needle_accuracy: float | None
    restricted: pl.DataFrame
    whole_context: pl.DataFrame


def restriction_run(con: duckdb.DuckDBPyConnection, run: int | None) -> int:
    """`run` if it is a restriction run, else (None) the latest one; UsageError otherwise."""
    ids = [r[0] for r in con.execute("SELECT run_id FROM restriction_runs ORDER BY run_id").fetchall()]
    if not ids:
        raise UsageError("no restriction run in this warehouse; add one with `attnwh ingest restriction --model M`")
    if run is None:
        return ids[-1]
    if run not in ids:
        raise UsageError(f"run {run} is no restriction run (restriction runs: {', '.join(map(str, ids))})")
    return run


def plan_frame(con: duckdb.DuckDBPyConnection, run: int) -> pl.DataFrame:
    """The named query restriction_plan for one run."""
    frame = pl.from_arrow(named.run_query(con, named.get_query("restriction_plan"), {"run": run}))
    assert isinstance(frame, pl.DataFrame)
    return frame


def choose(con: duckdb.DuckDBPyConnection, loss_budget: float, run: int | None = None) -> RestrictionChoice:
    """The chosen set of `run` (None: the latest restriction run) for `loss_budget`: the
    largest k measured with delta ≤ budget (k = 0, nothing restricted, where none is)."""
    if not loss_budget >= 0:
        raise UsageError(f"loss budget {loss_budget}: give 0 or more nats per token")
    run_id = restriction_run(con, run)
    plan = plan_frame(con, run_id)
    within = plan.filter(pl.col("delta") <= loss_budget)
    point = (within if within.height else plan.filter(pl.col("k") == 0)).sort("k").row(-1, named=True)
    groups = pl.from_arrow(named.run_query(con, named.get_query("restriction_groups"), {"run": run_id}))
    assert isinstance(groups, pl.DataFrame)
    chosen = pl.DataFrame(point["groups"] or [], schema={"layer": pl.Int16, "kv_group": pl.Int16})
    keep = groups.select(
        pl.col("layer").cast(pl.Int16), pl.col("kv_group").cast(pl.Int16), "rank", "delta", "ci_low", "ci_high"
    ).join(chosen, on=["layer", "kv_group"], how="anti")
    return RestrictionChoice(
        run_id=run_id,
        loss_budget=loss_budget,
        k=point["k"],
        delta=point["delta"],
        ci_low=point["ci_low"],
        ci_high=point["ci_high"],
        kv_bytes_saved=point["kv_bytes_saved"],
        kv_bytes=point["kv_bytes"],
        kv_context=point["kv_context"],
        needle_accuracy=point["needle_accuracy"],
        restricted=chosen.sort("layer", "kv_group"),
        whole_context=keep.sort("layer", "kv_group"),
    )
