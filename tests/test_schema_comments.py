"""A self-describing warehouse: every table, view and column carries a comment (migration
0007), and `attnwh schema` prints them. DuckDB keeps comments on views and on view columns
too (COMMENT ON COLUMN view.column), so the views are held to the same rule."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from attnwh.sql import warehouse
from helpers import run


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "w.duckdb"
    warehouse.connect(path).close()  # every migration, no rows
    return path


def test_every_table_view_and_column_has_a_comment(db):
    con = warehouse.connect(db, read_only=True)  # reopened: the comments are stored in the file
    try:
        objects = con.execute(
            "SELECT table_name, comment FROM duckdb_tables() WHERE NOT internal "
            "UNION ALL SELECT view_name, comment FROM duckdb_views() WHERE NOT internal"
        ).fetchall()
        columns = con.execute(
            "SELECT table_name || '.' || column_name, comment FROM duckdb_columns() WHERE NOT internal"
        ).fetchall()
        views = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        con.close()
    assert {"head_stats", "runs", "schema_migrations", "ablation_results", "head_patterns"} <= {o for o, _ in objects}
    assert views == {
        "ablation_results",
        "head_patterns",
        "head_stats_named",
        "head_means",
        "attention_change_named",
        "head_patterns_named",
        "ablation_sink_scores",
        "head_groups",
        "head_role_means",
    }
    assert any(c.startswith("ablation_results.") for c, _ in columns)  # view columns are listed and checked
    assert [o for o, comment in objects if not (comment or "").strip()] == []
    assert [c for c, comment in columns if not (comment or "").strip()] == []


def test_comments_state_the_conventions(db):
    con = warehouse.connect(db, read_only=True)
    try:
        comment = dict(
            con.execute(
                "SELECT table_name || '.' || column_name, comment FROM duckdb_columns() WHERE NOT internal"
            ).fetchall()
        )
    finally:
        con.close()
    for name in ("ablations.delta", "ablation_results.delta"):
        assert "disabled minus baseline" in comment[name] and "> 0 means disabling helped" in comment[name]
    assert "0-based" in comment["head_stats.layer"] and "0-based" in comment["head_stats.head"]
    assert "nats" in comment["head_stats.entropy"]


def test_schema_command_prints_tables_views_and_columns(monkeypatch, capsys, db):
    code, out, err = run(monkeypatch, capsys, "schema", "--db", str(db))
    assert code == 0, err
    assert "head_stats (table)" in out and "ablation_results (view)" in out
    assert "> 0 means disabling helped" in out and "nats" in out
    code, out, err = run(monkeypatch, capsys, "schema", "head_stats", "--db", str(db))
    assert code == 0 and "to_cls" in out and "FLOAT" in out and "runs (table)" not in out
    code, out, err = run(monkeypatch, capsys, "schema", "--db", str(db), "--format", "json")
    rows = json.loads(out)
    assert set(rows[0]) == {"table", "kind", "table_comment", "column", "type", "comment"}
    assert all(r["comment"] for r in rows)


def test_schema_command_refuses_an_unknown_table(monkeypatch, capsys, db):
    code, out, err = run(monkeypatch, capsys, "schema", "nope", "--db", str(db))
    assert code == 2 and out == "" and err.startswith("attnwh: error: no table or view named 'nope'")
    assert len(err.splitlines()) == 1


def test_the_api_describes_the_schema_without_the_command_line(monkeypatch, capsys, db):
    """The schema's description lives in the sql layer (attnwh.sql.catalog), which imports no
    command module; the library reads it without loading `attnwh schema`'s module, and gives
    the rows `attnwh schema --format json` prints."""
    probe = (
        "import json, sys; from attnwh.api import Warehouse; "
        f"rows = Warehouse({str(db)!r}).schema().to_dicts(); "
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.startswith('attnwh')), 'rows': rows}))"
    )
    found = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
    assert "attnwh.sql.catalog" in found["modules"] and "attnwh.cli.schema" not in found["modules"]
    alone = "import sys, attnwh.sql.catalog; print(sorted(m for m in sys.modules if m.startswith('attnwh.cli')))"
    assert subprocess.run([sys.executable, "-c", alone], capture_output=True, text=True, check=True).stdout == "[]\n"
    code, out, err = run(monkeypatch, capsys, "schema", "--db", str(db), "--format", "json")
    assert code == 0, err
    assert found["rows"] == json.loads(out)
