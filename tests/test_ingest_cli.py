"""`attnwh ingest` end to end on tiny models: rows, resume, replace, and bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from helpers import counts, digest, ingest_args, run, write_pairs


def test_ingest_writes_one_row_per_example_layer_head(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    code, out, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db))
    assert code == 0, err
    assert str(db.resolve()) in out and "head-statistics rows" in out
    with duckdb.connect(str(db), read_only=True) as con:
        (rows, unique, examples) = con.execute(
            "SELECT count(*), count(DISTINCT (run_id, example_id, layer, head)), count(DISTINCT example_id) FROM head_stats"
        ).fetchall()[0]
        assert examples == 24 and rows == unique == 24 * 2 * 4
        run_row = con.execute("SELECT status, n_examples, kind, task, versions FROM runs").fetchall()
        assert [r[:4] for r in run_row] == [("complete", 24, "statistics", "pairs")]
        assert '"transformers"' in run_row[0][4]
        labels = con.execute("SELECT DISTINCT label, label_id FROM examples ORDER BY label").fetchall()
        assert labels == [("no", 0), ("yes", 1)]
        model = con.execute("SELECT family, num_layers, num_heads FROM models").fetchall()
        assert model == [("bert", 2, 4)]


def test_rerun_skips_complete_run_and_replace_redoes_it(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    args = ingest_args(tiny_model_dir("bert"), pairs, db)
    assert run(monkeypatch, capsys, *args)[0] == 0
    first = counts(db)
    code, out, _ = run(monkeypatch, capsys, *args)
    assert code == 0 and "already complete" in out
    assert counts(db) == first
    code, out, _ = run(monkeypatch, capsys, *args, "--replace")
    assert code == 0 and "replaced" in out
    assert counts(db) == first


def test_limit_and_truncation_are_recorded(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    code, out, err = run(
        monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db, "--limit", "7", "--max-length", "12")
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        n, truncated, longest = con.execute(
            "SELECT count(*), count(*) FILTER (truncated), max(n_tokens) FROM run_examples"
        ).fetchall()[0]
        recorded = con.execute("SELECT n_truncated, example_limit, max_length FROM runs").fetchall()[0]
    assert n == 7 and longest == 12 and truncated > 0
    assert recorded == (truncated, 7, 12)


def test_no_truncate_advises_what_the_next_command_accepts(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    """Refused under --no-truncate, the message advises only what works: raising --max-length
    up to the model's limit (64 tokens for the tiny model), and past it dropping --no-truncate,
    never a --max-length the model refuses. Each advice is then followed and must succeed."""
    bert = tiny_model_dir("bert")
    # Within the model's limit: raising --max-length to the longest input's length works.
    code, _, err = run(
        monkeypatch, capsys, *ingest_args(bert, pairs, tmp_path / "a.duckdb", "--max-length", "8", "--no-truncate")
    )
    assert code != 0
    said = re.search(r"longest: (\d+)\)", err)
    assert said, err
    longest = int(said.group(1))
    assert 8 < longest <= 64 and f"raise --max-length to {longest}" in err and "drop --no-truncate" in err
    args = ingest_args(bert, pairs, tmp_path / "a.duckdb", "--max-length", str(longest), "--no-truncate")
    assert run(monkeypatch, capsys, *args)[0] == 0

    # Past the model's limit: no --max-length can keep them whole.
    long_pairs = tmp_path / "long.tsv"
    words = " ".join(["the film was long and slow"] * 30)
    long_pairs.write_text(f"premise\thypothesis\tlabel\n{words}\tshort\tyes\nshort\tshort\tno\n", encoding="utf-8")
    errors = {}
    for extra in ([], ["--max-length", "16"]):
        code, _, err = run(
            monkeypatch, capsys, *ingest_args(bert, long_pairs, tmp_path / "b.duckdb", *extra, "--no-truncate")
        )
        lines = [line for line in err.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1, err
        assert "raise --max-length to" not in err and "drop --no-truncate" in err and "reads at most 64 tokens" in err
        errors[len(extra)] = err
    # Below the limit it says how far --max-length can go; at the limit it does not.
    assert "at 64 with --max-length 64" in errors[2] and "with --max-length" not in errors[0]
    # The advice followed: without --no-truncate the inputs are cut at the limit and stored.
    assert run(monkeypatch, capsys, *ingest_args(bert, long_pairs, tmp_path / "b.duckdb"))[0] == 0
    with duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as con:
        assert con.execute("SELECT max(n_tokens), count(*) FILTER (truncated) FROM run_examples").fetchall() == [
            (64, 1)
        ]


@pytest.mark.parametrize("family", ["roberta", "distilbert", "electra", "albert"])
def test_ingest_every_family(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path, family):
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir(family), pairs, db, "--limit", "6"))
    assert code == 0, err
    assert counts(db)["head_stats"] == 6 * 2 * 4


def test_sequence_classification_checkpoint(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert", classifier=True), pairs, db))
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT architecture FROM models").fetchall() == [("BertForSequenceClassification",)]


def bad_inputs(tmp_path: Path, tiny_model_dir) -> dict[str, tuple[list[str], str]]:
    from tiny_models import make_unreadable_decoder

    good = write_pairs(tmp_path / "good.tsv")
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    header_only = tmp_path / "header.tsv"
    header_only.write_text("premise\thypothesis\tlabel\n", encoding="utf-8")
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("premise\thypothesis\tlabel\na\tb\n", encoding="utf-8")
    not_model = tmp_path / "not_a_model"
    not_model.mkdir()
    bloom = make_unreadable_decoder(tmp_path / "bloom")
    bert = tiny_model_dir("bert")
    return {
        "missing model": (ingest_args(tmp_path / "nope", good, Path("DB")), "does not exist"),
        "not a model directory": (ingest_args(not_model, good, Path("DB")), "not a model directory"),
        "unreadable decoder": (ingest_args(bloom, good, Path("DB")), "outside transformers' attention interface"),
        "empty dataset": (ingest_args(bert, empty, Path("DB")), "empty"),
        "header only": (ingest_args(bert, header_only, Path("DB")), "no data rows"),
        "malformed dataset": (ingest_args(bert, ragged, Path("DB")), "ragged"),
        "missing column": (
            ingest_args(bert, good, Path("DB"))[:6] + ["--text-column", "sentence", "--db", "DB"],
            "sentence",
        ),
        "too long, no truncation": (
            ingest_args(bert, good, Path("DB"), "--max-length", "8", "--no-truncate"),
            "longer than 8",
        ),
        "max length above the model's": (ingest_args(bert, good, Path("DB"), "--max-length", "4096"), "exceeds"),
        "unknown GLUE task": (
            ["ingest", "--model", str(bert), "--glue-dir", str(tmp_path), "--task", "xnli", "--db", "DB"],
            "xnli",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing model",
        "not a model directory",
        "unreadable decoder",
        "empty dataset",
        "header only",
        "malformed dataset",
        "missing column",
        "too long, no truncation",
        "max length above the model's",
        "unknown GLUE task",
    ],
)
def test_bad_input_gives_one_line_and_leaves_the_database_unchanged(
    monkeypatch, capsys, tiny_model_dir, tmp_path, case
):
    db = tmp_path / "w.duckdb"
    # A warehouse that already holds a run: bad input must not touch it.
    assert (
        run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), write_pairs(tmp_path / "seed.tsv", 5), db))[0]
        == 0
    )
    before = digest(db)
    args, expected = bad_inputs(tmp_path, tiny_model_dir)[case]
    args = [str(db) if a == "DB" else a for a in args]
    code, out, err = run(monkeypatch, capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0
    assert len(lines) == 1, err
    assert lines[0].startswith("attnwh: error:") and expected.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in err
    assert digest(db) == before


def test_bad_input_creates_no_database(monkeypatch, capsys, tmp_path, tiny_model_dir):
    db = tmp_path / "new.duckdb"
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), empty, db))
    assert code != 0 and not db.exists()


def test_second_writer_gets_database_in_use(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    assert run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db, "--limit", "3"))[0] == 0
    before = digest(db)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys, time; c = duckdb.connect({str(db)!r}); print('ok', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db, "--replace"))
        assert code != 0 and len(err.strip().splitlines()) == 1 and "in use" in err
        code, _, err = run(monkeypatch, capsys, "sql", "SELECT 1", "--db", str(db))
        assert code != 0 and "in use" in err
    finally:
        holder.kill()
        holder.wait()
    assert digest(db) == before


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from attnwh.ingest.sources.files import load_file
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs.loop import IngestOptions, ingest_statistics, prepare_tasks

    model, data, db = sys.argv[1:4]
    encoder = load_model(model, device="cpu")
    options = IngestOptions(batch_size=5)
    tasks = prepare_tasks(encoder, [load_file(Path(data), "premise", "hypothesis", "label")], options)
    seen = []

    def on_batch(n):
        seen.append(n)
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no rollback: as if the power went

    ingest_statistics(Path(db), encoder, tasks, options, on_batch=on_batch)
    """
)


