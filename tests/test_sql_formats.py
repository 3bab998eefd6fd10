"""`attnwh query` and `attnwh sql` in every output format on the synthetic warehouse: nested
values (a thumbnail) in CSV, one statement at a time, and a parameter value that matches
nothing refused with a hint."""

from __future__ import annotations

import json

import polars as pl
import pytest

from attnwh.sql.queries import named_queries
from helpers import run

FORMATS = ("table", "csv", "json", "parquet")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path_factory.mktemp("synthetic") / "synthetic.duckdb"
    build_synthetic_warehouse(db, examples=3, layers=3, heads=4)
    return db


def _format_args(format: str, tmp_path) -> list[str]:
    return ["--format", format] + (["--out", str(tmp_path / "out.parquet")] if format == "parquet" else [])


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("name", sorted(named_queries()))
def test_every_named_query_in_every_format(monkeypatch, capsys, synthetic, tmp_path, name, format):
    code, out, err = run(monkeypatch, capsys, "query", name, "--db", str(synthetic), *_format_args(format, tmp_path))
    assert code == 0, err
    assert "Traceback" not in err
    if format == "csv":
        pl.read_csv(out.encode())
    elif format == "json":
        json.loads(out)
    elif format == "parquet":
        pl.read_parquet(tmp_path / "out.parquet")


def test_a_thumbnail_in_csv_is_json_text(monkeypatch, capsys, synthetic, tmp_path):
    statement = "SELECT run_id, thumbnail, {'n': n_tokens, 'ids': [layer, head]} AS s FROM pattern_thumbnails LIMIT 2"
    code, out, err = run(monkeypatch, capsys, "sql", statement, "--db", str(synthetic), "--format", "csv")
    assert code == 0, err
    frame = pl.read_csv(out.encode())
    thumbnail = json.loads(frame["thumbnail"][0])
    assert len(thumbnail) == 1024 and all(isinstance(v, float) for v in thumbnail)
    assert set(json.loads(frame["s"][0])) == {"n", "ids"}
    for format in FORMATS:
        code, _, err = run(
            monkeypatch, capsys, "sql", statement, "--db", str(synthetic), *_format_args(format, tmp_path)
        )
        assert code == 0, (format, err)
    code, out, err = run(monkeypatch, capsys, "sql", statement, "--db", str(synthetic), "--format", "json")
    assert len(json.loads(out)[0]["thumbnail"]) == 1024  # nested stays nested in JSON


def test_blobs_and_odd_types_in_every_format(monkeypatch, capsys, synthetic, tmp_path):
    statement = (
        "SELECT '\\x00\\x01'::BLOB AS b, INTERVAL 3 DAY AS i, map([1], ['a']) AS m, {'b': '\\x02'::BLOB} AS sb, "
        "union_value(k := 1) AS u"
    )
    for format in FORMATS:
        code, out, err = run(
            monkeypatch, capsys, "sql", statement, "--db", str(synthetic), *_format_args(format, tmp_path)
        )
        assert code == 0, (format, err)
    code, out, _ = run(monkeypatch, capsys, "sql", statement, "--db", str(synthetic), "--format", "csv")
    assert pl.read_csv(out.encode(), infer_schema=False)["b"].to_list() == ["0001"]  # hex


def test_more_than_one_statement_is_refused(monkeypatch, capsys, synthetic):
    code, out, err = run(monkeypatch, capsys, "sql", "SELECT 1; SELECT 2", "--db", str(synthetic))
    assert code == 2 and out == ""
    assert err.startswith("attnwh: error:") and "one SQL statement" in err and len(err.splitlines()) == 1
    code, out, err = run(monkeypatch, capsys, "sql", "SELECT 1 AS x;", "--db", str(synthetic), "-f", "csv")
    assert code == 0 and out.splitlines() == ["x", "1"], err


def test_an_unknown_parameter_value_is_refused_with_a_hint(monkeypatch, capsys, synthetic):
    code, out, err = run(
        monkeypatch, capsys, "query", "runs", "-p", "task=nosuchtask", "--db", str(synthetic), "-f", "csv"
    )
    assert (code, out) == (2, "")
    assert err == "attnwh: error: no run has task 'nosuchtask' (tasks: dependencies, frames, rte, sst2)\n"
    code, _, err = run(monkeypatch, capsys, "query", "head_summary", "-p", "model=nope", "--db", str(synthetic))
    assert code == 2 and "no model is named 'nope' (models: synthetic/bert-base, synthetic/roberta-base)" in err
    code, _, err = run(
        monkeypatch, capsys, "query", "ablation_effect", "-p", "mode=zeroo", "-p", "metric=acc", "--db", str(synthetic)
    )
    assert code == 2 and len(err.splitlines()) == 1  # both values named on the one line
    assert "mode 'zeroo'" in err and "metric 'acc'" in err and "accuracy" in err
    # A known value that selects nothing says nothing.
    code, out, err = run(monkeypatch, capsys, "query", "runs", "-p", "task=rte", "--db", str(synthetic))
    assert code == 0 and err == ""
