"""The readable views of migration 0008 (head_stats_named, head_means, attention_change_named,
head_patterns_named, and ablation_results with its added columns): each equals the same join
done in polars over the raw tables, pattern types come out by name, a common question is
answered from one view, a warehouse made at migration 7 gets the views when opened, and the
example queries of the docs (docs/queries.md) and of the README run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attnwh.ingest.measures import patterns
from attnwh.sql import warehouse
from attnwh.sql.queries import get_query, run_query
from helpers import run

# The five types as DESIGN.md §3 and the paper name them, by the code head_stats.pattern holds.
TYPE_NAMES = {0: "heterogeneous", 1: "vertical", 2: "diagonal", 3: "vertical+diagonal", 4: "block"}
STATISTICS = (
    "to_cls",
    "to_sep",
    "to_punct",
    "to_self",
    "to_prev",
    "to_next",
    "entropy",
    "max_weight",
    "norm_to_cls",
    "norm_to_sep",
    "norm_to_punct",
    "to_learned_sink",
)
FEATURES = ("col_cls", "col_sep", "col_punct", "col_other", "band", "block")
# ablation_results as migration 6 defined it; 0008 only appends columns.
ABLATION_RESULTS_0006 = [
    "model",
    "task",
    "split",
    "run_id",
    "config_id",
    "kind",
    "mode",
    "layer",
    "head",
    "k",
    "n_disabled",
    "disabled",
    "metric",
    "baseline",
    "value",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
    "significant",
    "test",
    "examples",
    "n_resamples",
]
VIEWS = (
    "head_stats_named",
    "head_means",
    "attention_change_named",
    "head_patterns_named",
    "ablation_results",
    "ablation_sink_scores",
)
SIZE = {"examples": 5, "layers": 3, "heads": 4}


def _build(path: Path) -> None:
    """The synthetic warehouse, plus a CNN's types on some thumbnails and a few hand labels
    (the fixture writes neither), so every pattern column of head_patterns_named is exercised."""
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    build_synthetic_warehouse(path, **SIZE)
    con = duckdb.connect(str(path))
    try:
        con.execute("UPDATE pattern_thumbnails SET cnn_pattern = (layer + head) % 5 WHERE layer < 2")
        con.execute(
            "INSERT INTO pattern_labels (run_id, example_id, layer, head, pattern, source) "
            "SELECT run_id, example_id, layer, head, (layer * 2 + head) % 5, 'labels.csv' FROM head_stats "
            "WHERE head = 1 AND example_id % 1000000000 < 3"
        )
        # A map with a hand label but no type from the rules (a row written before migration 5).
        con.execute("UPDATE head_stats SET pattern = NULL WHERE head = 1 AND layer = 2 AND example_id % 1000000000 = 0")
        if "causal" in {r[0] for r in con.execute("DESCRIBE models").fetchall()}:  # from migration 16
            _one_decoder(con)
    finally:
        con.close()


def _one_decoder(con: duckdb.DuckDBPyConnection) -> None:
    """One model a decoder, so that the first-token column shows on its rows only."""
    (first,) = con.execute("SELECT min(model_id) FROM models").fetchone()
    con.execute("UPDATE models SET causal = (model_id = ?)", [first])


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("readable") / "w.duckdb"
    _build(path)
    return path


@pytest.fixture(scope="module")
def con(db):
    con = warehouse.connect(db, read_only=True)
    yield con
    con.close()


def _table(con, sql: str) -> pl.DataFrame:
    return pl.from_arrow(con.sql(sql).to_arrow_table())


def _sorted(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    return frame.sort(list(keys)).select(sorted(frame.columns))


def _runs_named(con) -> pl.DataFrame:
    """runs with the model's name, family and whether it is a decoder, joined in polars."""
    runs = _table(con, "SELECT run_id, kind, model_id, base_model_id, dataset, task, split FROM runs")
    models = _table(con, "SELECT model_id, name AS model, family, causal FROM models")
    return runs.join(models, on="model_id", how="inner")


def _first_token(frame: pl.DataFrame) -> pl.DataFrame:
    """A decoder's to_cls again as to_first_token; null for an encoder."""
    return frame.with_columns(
        pl.when(pl.col("causal")).then(pl.col("to_cls")).otherwise(None).alias("to_first_token")
    ).drop("causal")


