"""`attnwh sql`, `queries` and `query` on a small warehouse built from a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from helpers import ingest_args, run, write_pairs


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("wh")
    db = tmp / "w.duckdb"
    mp = pytest.MonkeyPatch()
    try:
        from attnwh import cli

        mp.setattr(sys, "argv", ["attnwh", *ingest_args(tiny_model_dir("bert"), write_pairs(tmp / "p.tsv", 10), db)])
        cli.main()
    finally:
        mp.undo()
    return db


def test_sql_formats_round_trip(monkeypatch, capsys, warehouse, tmp_path):
    statement = "SELECT layer, head, avg(to_cls) AS to_cls FROM head_stats GROUP BY ALL ORDER BY ALL"
    code, out, err = run(monkeypatch, capsys, "sql", statement, "--db", str(warehouse), "--format", "csv")
    assert code == 0, err
    frame = pl.read_csv(out.encode())
    assert frame.columns == ["layer", "head", "to_cls"] and frame.height == 2 * 4
    code, out, _ = run(monkeypatch, capsys, "sql", statement, "--db", str(warehouse), "-f", "json")
    rows = json.loads(out)
    assert len(rows) == 8 and set(rows[0]) == {"layer", "head", "to_cls"}
    assert rows[0]["to_cls"] == pytest.approx(frame["to_cls"][0], rel=1e-6)
    target = tmp_path / "out.parquet"
    code, _, _ = run(monkeypatch, capsys, "sql", statement, "--db", str(warehouse), "-f", "parquet", "-o", str(target))
    assert code == 0 and pl.read_parquet(target).equals(frame)
    code, out, _ = run(monkeypatch, capsys, "sql", statement, "--db", str(warehouse))
    assert code == 0 and "8 rows" in out and "to_cls" in out


def test_sql_is_read_only(monkeypatch, capsys, warehouse):
    code, _, err = run(monkeypatch, capsys, "sql", "DELETE FROM head_stats", "--db", str(warehouse))
    assert code == 2 and err.startswith("attnwh: error: SQL error") and "read-only" in err
    code, out, _ = run(
        monkeypatch, capsys, "sql", "SELECT count(*) AS n FROM head_stats", "--db", str(warehouse), "-f", "csv"
    )
    assert out.splitlines()[1] == str(10 * 2 * 4)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["sql", "SELEC 1"], "syntax error"),
        (["query", "nope"], "no query named"),
        (["query", "head_summary", "-p", "colour=red"], "no parameter 'colour'"),
        (["query", "head_summary", "-p", "task"], "not key=value"),
        (["sql", "SELECT 1", "-f", "parquet"], "needs --out"),
    ],
)
def test_sql_errors_are_one_line(monkeypatch, capsys, warehouse, args, expected):
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(warehouse))
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err


def test_missing_warehouse(monkeypatch, capsys, tmp_path):
    code, _, err = run(monkeypatch, capsys, "sql", "SELECT 1", "--db", str(tmp_path / "none.duckdb"))
    assert code == 2 and "no warehouse" in err and not (tmp_path / "none.duckdb").exists()


def test_named_queries_listed_and_answer(monkeypatch, capsys, warehouse):
    code, out, _ = run(monkeypatch, capsys, "queries")
    for name in ("special_tokens_by_layer", "head_summary", "runs"):
        assert name in out
    code, out, err = run(monkeypatch, capsys, "query", "special_tokens_by_layer", "--db", str(warehouse), "-f", "csv")
    assert code == 0, err
    by_layer = pl.read_csv(out.encode())
    assert by_layer["layer"].to_list() == [0, 1] and set(by_layer["examples"]) == {10}
    code, out, _ = run(
        monkeypatch, capsys, "query", "head_summary", "--db", str(warehouse), "-f", "csv", "-p", "task=p"
    )
    heads = pl.read_csv(out.encode())
    assert heads.height == 8 and set(heads["examples"]) == {10}
    # The layer means are the means of the head means (every head has the same examples).
    mean_of_heads = heads.group_by("layer").agg(pl.col("to_sep").mean()).sort("layer")["to_sep"]
    assert by_layer["to_sep"].to_list() == pytest.approx(mean_of_heads.to_list(), rel=1e-5)
    code, out, err = run(
        monkeypatch, capsys, "query", "head_summary", "--db", str(warehouse), "-f", "csv", "-p", "task=other"
    )
    assert (code, out, err) == (2, "", "attnwh: error: no run has task 'other' (tasks: p)\n")


def test_sql_and_reports_do_not_import_torch():
    code = (
        "import sys, attnwh.cli, attnwh.cli.sql, attnwh.sql.queries, attnwh.reports; "
        "heavy = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def _in_a_terminal(args: list[str], columns: int) -> str:
    """What the command prints in a real (pseudo-)terminal `columns` wide, escapes removed."""
    import os
    import pty
    import re

    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdout
        os.environ.update(COLUMNS=str(columns), LINES="40", HF_HUB_OFFLINE="1")
        os.execv(sys.executable, [sys.executable, "-m", "attnwh", *args])
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.waitpid(pid, 0)
    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode("utf-8")).replace("\r", "")


@pytest.mark.parametrize("columns", [80, 160])
def test_a_wide_result_in_a_terminal_shows_every_value(warehouse, columns):
    """head_summary has 18 columns: squeezed into a terminal's width rich cut every cell to
    "…"; a result that does not fit is shown a record per row instead, values whole."""
    shown = _in_a_terminal(["query", "head_summary", "--db", str(warehouse)], columns)
    assert "…" not in shown
    assert all(len(line) <= columns for line in shown.splitlines())
    first = pl.read_csv(
        subprocess.run(
            [sys.executable, "-m", "attnwh", "query", "head_summary", "-f", "csv", "--db", str(warehouse)],
            capture_output=True,
            check=True,
        ).stdout
    ).row(0, named=True)
    block = shown.split("row 2 of")[0]
    for name, value in first.items():
        line = next(line for line in block.splitlines() if line.startswith(name + " "))
        expected = f"{value:.4g}" if isinstance(value, float) else str(value)
        assert line.split()[-1] == expected, (name, line)


def test_a_narrow_result_in_a_terminal_stays_a_table(warehouse):
    shown = _in_a_terminal(["sql", "SELECT run_id, kind FROM runs", "--db", str(warehouse)], 80)
    assert "┃ run_id ┃ kind" in shown and "row 1 of" not in shown


@pytest.mark.parametrize(
    "statement, hint",
    [
        ("SELECT * FROM head_meanz", 'Did you mean "head_means"?'),
        ("SELECT to_clz FROM head_stats", 'Candidate bindings: "to_cls"'),
        ("SELEC 1", "LINE 1: SELEC 1"),
    ],
)
def test_sql_errors_keep_duckdbs_hint_on_the_one_line(monkeypatch, capsys, warehouse, statement, hint):
    code, _, err = run(monkeypatch, capsys, "sql", statement, "--db", str(warehouse))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and hint in err, err
    assert "^" not in err


@pytest.mark.parametrize(
    "name, suggested",
    [
        ("head_sumary", ["head_summary"]),  # misspelt
        ("sinks", ["sink_heads"]),
        ("ablation", ["ablation_effect", "ablation_summary"]),  # a part of several names
    ],
)
def test_an_unknown_query_name_suggests_the_nearest(monkeypatch, capsys, warehouse, name, suggested):
    code, _, err = run(monkeypatch, capsys, "query", name, "--db", str(warehouse))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert all(q in err for q in suggested), err
    assert "did you mean" in err and "lists all" in err
    assert "frame_heads" not in err  # not every name on one line
