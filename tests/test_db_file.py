"""`--db` naming an existing file that is not a DuckDB database is refused before any work,
by every command that takes it: DuckDB would otherwise open a CSV or Parquet file as an empty
in-memory database, and a run "written" there would be lost without a word."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import pytest
import typer

from attnwh.cli import app
from attnwh.errors import UsageError
from attnwh.sql import warehouse
from helpers import digest, run


def commands_with_db() -> list[list[str]]:
    """The path of every command (and subcommand) of the CLI that has a --db option."""
    found = []

    def walk(command: Any, path: list[str]) -> None:
        # Typer's commands are click-like but need not be click's own classes.
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        if any("--db" in getattr(p, "opts", ()) for p in command.params):
            found.append(path)

    walk(typer.main.get_command(app), [])
    return found


def not_duckdb_files(folder: Path) -> dict[str, Path]:
    csv = folder / "ok.csv"
    csv.write_text("a,b\n1,2\n", encoding="utf-8")
    empty = folder / "empty.duckdb"
    empty.touch()
    parquet = folder / "table.parquet"
    duckdb.sql("COPY (SELECT 1 AS x) TO '" + str(parquet) + "' (FORMAT parquet)")
    lite = folder / "other.sqlite"
    with sqlite3.connect(lite) as con:
        con.execute("CREATE TABLE t (x)")
    return {"text": csv, "empty": empty, "Parquet": parquet, "SQLite": lite, "folder": folder / "sub"}


def test_every_db_command_is_found():
    paths = {" ".join(p) for p in commands_with_db()}
    # Reading, writing and merging commands all take --db; the walk must see each kind.
    assert {"ingest", "ingest ablation", "sql", "query", "report", "finetune", "study", "merge"} <= paths


@pytest.mark.parametrize("command", commands_with_db(), ids=" ".join)
def test_a_file_that_is_not_duckdb_is_refused(monkeypatch, capsys, tmp_path, command):
    csv = not_duckdb_files(tmp_path)["text"]
    before = digest(csv)
    # --db comes first: it is checked as it is parsed, before the command's other arguments.
    code, out, err = run(monkeypatch, capsys, *command, "--db", str(csv))
    assert code == 2, (out, err)
    assert err.strip().splitlines() == [
        f"attnwh: error: --db {csv} exists and is not a DuckDB database file (it holds text); "
        "give an existing warehouse or a new file name"
    ]
    assert digest(csv) == before


def test_ingest_into_a_csv_writes_nothing(monkeypatch, capsys, tmp_path):
    # The reported case: a run "complete" with 216 rows "written → ok.csv", and nothing stored.
    csv = not_duckdb_files(tmp_path)["text"]
    code, out, err = run(monkeypatch, capsys, "ingest", "--task", "sentiment", "--limit", "3", "--db", str(csv))
    assert code == 2
    assert "complete" not in out
    assert csv.read_text(encoding="utf-8") == "a,b\n1,2\n"


def test_what_the_file_looks_like_is_said(tmp_path):
    files = not_duckdb_files(tmp_path)
    (tmp_path / "sub").mkdir()
    for kind, path in files.items():
        with pytest.raises(UsageError, match=kind if kind != "text" else "holds text"):
            warehouse.connect(path)
        with pytest.raises(UsageError):
            warehouse.connect(path, read_only=True)


def test_new_and_existing_warehouses_still_open(tmp_path):
    path = tmp_path / "new.csv"  # a new file: DuckDB creates a real database under any name
    warehouse.connect(path).close()
    assert path.read_bytes()[8:12] == b"DUCK"
    warehouse.connect(path, read_only=True).close()