def test_views_exist_with_comments(con):
    views = dict(con.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall())
    assert set(VIEWS) <= set(views)
    assert all(views[v] for v in VIEWS)
    for view in VIEWS:
        comments = con.execute(
            "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = ?", [view]
        ).fetchall()
        assert comments and all(c for _, c in comments), view


def test_head_stats_named_is_every_head_stats_row_with_names(con):
    """Every row and column of head_stats with names, except the look features: inputs of the
    pattern classifier, kept in head_stats for `patterns reclassify`, not for reading."""
    view = _table(con, "SELECT * FROM head_stats_named")
    stats = _table(con, "SELECT * FROM head_stats").drop(patterns.LOOK_COLUMNS)
    types = pl.DataFrame(
        {"pattern": list(TYPE_NAMES), "pattern_name": list(TYPE_NAMES.values())},
        schema={"pattern": pl.Int16, "pattern_name": pl.String},
    )
    expected = _first_token(
        stats.join(
            _runs_named(con).select("run_id", "model", "family", "causal", "dataset", "task", "split"), on="run_id"
        )
        .join(types, on="pattern", how="left")
        .drop("pattern")
        .rename({"pattern_name": "pattern"})
    )
    assert 0 < view["to_first_token"].null_count() < view.height  # a decoder's rows and an encoder's
    assert view.height == stats.height == 2 * 2 * SIZE["examples"] * SIZE["layers"] * SIZE["heads"]
    assert view.columns[:6] == ["model", "family", "dataset", "task", "split", "run_id"]
    keys = ("run_id", "example_id", "layer", "head")
    assert_frame_equal(_sorted(view, *keys), _sorted(expected, *keys))
    assert view["pattern"].dtype == pl.String  # a name, never a code
    assert set(view["pattern"].drop_nulls()) <= set(TYPE_NAMES.values())
    assert view["pattern"].null_count() == stats["pattern"].null_count() == 4  # the label-only map of each run


def test_head_means_averages_each_run_layer_and_head(con):
    view = _table(con, "SELECT * FROM head_means")
    stats = _table(con, "SELECT * FROM head_stats")
    names = _runs_named(con).select("run_id", "model", "family", "causal", "dataset", "task", "split")
    expected = _first_token(
        stats.join(names, on="run_id")
        .group_by("model", "family", "causal", "dataset", "task", "split", "run_id", "layer", "head")
        .agg(*[pl.col(s).cast(pl.Float64).mean() for s in STATISTICS], pl.len().cast(pl.Int64).alias("examples"))
    )
    assert view.height == 2 * 2 * SIZE["layers"] * SIZE["heads"]
    assert set(view["examples"]) == {SIZE["examples"]}
    keys = ("run_id", "layer", "head")
    assert_frame_equal(_sorted(view, *keys), _sorted(expected, *keys), check_exact=False, rel_tol=1e-9)


def test_head_summary_is_head_means(con):
    """The named query reads the view: the same rows, in its order, with its filters."""
    summary = pl.from_arrow(run_query(con, get_query("head_summary")))
    means = _table(con, "SELECT * FROM head_means ORDER BY model, task, split, run_id, layer, head")
    assert_frame_equal(summary, means.select(summary.columns))
    rte = pl.from_arrow(run_query(con, get_query("head_summary"), {"task": "rte", "model": "synthetic/bert-base"}))
    assert rte.height == SIZE["layers"] * SIZE["heads"]
    assert_frame_equal(
        rte, means.filter((pl.col("task") == "rte") & (pl.col("model") == "synthetic/bert-base")).select(rte.columns)
    )


def test_attention_change_named_has_base_and_tuned_names(con):
    view = _table(con, "SELECT * FROM attention_change_named")
    change = _table(con, "SELECT * FROM attention_change")
    runs = _runs_named(con).filter(pl.col("kind") == "compare")
    models = _table(con, "SELECT model_id AS base_model_id, name AS base FROM models")
    expected = change.join(
        runs.join(models, on="base_model_id").select(
            "run_id", "base", pl.col("model").alias("tuned"), "dataset", "task", "split"
        ),
        on="run_id",
    )
    assert view.height == change.height > 0
    assert set(zip(view["base"], view["tuned"], strict=True)) == {("synthetic/bert-base", "synthetic/roberta-base")}
    keys = ("run_id", "example_id", "layer", "head")
    assert_frame_equal(_sorted(view, *keys), _sorted(expected, *keys))
    # The named query's per-layer means are the view's.
    by_layer = pl.from_arrow(run_query(con, get_query("finetune_change_by_layer")))
    mine = view.group_by("run_id", "layer").agg(pl.col("cosine").cast(pl.Float64).mean().alias("mean_cosine"))
    joined = by_layer.join(mine, on=["run_id", "layer"], suffix="_view")
    assert joined.height == by_layer.height > 0
    assert (joined["mean_cosine"] - joined["mean_cosine_view"]).abs().max() < 1e-12