@pytest.mark.slow
def test_sigkill_mid_run_leaves_an_openable_file_and_rerun_completes(
    monkeypatch, capsys, tiny_model_dir, pairs, tmp_path
):
    db = tmp_path / "w.duckdb"
    model = tiny_model_dir("bert")
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, str(model), str(pairs), str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        (status,) = con.execute("SELECT status FROM runs").fetchall()[0]
        partial = con.execute("SELECT count(DISTINCT example_id), count(*) FROM head_stats").fetchall()[0]
    assert status == "running"
    assert partial == (10, 10 * 2 * 4)  # two whole batches of 5, nothing of the third
    code, out, err = run(monkeypatch, capsys, *ingest_args(model, pairs, db))
    assert code == 0, err
    assert "resumed" in out
    with duckdb.connect(str(db), read_only=True) as con:
        total, unique = con.execute(
            "SELECT count(*), count(DISTINCT (run_id, example_id, layer, head)) FROM head_stats"
        ).fetchall()[0]
        runs = con.execute("SELECT count(*), any_value(status) FROM runs").fetchall()[0]
        done = con.execute("SELECT count(*) FROM run_examples").fetchall()[0][0]
    assert total == unique == 24 * 2 * 4
    assert runs == (1, "complete") and done == 24


def test_ctrl_c_marks_the_run_interrupted_and_rerun_resumes(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    from attnwh.ingest.runs import rows

    db = tmp_path / "w.duckdb"
    real_write = rows.store_part
    calls = []

    def write_then_interrupt(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_write(*args, **kwargs)

    monkeypatch.setattr(rows, "store_part", write_then_interrupt)
    code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db))
    # Progress was already on stderr; the interruption adds one line and no traceback.
    assert code == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("attnwh: error: interrupted; rerun the same command to resume")
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
        assert con.execute("SELECT count(*) FROM run_examples").fetchall()[0][0] == 10
    monkeypatch.setattr(rows, "store_part", real_write)
    code, out, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db))
    assert code == 0 and "resumed" in out
    assert counts(db)["head_stats"] == 24 * 2 * 4 and counts(db)["run_examples"] == 24


def test_bfloat16_statistics_are_close_to_float32(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    for dtype in ("float32", "bfloat16"):
        code, _, err = run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db, "--dtype", dtype))
        assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        dtypes = con.execute("SELECT dtype FROM runs ORDER BY run_id").fetchall()
        diff = con.execute(
            "SELECT max(abs(a.to_cls - b.to_cls)), max(abs(a.entropy - b.entropy)) FROM head_stats a "
            "JOIN head_stats b USING (example_id, layer, head) WHERE a.run_id = 1 AND b.run_id = 2"
        ).fetchall()[0]
    assert dtypes == [("float32",), ("bfloat16",)]  # separate runs: dtype is part of a run's identity
    # Measured on this fixture: at most 0.00099 on to_cls (mean 0.03) and 0.0041 on entropy
    # (mean 2.7 nats); the bounds are four times that, about bfloat16's rounding step (2^-8)
    # on a share of 1 and on an entropy of 1 nat.
    assert 0 < diff[0] < 0.004 and diff[1] < 0.016


def test_cuda_without_a_gpu_is_refused(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, _, err = run(
        monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, tmp_path / "w.duckdb", "--device", "cuda")
    )
    assert code == 2 and "no CUDA device" in err
