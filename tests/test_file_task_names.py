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


def test_a_file_named_for_its_split_names_its_task_after_the_dataset(tmp_path):
    """train.csv is a split, not a dataset: the task takes the folder's name (as the bundled
    sample's sentiment/train.tsv holds `sentiment`); a split at the end of a name is dropped."""
    from attnwh.ingest.sources.files import file_task_name

    imdb = tmp_path / "imdb"
    cases = {
        imdb / "train.csv": "imdb",
        imdb / "dev.tsv": "imdb",
        imdb / "Validation.jsonl": "imdb",
        imdb / "train" / "train.csv": "imdb",  # a split folder too: the dataset's folder above it
        tmp_path / "imdb_train.csv": "imdb",
        tmp_path / "imdb-dev.tsv": "imdb",
        tmp_path / "sst2_train_dev.csv": "sst2",
        tmp_path / "reviews.csv": "reviews",
        tmp_path / "test_results.csv": "test_results",  # a split word that only starts the name stays
        tmp_path / "attest.csv": "attest",
    }
    assert {str(path.relative_to(tmp_path)): file_task_name(path) for path in cases} == {
        str(path.relative_to(tmp_path)): name for path, name in cases.items()
    }


def test_ingest_and_study_name_a_train_and_dev_pair_after_their_folder(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from attnwh.study import StudyOptions, check_study

    folder = tmp_path / "reviews"
    folder.mkdir()
    train, dev = _write(folder / "train.tsv", "\t", 8), _write(folder / "dev.tsv", "\t", 6)
    columns = {"text_column": "premise", "pair_column": "hypothesis", "label_column": "label"}
    common = {"db": tmp_path / "w.duckdb", "out_dir": tmp_path / "models", **columns}
    # The study's tasks, read and checked (what its every stage names the task).
    tasks = check_study(StudyOptions(model=str(tiny_model_dir("bert")), data=train, eval_data=dev, **common))
    assert [(t.name, t.train.task, t.eval.task) for t in tasks] == [("reviews", "reviews", "reviews")]
    # A single --tasks names it instead.
    named = StudyOptions(model=str(tiny_model_dir("bert")), data=train, eval_data=dev, tasks=("mine",), **common)
    assert [t.name for t in check_study(named)] == ["mine"]
    # `attnwh ingest` of the dev file alone names the same task, so its runs line up with the study's.
    code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), dev, tmp_path / "w.duckdb"))
    assert code == 0, err
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT dataset, task FROM runs").fetchall() == [("dev.tsv", "reviews")]