def test_head_patterns_named_gives_every_type_by_name(con):
    view = _table(con, "SELECT * FROM head_patterns_named")
    keys = ["run_id", "example_id", "layer", "head"]
    stats = _table(con, f"SELECT {', '.join(keys)}, pattern, {', '.join(FEATURES)} FROM head_stats")
    cnn = _table(con, f"SELECT {', '.join(keys)}, cnn_pattern FROM pattern_thumbnails")
    hand = _table(con, f"SELECT {', '.join(keys)}, pattern AS hand_pattern FROM pattern_labels")

    def named(column: str) -> pl.Expr:
        return pl.col(column).replace_strict(TYPE_NAMES, default=None, return_dtype=pl.String)

    expected = (
        stats.join(cnn, on=keys, how="left")
        .join(hand, on=keys, how="left")
        .filter(pl.any_horizontal(pl.col("pattern", "cnn_pattern", "hand_pattern").is_not_null()))
        .with_columns(named("pattern"), named("cnn_pattern"), named("hand_pattern"))
        .join(_runs_named(con).select("run_id", "model", "family", "dataset", "task", "split"), on="run_id")
    )
    assert_frame_equal(_sorted(view, *keys), _sorted(expected, *keys))
    for column in ("pattern", "cnn_pattern", "hand_pattern"):
        assert view[column].dtype == pl.String
        assert view[column].drop_nulls().n_unique() > 1
        assert set(view[column].drop_nulls()) <= set(TYPE_NAMES.values())
    # The label-only maps (no type from the rules) are there, with their hand label.
    label_only = view.filter(pl.col("pattern").is_null())
    assert label_only.height == 4 and label_only["hand_pattern"].null_count() == 0  # one per run
    # The names are pattern_types' own.
    assert dict(con.execute("SELECT pattern, name FROM pattern_types").fetchall()) == TYPE_NAMES


def test_ablation_results_keeps_its_columns_and_adds_names_and_importance(con):
    view = _table(con, "SELECT * FROM ablation_results")
    assert view.columns == [*ABLATION_RESULTS_0006, "family", "dataset", "importance"]
    ablations = _table(con, "SELECT * FROM ablations").rename({"n_examples": "examples"})
    configs = _table(con, "SELECT * FROM ablation_configs")
    importance = _table(con, "SELECT run_id, layer, head, importance FROM head_importance")
    names = _runs_named(con).select("run_id", "model", "family", "dataset", "task", "split")
    expected = (
        ablations.join(configs, on=["run_id", "config_id"])
        .join(names, on="run_id")
        .join(importance, on=["run_id", "layer", "head"], how="left")
        .with_columns(significant=pl.col("p_adjusted") < 0.05)
    )
    keys = ("run_id", "config_id", "metric")
    assert_frame_equal(_sorted(view, *keys), _sorted(expected.select(view.columns), *keys))
    # Δ = disabled − baseline; importance only where one head was disabled.
    assert (view["delta"] - (view["value"] - view["baseline"])).abs().max() < 1e-12
    heads = pl.col("kind") == "head"
    assert view.filter(heads)["importance"].null_count() == 0
    assert view.filter(~heads)["importance"].is_null().all()


def test_a_common_question_needs_one_view(con):
    """Mean attention to [CLS] in layer 0 of one model on one task: one SELECT from one view,
    the same as the three-table join it replaces, computed here in polars."""
    question = "SELECT avg(to_cls) FROM head_stats_named WHERE model = $model AND task = $task AND layer = 0"
    params = {"model": "synthetic/roberta-base", "task": "rte"}
    (answer,) = con.execute(question, params).fetchall()[0]
    runs = _runs_named(con).filter((pl.col("model") == params["model"]) & (pl.col("task") == params["task"]))
    stats = _table(con, "SELECT run_id, layer, to_cls FROM head_stats").filter(pl.col("layer") == 0)
    expected = stats.join(runs, on="run_id")["to_cls"].cast(pl.Float64).mean()
    assert answer == pytest.approx(expected, rel=1e-9)
    # The per-head means agree with it: the layer's mean is the mean of its heads' means
    # (every head of a run has the same examples).
    (from_means,) = con.execute(
        "SELECT avg(to_cls) FROM head_means WHERE model = $model AND task = $task AND layer = 0", params
    ).fetchall()[0]
    assert from_means == pytest.approx(answer, rel=1e-9)
    # And an ablation question: the heads whose disabling hurt most, by name, no join.
    worst = con.execute(
        "SELECT layer, head, delta FROM ablation_results WHERE task = $task AND kind = 'head' "
        "AND metric = 'accuracy' ORDER BY delta, layer, head LIMIT 1",
        {"task": "rte"},
    ).fetchall()[0]
    assert worst[2] < 0


