"""The named queries behind the printed headlines (ablation_summary, study_summary) and the
report's opening line (report_scope): each runs with no parameters on an empty and on the
synthetic warehouse, and picks the same rows as the Python it replaced, ties included."""

from __future__ import annotations

import pytest

from attnwh.sql import warehouse
from attnwh.sql.queries import get_query, run_query

NEW_QUERIES = ("ablation_summary", "study_summary", "report_scope")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path_factory.mktemp("synthetic") / "synthetic.duckdb"
    build_synthetic_warehouse(db, examples=3, layers=3, heads=4)
    con = warehouse.connect(db, read_only=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def empty(tmp_path_factory):
    db = tmp_path_factory.mktemp("empty") / "empty.duckdb"
    warehouse.connect(db).close()  # migrated, no rows
    con = warehouse.connect(db, read_only=True)
    yield con
    con.close()


@pytest.mark.parametrize("name", NEW_QUERIES)
def test_new_queries_run_without_parameters(empty, synthetic, name):
    query = get_query(name)
    on_empty = run_query(empty, query)
    assert on_empty.num_rows == (1 if name == "report_scope" else 0)
    assert run_query(synthetic, query).num_rows > 0


def test_report_scope_counts(synthetic):
    query = get_query("report_scope")
    assert run_query(synthetic, query).to_pylist() == [{"runs": 4, "models": 2, "tasks": 2}]
    assert run_query(synthetic, query, {"task": "rte"}).to_pylist() == [{"runs": 2, "models": 2, "tasks": 1}]
    assert run_query(synthetic, query, {"model": "nope"}).to_pylist() == [{"runs": 0, "models": 0, "tasks": 0}]


def _python_ablation_summary(con, run_id: int, metric: str) -> dict:
    """What ingest.runs.ablation._summary computed in Python before the query existed."""
    scored = con.execute(
        "SELECT c.kind, c.layer, c.head, a.metric, a.baseline, a.delta, a.p_adjusted "
        "FROM ablations a JOIN ablation_configs c USING (run_id, config_id) "
        "WHERE a.run_id = ? ORDER BY c.config_id, a.metric",
        [run_id],
    ).fetchall()
    main = [r for r in scored if r[3] == metric]
    heads = [r for r in main if r[0] == "head"]
    layers = [r for r in main if r[0] == "layer"]
    best_head = max(heads, key=lambda r: r[5])
    best_layer = max(layers, key=lambda r: r[5])
    helpful = [r for r in heads if r[5] > 0]
    combo = next((r for r in main if r[0] == "helpful"), None)
    # A head or layer is named only when its disabling raised the score ("none helped" otherwise).
    head_helped, layer_helped = best_head[5] > 0, best_layer[5] > 0
    return {
        "baseline": main[0][4],
        "best_head_layer": best_head[1] if head_helped else None,
        "best_head": best_head[2] if head_helped else None,
        "best_head_delta": best_head[5],
        "best_head_p_adjusted": best_head[6] if head_helped else None,
        "best_head_name": f"{best_head[1]}-{best_head[2]}" if head_helped else "none helped",
        "best_layer": best_layer[1] if layer_helped else None,
        "best_layer_delta": best_layer[5],
        "best_layer_p_adjusted": best_layer[6] if layer_helped else None,
        "best_layer_name": str(best_layer[1]) if layer_helped else "none helped",
        "n_helpful": len(helpful),
        "n_significant": sum(1 for r in helpful if r[6] is not None and r[6] < 0.05),
        "helpful_delta": None if combo is None else combo[5],
    }


def test_ablation_summary_matches_the_python_it_replaced(synthetic):
    rows = run_query(synthetic, get_query("ablation_summary")).to_pylist()
    assert {(r["task"], r["metric"], r["mode"]) for r in rows} == {
        ("sst2", "accuracy", "uniform"),
        ("rte", "accuracy", "uniform"),
    }
    for row in rows:
        # The synthetic deltas repeat, so the best head is a tie: the first head swept wins.
        ties = synthetic.execute(
            "SELECT count(*) FROM ablation_results WHERE run_id = ? AND kind = 'head' AND delta = ?",
            [row["run_id"], row["best_head_delta"]],
        ).fetchall()[0][0]
        assert ties > 1
        expected = _python_ablation_summary(synthetic, row["run_id"], row["metric"])
        assert {k: row[k] for k in expected} == expected
        only = run_query(synthetic, get_query("ablation_summary"), {"run": row["run_id"]}).to_pylist()
        assert only == [row]


def test_study_summary_matches_the_python_it_replaced(synthetic):
    """The study's old selection: the compare run's layer with the lowest mean cosine (first
    on ties), the ablation run's head with the largest (delta, -adjusted p), if it helped."""
    query = get_query("study_summary")
    layers = run_query(synthetic, get_query("finetune_change_by_layer")).to_pylist()
    heads = run_query(synthetic, get_query("ablation_effect")).to_pylist()
    compare_runs = sorted({r["run_id"] for r in layers})
    ablation_runs = sorted({r["run_id"] for r in heads})
    assert compare_runs and ablation_runs
    for compare_run in compare_runs:
        for ablation_run in ablation_runs:
            found = run_query(
                synthetic,
                query,
                {"compare_run": compare_run, "ablation_run": ablation_run, "finetune_run": 0, "metric": "accuracy"},
            ).to_pylist()
            mine = [r for r in layers if r["run_id"] == compare_run]
            best_layer = min(mine, key=lambda r: r["mean_cosine"])
            swept = [r for r in heads if r["run_id"] == ablation_run]
            best = max(swept, key=lambda r: (r["delta"], -(r["p_adjusted"] or 1.0)))
            if mine[0]["task"] != swept[0]["task"]:  # another task: two rows, one per part
                assert len(found) == 2
                continue
            assert len(found) == 1
            row = found[0]
            assert row["score"] is None and row["finetune_run"] is None
            assert (row["changed_layer"], row["mean_cosine"]) == (best_layer["layer"], best_layer["mean_cosine"])
            assert best["delta"] > 0
            assert (row["helpful_layer"], row["helpful_head"], row["helpful_delta"], row["helpful_p_adjusted"]) == (
                best["layer"],
                best["head"],
                best["delta"],
                best["p_adjusted"],
            )
    # Run 0 selects nothing: a study part that has not run is NULL, and with none there is no row.
    none = {"finetune_run": 0, "compare_run": 0, "ablation_run": 0, "metric": "accuracy"}
    assert run_query(synthetic, query, none).num_rows == 0


def test_study_summary_keeps_a_comparison_without_scores(synthetic):
    """A metric the sweep did not score: the comparison's row, without an ablation part."""
    rows = run_query(synthetic, get_query("study_summary"), {"metric": "f1"}).to_pylist()
    assert rows and all(r["ablation_run"] is None and r["helpful_layer"] is None for r in rows)
    assert all(r["metric"] == "f1" and r["changed_layer"] is not None for r in rows)


def test_study_summary_without_a_helpful_head(tmp_path):
    """When no head's disabling raised the score, the ablation run is named but no head is."""
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path / "hurt.duckdb"
    build_synthetic_warehouse(db, examples=2, layers=2, heads=2)
    con = warehouse.connect(db)
    try:
        con.execute("UPDATE ablations SET delta = -abs(delta) - 0.01")
        rows = run_query(con, get_query("study_summary"), {"metric": "accuracy"}).to_pylist()
        summary = run_query(con, get_query("ablation_summary")).to_pylist()
    finally:
        con.close()
    assert rows and all(r["ablation_run"] is not None and r["mode"] == "uniform" for r in rows)
    assert all(
        r[k] is None for r in rows for k in ("helpful_layer", "helpful_head", "helpful_delta", "helpful_p_adjusted")
    )
    assert summary and all(
        r["n_helpful"] == 0 and r["n_significant"] == 0 and r["best_head_delta"] < 0 for r in summary
    )
