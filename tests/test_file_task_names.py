"""Two local files of the same stem (reviews.csv, reviews.tsv) in one warehouse: the task is
named after the stem, the dataset after the whole file name, so they are two datasets with
their own examples and runs, and a rerun of either file finds its own run again."""

from __future__ import annotations

import duckdb

from helpers import SENTENCES, ingest_args, run


def _write(path, delimiter: str, n: int = 6):
    plain = [s.replace(",", "") for s in SENTENCES]
    rows = [delimiter.join(("premise", "hypothesis", "label"))]
    for i in range(n):
        rows.append(delimiter.join((f"{plain[i % len(plain)]} {i}", plain[(i + 1) % len(plain)], "yes")))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_same_stem_files_are_distinct_datasets_and_resume(monkeypatch, capsys, tiny_model_dir, tmp_path):
    model = tiny_model_dir("bert")
    db = tmp_path / "w.duckdb"
    csv, tsv = _write(tmp_path / "reviews.csv", ","), _write(tmp_path / "reviews.tsv", "\t")  # the same rows
    for data in (csv, tsv):
        code, _, err = run(monkeypatch, capsys, *ingest_args(model, data, db))
        assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT dataset, task, status FROM runs ORDER BY run_id").fetchall() == [
            ("reviews.csv", "reviews", "complete"),
            ("reviews.tsv", "reviews", "complete"),
        ]
        # Each file's examples are its own, though the rows are the same.
        assert con.execute("SELECT dataset, count(*) FROM examples GROUP BY ALL ORDER BY ALL").fetchall() == [
            ("reviews.csv", 6),
            ("reviews.tsv", 6),
        ]
    for data in (csv, tsv):
        code, out, err = run(monkeypatch, capsys, *ingest_args(model, data, db))
        assert code == 0 and "already complete" in out, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(2,)]
