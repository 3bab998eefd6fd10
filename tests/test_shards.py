"""Static shards (`--shard I/N --shard-dir DIR`) and `attnwh merge`: the merged warehouse
holds the same rows as a single-process run (statistics, compare, ablation), merging twice
adds nothing, a rerun shard resumes, and a partial or foreign file is refused with one line
while nothing is written."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from helpers import pair_args, run, write_pairs

N = 23  # examples: with batch size 4, six batches of uneven lengths (one short)


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def fetch(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def keyed(db: Path, table: str, key: str, values: str) -> dict[tuple, tuple]:
    """Rows of `table` by run key and `key` columns: comparable across warehouses, whose
    run ids may differ."""
    rows = fetch(db, f"SELECT r.run_key, {key}, {values} FROM {table} JOIN runs AS r USING (run_id)")
    width = len(key.split(","))
    return {tuple(r[: 1 + width]): tuple(r[1 + width :]) for r in rows}


def assert_same_rows(a_db: Path, b_db: Path, table: str, values: str, n_rows: int) -> None:
    """`table` holds the same per (example, layer, head) rows in both warehouses, within
    1e-6, `n_rows` of them and no duplicates."""
    a = keyed(a_db, table, "example_id, layer, head", values)
    b = keyed(b_db, table, "example_id, layer, head", values)
    assert len(a) == n_rows and a.keys() == b.keys()
    np.testing.assert_allclose(np.array([b[k] for k in a]), np.array(list(a.values())), atol=1e-6, rtol=0)
    assert fetch(b_db, f"SELECT count(*) FROM {table}") == [(n_rows,)]


def single_and_sharded(monkeypatch, capsys, args: list[str], tmp_path: Path, n: int) -> tuple[Path, Path]:
    """Warehouses written by `args` in one process and by n static shards merged."""
    single, merged, shard_dir = tmp_path / "single.duckdb", tmp_path / "merged.duckdb", tmp_path / "shards"
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(single))
    assert code == 0, err
    sharded(monkeypatch, capsys, args, shard_dir, n)
    assert not merged.exists()  # shards touch no warehouse
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    return single, merged


def sharded(monkeypatch, capsys, args: list[str], shard_dir: Path, n: int) -> None:
    for i in range(1, n + 1):
        code, out, err = run(monkeypatch, capsys, *args, "--shard", f"{i}/{n}", "--shard-dir", str(shard_dir))
        assert code == 0, err
        assert "attnwh merge" in out


def merge(monkeypatch, capsys, shard_dir: Path, db: Path) -> tuple[int, str, str]:
    return run(monkeypatch, capsys, "merge", str(shard_dir), "--db", str(db))


STATS = (
    "to_cls, to_sep, to_punct, to_self, to_prev, to_next, entropy, max_weight, norm_to_cls, norm_to_sep, norm_to_punct"
)


def test_sharded_statistics_merge_to_the_single_process_rows(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, tmp_path / "x", 4), "--thumbnails", "5"]
    single, merged = single_and_sharded(monkeypatch, capsys, args, tmp_path, 3)
    assert_same_rows(single, merged, "head_stats", STATS, N * 2 * 4)
    assert_same_rows(single, merged, "pattern_thumbnails", "thumbnail", 5 * 2 * 4)
    columns = "dataset, task, split, n_examples, n_truncated, max_length, status, batch_size"
    assert fetch(single, f"SELECT run_key, {columns} FROM runs") == fetch(
        merged, f"SELECT run_key, {columns} FROM runs"
    )
    assert fetch(single, "SELECT * FROM examples ORDER BY example_id") == fetch(
        merged, "SELECT * FROM examples ORDER BY example_id"
    )
    assert fetch(merged, "SELECT count(*), count(DISTINCT example_id) FROM run_examples") == [(N, N)]

    # Merging again (all of it, or one shard twice) adds nothing.
    before = fetch(merged, "SELECT count(*) FROM head_stats")
    code, _, err = merge(monkeypatch, capsys, tmp_path / "shards", merged)
    assert code == 0, err
    assert fetch(merged, "SELECT count(*) FROM head_stats") == before == [(N * 2 * 4,)]


DECODER_STATS = "to_cls, to_punct, to_self, to_prev, entropy, max_weight, norm_to_cls, norm_to_punct"


def test_sharded_statistics_of_a_decoder_merge_to_the_single_process_rows(monkeypatch, capsys, tiny_gemma2, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "--model", str(tiny_gemma2), *pair_args(data, tmp_path / "x", 4)]
    single, merged = single_and_sharded(monkeypatch, capsys, args, tmp_path, 2)
    assert_same_rows(single, merged, "head_stats", DECODER_STATS, N * 2 * 4)
    # No [SEP] and no attendable next token on a causal map: NULL in every row of both.
    assert fetch(merged, "SELECT count(*) FROM head_stats WHERE to_sep IS NOT NULL OR to_next IS NOT NULL") == [(0,)]
    columns = "causal, num_key_value_heads, sliding_window, sliding_layers"
    assert fetch(merged, f"SELECT {columns} FROM models") == fetch(single, f"SELECT {columns} FROM models")
    assert fetch(merged, "SELECT causal, num_key_value_heads FROM models") == [(True, 2)]


def test_a_partial_merge_is_partial_until_the_other_shards_come(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, tmp_path / "x.duckdb", batch_size=4)]
    first, second, db = tmp_path / "one", tmp_path / "two", tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, *args, "--shard", "1/2", "--shard-dir", str(first))
    assert code == 0, err
    code, out, err = merge(monkeypatch, capsys, first, db)
    assert code == 0, err
    assert "partial" in out and "still missing" in out
    ((status, done),) = fetch(db, "SELECT status, (SELECT count(*) FROM run_examples) FROM runs")
    assert status == "partial" and 0 < done < N
    code, _, err = run(monkeypatch, capsys, *args, "--shard", "2/2", "--shard-dir", str(second))
    assert code == 0, err
    code, out, err = merge(monkeypatch, capsys, second, db)
    assert code == 0, err
    assert fetch(db, "SELECT status FROM runs") == [("complete",)]
    assert fetch(db, "SELECT count(*) FROM head_stats") == [(N * 2 * 4,)]


def test_a_rerun_shard_resumes_and_cleans_what_it_left_half_written(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", N)
    shard_dir = tmp_path / "shards"
    args = [
        "ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, tmp_path / "x.duckdb", batch_size=4),
        "--shard", "1/2", "--shard-dir", str(shard_dir),
    ]  # fmt: skip
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    (run_dir,) = shard_dir.iterdir()
    parts = sorted(p.name for p in run_dir.glob("part-*"))
    assert parts == ["part-000000", "part-000002", "part-000004"]  # every second batch
    # A worker killed while writing part 2 leaves a temporary folder; a merge refuses it ...
    shutil.copytree(run_dir / "part-000002", run_dir / ".part-000002.tmp-123-abcd")
    shutil.rmtree(run_dir / "part-000002")
    code, _, err = merge(monkeypatch, capsys, shard_dir, tmp_path / "w.duckdb")
    assert code == 2 and "partial part" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.duckdb").exists()
    # ... and rerunning the shard computes only that part and removes the leftover.
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert sorted(p.name for p in run_dir.iterdir()) == [*parts, "run.json"]
    assert " 3 " in out and " 1 " in out  # 3 units of this shard, 1 written now


def _damage(shard_dir: Path, how: str) -> str:
    """Spoil a copy of a good shard folder the way `how` says; returns what the error names."""
    run_dir = next(shard_dir.iterdir())
    part = sorted(run_dir.glob("part-*"))[0]
    if how == "foreign file":
        (shard_dir / "notes.txt").write_text("hello")
        return "not an attnwh shard"
    if how == "truncated parquet":
        path = part / "head_stats.parquet"
        path.write_bytes(path.read_bytes()[:100])
        return "differ from its manifest"
    if how == "extra file in a part":
        (part / "other.parquet").write_bytes(b"PAR1")
        return "not listed in its manifest"
    if how == "no manifest":
        (part / "manifest.json").unlink()
        return "no manifest"
    if how == "run of another key":
        info = json.loads((run_dir / "run.json").read_text())
        info["identity"]["seed"] = 7
        (run_dir / "run.json").write_text(json.dumps(info))
        return "not the one its folder is named for"
    if how == "part of another run":
        other = shard_dir / ("run_key=" + "0" * 32)
        shutil.copytree(run_dir, other)
        info = json.loads((other / "run.json").read_text())
        (other / "run.json").write_text(json.dumps({**info, "run_key": "0" * 32}))
        return "not the one its folder is named for"
    raise ValueError(how)


@pytest.mark.parametrize(
    "how",
    [
        "foreign file",
        "truncated parquet",
        "extra file in a part",
        "no manifest",
        "run of another key",
        "part of another run",
    ],
)
def test_merge_refuses_a_partial_or_foreign_folder_and_changes_nothing(
    monkeypatch, capsys, tiny_model_dir, tmp_path, how
):
    data = write_pairs(tmp_path / "pairs.tsv", 9)
    shard_dir, db = tmp_path / "shards", tmp_path / "w.duckdb"
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, db, batch_size=4)]
    code, _, err = run(monkeypatch, capsys, *args)  # a warehouse with a run already in it
    assert code == 0, err
    before = {t: fetch(db, f"SELECT count(*) FROM {t}") for t in ("runs", "head_stats", "run_examples", "examples")}
    data2 = write_pairs(tmp_path / "pairs2.tsv", 11)
    code, _, err = run(
        monkeypatch, capsys, *args[:-2], "--data", str(data2), "--shard", "1/1", "--shard-dir", str(shard_dir)
    )
    assert code == 0, err
    expected = _damage(shard_dir, how)
    code, out, err = merge(monkeypatch, capsys, shard_dir, db)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err
    assert {t: fetch(db, f"SELECT count(*) FROM {t}") for t in before} == before


def test_merge_of_a_missing_or_empty_folder_is_one_line(monkeypatch, capsys, tmp_path):
    code, _, err = merge(monkeypatch, capsys, tmp_path / "nowhere", tmp_path / "w.duckdb")
    assert code == 2 and "no shard folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = merge(monkeypatch, capsys, tmp_path / "empty", tmp_path / "w.duckdb")
    assert code == 2 and "holds no shards" in err
    assert not (tmp_path / "w.duckdb").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--shard", "3/2", "--shard-dir", "x"], "--shard 3/2: I counts from 1, so it is 1 … 2"),
        (["--shard", "0/3", "--shard-dir", "x"], "I counts from 1, so it is 1 … 3; for an index counted from 0"),
        (["--shard", "two", "--shard-dir", "x"], "write it as I/N"),
        (["--shard", "1/2"], "give --shard-dir"),
        (["--shard-index", "0", "--shards", "2"], "give --shard-dir"),
        (["--workers", "3"], "--workers goes with --engine ray"),
        (["--shard-dir", "x"], "--shard-dir goes with --shard, --shard-index or --engine ray"),
        (["--engine", "ray", "--shard", "1/2", "--shard-dir", "x"], "does not combine with --engine ray"),
        (["--engine", "ray", "--shard-index", "0", "--shards", "2", "--shard-dir", "x"], "does not combine"),
        # The two conventions, each out of range, and mixed.
        (["--shard-index", "3", "--shards", "3", "--shard-dir", "x"], "the index counts from 0, so it is 0 … 2"),
        (["--shard-index", "-1", "--shards", "3", "--shard-dir", "x"], "the index counts from 0, so it is 0 … 2"),
        (["--shard-index", "0", "--shards", "0", "--shard-dir", "x"], "there must be at least 1 shard"),
        (["--shard-index", "0", "--shard-dir", "x"], "--shard-index goes with --shards N"),
        (["--shards", "3", "--shard-dir", "x"], "--shards goes with --shard-index I"),
        (
            ["--shard", "1/3", "--shard-index", "0", "--shards", "3", "--shard-dir", "x"],
            "give --shard I/N (I counted from 1) or --shard-index I --shards N (I counted from 0), not both",
        ),
    ],
)
def test_engine_options_in_bad_combinations_fail_with_one_line(monkeypatch, capsys, pairs, tmp_path, extra, message):
    code, _, err = run(monkeypatch, capsys, "ingest", *pair_args(pairs, tmp_path / "w.duckdb"), *extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "w.duckdb").exists()


@pytest.mark.parametrize(
    "command",
    [["ingest"], ["ingest", "compare", "--tuned", "x"], ["ingest", "ablation", "--model", "x", "--task", "sentiment"]],
)
def test_every_sharded_command_takes_both_conventions_and_refuses_them_mixed(monkeypatch, capsys, tmp_path, command):
    db = tmp_path / "w.duckdb"
    both = ["--shard", "2/3", "--shard-index", "1", "--shards", "3", "--shard-dir", str(tmp_path / "s")]
    code, _, err = run(monkeypatch, capsys, *command, "--db", str(db), *both)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not both" in err, err
    assert list(tmp_path.iterdir()) == []


def test_shard_index_counted_from_0_writes_the_same_part_as_shard_counted_from_1(
    monkeypatch, capsys, tiny_model_dir, tmp_path
):
    """torchrun's RANK 0 (or a Slurm array from 0) is --shard-index 0, the same shard as --shard 1/3."""
    from attnwh.ingest.runs import shards

    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, tmp_path / "w.duckdb", 4)]
    folders = {}
    for name, shard in [("from1", ["--shard", "1/3"]), ("from0", ["--shard-index", "0", "--shards", "3"])]:
        folders[name] = tmp_path / name
        code, out, err = run(monkeypatch, capsys, *args, *shard, "--shard-dir", str(folders[name]))
        assert code == 0, err
    (run_dir,) = folders["from1"].iterdir()
    parts = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("part-"))
    assert parts == ["part-000000", "part-000003"]  # units 0 and 3 of six: every third, from the first
    assert sorted(p.name for p in (folders["from0"] / run_dir.name).iterdir()) == sorted(
        p.name for p in run_dir.iterdir()
    )
    for part in parts:
        a, b = shards.read_part(run_dir / part), shards.read_part(folders["from0"] / run_dir.name / part)
        assert a.tables.keys() == b.tables.keys()
        assert all(a.tables[t].equals(b.tables[t]) for t in a.tables), part
    assert not (tmp_path / "w.duckdb").exists()


