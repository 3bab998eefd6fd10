"""A parameter value that can match nothing is refused, naming the values there are, in the
API and on the command line alike; a valid value that selects no rows is an empty answer.

The values a message must name are read here with plain SQL from the warehouse itself, and
each refused case is shown to be one the query itself answers with an empty table."""

from __future__ import annotations

import shutil

import duckdb
import polars as pl
import pytest

from attnwh import api
from attnwh.errors import UsageError
from attnwh.sql import queries as named
from helpers import run

LAYERS, HEADS = 3, 4


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path_factory.mktemp("unmatched") / "synthetic.duckdb"
    build_synthetic_warehouse(db, examples=3, layers=LAYERS, heads=HEADS)
    return db


def _values(db, sql: str) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [str(row[0]) for row in con.execute(sql).fetchall()]


def _statistics(db) -> list[str]:
    columns = _values(
        db,
        "SELECT column_name FROM information_schema.columns WHERE table_name IN ('head_stats', 'head_mixing')",
    )
    return sorted(set(columns) - {"run_id", "example_id", "layer", "head", "pattern"} | {"cosine"})


# (query, its parameters, the last one refused; SQL listing the values the message must
# name, a function reading them, or a fixed list)
CASES = {
    "unknown statistic": (
        "head_examples",
        {"run": 1, "layer": 0, "head": 0, "statistic": "to_spe"},
        _statistics,
    ),
    "unknown task": ("runs", {"task": "sts2"}, "SELECT DISTINCT task FROM runs"),
    "unknown model": ("head_summary", {"model": "bert-base"}, "SELECT name FROM models"),
    "layer out of range": ("head_profile", {"layer": LAYERS}, [f"layers 0 to {LAYERS - 1}"]),
    "head out of range": ("head_thumbnails", {"head": HEADS}, [f"heads 0 to {HEADS - 1}"]),
    "negative layer": ("pattern_examples", {"run": 1, "head": 0, "layer": -1}, [f"layers 0 to {LAYERS - 1}"]),
    "unknown run": ("sink_heads_of_run", {"run": 99}, "SELECT run_id FROM runs"),
    "unknown pattern type": ("label_maps", {"pattern": "diag"}, "SELECT name FROM pattern_types"),
    "unknown classifier": ("pattern_by_layer", {"classifier": "cn"}, ["stored", "cnn"]),
    "unknown order": ("head_examples", {"run": 1, "layer": 0, "head": 0, "order": "up"}, ["asc", "desc"]),
    "unknown metric": ("ablation_effect", {"metric": "acc"}, "SELECT DISTINCT metric FROM ablations"),
    "unknown mode": ("layer_ablation", {"mode": "zeroo"}, "SELECT DISTINCT mode FROM ablation_configs"),
    "unknown kind": (
        "ablation_flips",
        {"run": 9, "kind": "hed"},
        "SELECT kind FROM ablation_configs WHERE config_id > 0",
    ),
    "unknown relation": ("dependency_heads", {"relation": "nsub"}, "SELECT relation FROM dependency_heads"),
    "unknown feature": ("feature_attention", {"feature": "negated"}, "SELECT feature FROM feature_attention"),
}


def _expected(db, listing) -> set[str]:
    if callable(listing):
        return set(listing(db))
    return set(listing) if isinstance(listing, list) else set(_values(db, listing))


@pytest.mark.parametrize("case", CASES)
def test_a_value_that_cannot_match_is_refused_with_the_values_there_are(synthetic, case):
    name, params, listing = CASES[case]
    expected = _expected(synthetic, listing)
    assert expected  # the warehouse holds values to name
    # Unchecked, the query answers such a value with a silent empty table (an unknown order: as
    # if none were given, largest first).
    with duckdb.connect(str(synthetic), read_only=True) as con:
        unchecked = named.run_query(con, named.get_query(name), params)
        if case == "unknown order":
            assert unchecked == named.run_query(con, named.get_query(name), {**params, "order": None})
        else:
            assert unchecked.num_rows == 0
    with pytest.raises(UsageError) as refused:
        api.Warehouse(synthetic).query(name, **params)
    message = str(refused.value)
    assert "\n" not in message
    refused_value = str(list(params.values())[-1])  # each case's last parameter is the one refused
    assert f"'{refused_value}'" in message or f" {refused_value} (" in message
    for value in expected:
        assert value in message, value
    assert api.Warehouse(synthetic).unmatched(**params) == [message]


@pytest.mark.parametrize(
    "case", ["unknown statistic", "unknown task", "unknown model", "layer out of range", "head out of range"]
)
def test_the_command_line_refuses_it_the_same(monkeypatch, capsys, synthetic, case):
    name, params, _ = CASES[case]
    with pytest.raises(UsageError) as refused:
        api.Warehouse(synthetic).query(name, **params)
    args = [a for k, v in params.items() for a in ("-p", f"{k}={v}")]
    code, out, err = run(monkeypatch, capsys, "query", name, *args, "--db", str(synthetic), "-f", "csv")
    assert (code, out) == (2, "")
    assert err == f"attnwh: error: {refused.value}\n"


def test_a_misspelling_is_named_first_and_ids_in_numeric_order(synthetic):
    wh = api.Warehouse(synthetic)
    (line,) = wh.unmatched(statistic="to_spe")
    assert line.startswith("no head has statistic 'to_spe' (did you mean to_sep, ")
    (line,) = wh.unmatched(run=99)
    ids = _values(synthetic, "SELECT run_id FROM runs ORDER BY run_id")
    assert len(ids) >= 10 and line == f"no run has id '99' (ids: {', '.join(ids)})"
    assert wh.unmatched(run="01", order="ASC") == []  # the query reads both as run 1, ascending