def _at_migration_7(path: Path, monkeypatch) -> Path:
    """The test warehouse as attnwh wrote it before migration 8: no readable views, and
    ablation_results as migration 6 defined it."""
    every = warehouse.migrations()
    assert [v for v, _, _ in every][7:8] == [8]
    with monkeypatch.context() as patch:
        patch.setattr(warehouse, "migrations", lambda: every[:7])
        _build(path)
    with duckdb.connect(str(path), read_only=True) as raw:
        assert warehouse.schema_version(raw) == 7
        views = {v for (v,) in raw.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert views == {"ablation_results", "head_patterns"}
        assert raw.sql("SELECT * FROM ablation_results").columns == ABLATION_RESULTS_0006
    return path


def test_a_warehouse_at_migration_7_gets_the_views_when_opened(tmp_path, monkeypatch, db):
    """The synthetic warehouse written by attnwh as of migration 7 (no readable views, the old
    ablation_results), then opened by this version: migrated to the latest, and the views read
    the rows that were there, equal to a warehouse made at the latest version."""
    every = warehouse.migrations()
    old = _at_migration_7(tmp_path / "old.duckdb", monkeypatch)
    warehouse.connect(old).close()  # a writable open applies migration 8
    with duckdb.connect(str(old)) as raw:
        _one_decoder(raw)  # as the latest warehouse's models say
    upgraded = warehouse.connect(old, read_only=True)
    latest = warehouse.connect(db, read_only=True)
    try:
        assert warehouse.schema_version(upgraded) == every[-1][0]
        for view in VIEWS:
            mine = _table(upgraded, f"SELECT * FROM {view} ORDER BY ALL")
            assert mine.height > 0, view
            assert_frame_equal(mine, _table(latest, f"SELECT * FROM {view} ORDER BY ALL"))
        comment = upgraded.execute(
            "SELECT comment FROM duckdb_columns() WHERE table_name = 'ablation_results' AND column_name = 'delta'"
        ).fetchall()[0][0]
        assert "disabled minus baseline" in comment  # the replaced view's comments were restated
    finally:
        upgraded.close()
        latest.close()


def test_head_summary_reads_a_warehouse_at_migration_7(tmp_path, monkeypatch, capsys):
    """head_summary reads the view head_means, which a file written before migration 8 lacks:
    `attnwh query` (a read-only open) must still answer, as it did before the view existed."""
    old = _at_migration_7(tmp_path / "old.duckdb", monkeypatch)
    code, out, err = run(monkeypatch, capsys, "query", "head_summary", "--db", str(old), "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)) == 2 * 2 * SIZE["layers"] * SIZE["heads"]


def _sql_examples(text: str) -> list[str]:
    return re.findall(r'^attnwh sql "(.*)"$', text, re.MULTILINE)


def test_docs_list_every_view_and_its_examples_run(monkeypatch, capsys, db):
    root = Path(__file__).parents[1]
    page = (root / "docs" / "queries.md").read_text(encoding="utf-8")
    section = page.split("\n## Ad hoc SQL", 1)[1].split("\n## ", 1)[0]
    queries = _sql_examples(section)
    for view in VIEWS:
        assert re.search(rf"^\| `{view}` \|", section, re.MULTILINE), view
        assert any(f"FROM {view} " in q for q in queries), view
    # The README's worked example too.
    readme = _sql_examples((root / "README.md").read_text(encoding="utf-8"))
    assert readme
    for sql in queries + readme:
        code, out, err = run(monkeypatch, capsys, "sql", sql, "--db", str(db), "--format", "json")
        assert code == 0, (sql, err)
    # The schema command describes each view's columns.
    code, out, err = run(monkeypatch, capsys, "schema", "head_means", "--db", str(db))
    assert code == 0 and "head_means (view)" in out and "0-based" in out