def test_sharded_compare_merges_to_the_single_process_cosines(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from test_compare import perturb_last_layer

    base = tiny_model_dir("bert")
    tuned = perturb_last_layer(base, tmp_path / "tuned")
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "compare", "--base", str(base), "--tuned", str(tuned), *pair_args(data, tmp_path / "x", 4)]
    single, merged = single_and_sharded(monkeypatch, capsys, args, tmp_path, 2)
    assert_same_rows(single, merged, "attention_change", "cosine", N * 2 * 4)
    lineage = "SELECT m.name, b.name FROM runs JOIN models AS m USING (model_id) JOIN models AS b ON b.model_id = runs.base_model_id"
    assert fetch(single, lineage) == fetch(merged, lineage)


def test_sharded_ablation_merges_and_finishes_to_the_single_process_results(
    monkeypatch, capsys, tmp_path_factory, tmp_path
):
    from tiny_models import make_sharp_classifier

    model = make_sharp_classifier("bert", tmp_path_factory.mktemp("sharp"), 2, 4)
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = [
        "ingest", "ablation", "--model", str(model), *pair_args(data, tmp_path / "x.duckdb", batch_size=4),
        "--resamples", "200", "--top-k", "3",
    ]  # fmt: skip
    single, merged, shard_dir = tmp_path / "single.duckdb", tmp_path / "merged.duckdb", tmp_path / "shards"
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(single))
    assert code == 0, err
    sharded(monkeypatch, capsys, args, shard_dir, 2)
    run_dir = next(shard_dir.iterdir())
    # Units are batches × groups of configurations that share a first disabled layer.
    assert {p.name.split("-g")[1] for p in run_dir.glob("part-*")} == {"00", "01"}
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert "finish it" in out and "--shard" not in out.split("finish it")[1]
    assert fetch(merged, "SELECT status FROM runs") == [("partial",)]
    assert fetch(merged, "SELECT count(*) FROM ablations") == [(0,)]
    # The printed command (without --shard) finishes the run from the merged predictions.
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(merged))
    assert code == 0, err
    assert fetch(merged, "SELECT status FROM runs") == [("complete",)]

    predictions = "SELECT config_id, example_id, prediction, correct FROM ablation_predictions ORDER BY ALL"
    assert fetch(single, predictions) == fetch(merged, predictions)
    scores = "SELECT config_id, metric, value, baseline, delta, ci_low, ci_high, p_value, p_adjusted FROM ablations"
    a, b = fetch(single, scores + " ORDER BY ALL"), fetch(merged, scores + " ORDER BY ALL")
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x[:2] == y[:2]
        np.testing.assert_allclose(
            np.array(x[2:], dtype=float), np.array(y[2:], dtype=float), atol=1e-12, rtol=0, equal_nan=True
        )
    importance = "SELECT layer, head, importance FROM head_importance ORDER BY ALL"
    np.testing.assert_allclose(
        np.array(fetch(single, importance)), np.array(fetch(merged, importance)), atol=1e-5, rtol=1e-4
    )


@pytest.mark.e2e
def test_sharded_statistics_equal_the_single_process_on_the_bundled_minilm(monkeypatch, capsys, tmp_path):
    args = ["ingest", "--limit", "12", "--batch-size", "4"]
    single, merged = single_and_sharded(monkeypatch, capsys, args, tmp_path, 2)
    assert_same_rows(single, merged, "head_stats", STATS, 2 * 12 * 6 * 12)  # two sample tasks, 6 layers × 12 heads


@pytest.mark.parametrize(
    "shard",
    [["--shard", "2/3"], ["--shard=2/3"], ["--shard-index", "1", "--shards", "3"], ["--shard-index=1", "--shards=3"]],
)
def test_the_finish_command_of_a_sharded_ablation_drops_either_form_of_shard_options(shard):
    from attnwh.ingest.runs.shards import _without_shard_options

    command = shlex.join(["attnwh", "ingest", "ablation", "--model", "m", *shard, "--shard-dir", "s", "--db", "w"])
    assert _without_shard_options(command) == "attnwh ingest ablation --model m --db w"