def test_layers_and_heads_are_checked_against_the_model_asked_for(synthetic, tmp_path):
    db = tmp_path / "deeper.duckdb"
    shutil.copy(synthetic, db)
    with duckdb.connect(str(db)) as con:  # the second model deeper than the first
        con.execute("UPDATE models SET num_layers = 5 WHERE name = 'synthetic/roberta-base'")
        (bert_run,) = con.execute(
            "SELECT min(run_id) FROM runs JOIN models USING (model_id) WHERE name = 'synthetic/bert-base'"
        ).fetchone()
    wh = api.Warehouse(db)
    assert wh.unmatched(layer=4) == []  # some model has a layer 4
    assert wh.unmatched(layer=5) == ["no stored model has layer 5 (layers 0 to 4)"]
    assert wh.unmatched(run=bert_run, layer=4) == [f"run {bert_run}'s model has no layer 4 (layers 0 to 2)"]
    assert wh.unmatched(model="synthetic/bert-base", layer=4, head=4) == [
        "model 'synthetic/bert-base' has no layer 4 (layers 0 to 2)",
        "model 'synthetic/bert-base' has no head 4 (heads 0 to 3)",
    ]
    # A layer the model has but the run stored no rows for is an empty answer.
    assert wh.query("head_profile", model="synthetic/roberta-base", layer=4).height == 0


def test_a_value_that_matches_but_selects_nothing_is_an_empty_answer(monkeypatch, capsys, synthetic):
    wh = api.Warehouse(synthetic)
    # Both values exist, but no run of that model has that task.
    empty = wh.runs(model="synthetic/roberta-base", task="dependencies")
    assert isinstance(empty, pl.DataFrame) and empty.height == 0 and "run_id" in empty.columns
    assert wh.runs(model="synthetic/bert-base", task="dependencies").height == 1
    code, out, err = run(
        monkeypatch,
        capsys,
        "query",
        "runs",
        "-p",
        "model=synthetic/roberta-base",
        "-p",
        "task=dependencies",
        "--db",
        str(synthetic),
        "-f",
        "csv",
    )
    assert (code, err) == (0, "") and out.splitlines()[0].startswith("run_id,") and len(out.splitlines()) == 1


def test_no_flips_is_an_empty_answer(monkeypatch, capsys, synthetic, tmp_path):
    db = tmp_path / "flips.duckdb"
    shutil.copy(synthetic, db)
    with duckdb.connect(str(db)) as con:
        (ablation,) = con.execute("SELECT min(run_id) FROM runs WHERE kind = 'ablation'").fetchone()
        # Every configuration predicts as the baseline does, but head (2, 3), which flips one example.
        con.execute(
            "INSERT INTO ablation_predictions SELECT c.run_id, c.config_id, x.example_id,"
            " CASE WHEN c.layer = 2 AND c.head = 3 AND x.example_id = (SELECT min(example_id) FROM run_examples"
            " WHERE run_id = $run) THEN 1 ELSE 0 END, c.layer IS DISTINCT FROM 2 OR c.head IS DISTINCT FROM 3"
            " FROM ablation_configs AS c JOIN run_examples AS x USING (run_id) WHERE c.run_id = $run",
            {"run": ablation},
        )
    wh = api.Warehouse(db)
    flipped = wh.query("ablation_flips", run=ablation, layer=2, head=3)
    assert flipped.height == 1 and flipped["flip"].to_list() == ["broken"]
    none = wh.query("ablation_flips", run=ablation, layer=0, head=1)
    assert none.height == 0 and none.columns == flipped.columns
    code, out, err = run(
        monkeypatch, capsys, "query", "ablation_flips", "-p", f"run={ablation}", "-p", "layer=0", "-p", "head=1",
        "--db", str(db), "-f", "json",
    )  # fmt: skip
    assert (code, err, out.strip()) == (0, "", "[]")


def test_runs_and_report_filters_are_refused_alike(monkeypatch, capsys, synthetic, tmp_path):
    tasks = ", ".join(sorted(_values(synthetic, "SELECT DISTINCT task FROM runs")))
    models = ", ".join(sorted(_values(synthetic, "SELECT name FROM models")))
    wh = api.Warehouse(synthetic)
    with pytest.raises(UsageError, match=f"no run has task 'nope' \\(tasks: {tasks}\\)"):
        wh.runs(task="nope")
    with pytest.raises(UsageError, match=f"no model is named 'bert' \\(models: {models}\\)"):
        wh.build_report(model="bert")
    with pytest.raises(UsageError, match="no run has task 'nope'"):
        api.report(db=str(synthetic), task="nope", out=str(tmp_path / "r.html"))
    code, out, err = run(
        monkeypatch, capsys, "report", "--db", str(synthetic), "--model", "bert", "-o", str(tmp_path / "r.html")
    )
    assert (code, out) == (2, "") and err == f"attnwh: error: no model is named 'bert' (models: {models})\n"
    assert not (tmp_path / "r.html").exists()


def test_a_layer_that_is_not_a_number_is_one_line(monkeypatch, capsys, synthetic):
    code, out, err = run(monkeypatch, capsys, "query", "head_profile", "-p", "layer=two", "--db", str(synthetic))
    assert code == 2 and out == "" and err.startswith("attnwh: error: SQL error:") and len(err.splitlines()) == 1
