"""Reading the head ranking a loss sweep's top set is chosen from (`attnwh ingest ablation
--disable-top ROLE:K`): a role score's mean per head in a model's latest head-roles run. No
torch."""

from __future__ import annotations

import duckdb

# Which run and how its heads rank: the latest complete head-roles run of the weights that
# defines the score (needle runs define retrieval, induction runs induction and duplicate).
_LATEST = """
SELECT max(r.run_id)
FROM runs AS r
JOIN models AS m USING (model_id)
JOIN head_roles AS h USING (run_id)
WHERE r.kind = 'roles' AND r.status = 'complete' AND m.weights_hash = $weights AND h.{score} IS NOT NULL
"""
_RANKED = """
SELECT layer, head
FROM head_role_means
WHERE run_id = $run AND {score} IS NOT NULL
ORDER BY {score} DESC, layer, head
"""
SCORES = ("retrieval", "induction", "duplicate", "previous_token", "sink", "local_mass")


def latest_ranking(
    con: duckdb.DuckDBPyConnection, weights_hash: str, score: str
) -> tuple[int, list[tuple[int, int]]] | None:
    """The latest complete head-roles run of the weights `weights_hash` that defines `score`,
    and every head of it by the score's mean over its probes, highest first (ties: lower layer,
    then lower head); None where there is no such run."""
    if score not in SCORES:  # a column name goes into the SQL text: only the known ones
        raise ValueError(f"unknown role score {score!r}")
    row = con.execute(_LATEST.format(score=score), {"weights": weights_hash}).fetchone()
    if row is None or row[0] is None:
        return None
    run_id = int(row[0])
    heads = con.execute(_RANKED.format(score=score), {"run": run_id}).fetchall()
    return run_id, [(int(layer), int(head)) for layer, head in heads]
