"""Every run kind through the engine: a run computed in one process, in three static shards
merged (`--shard I/3`, `attnwh merge`, then the same command to finish it), and a run killed
with SIGKILL in the middle and rerun all store the same rows. (Ray: tests/test_ray_engine.py.)

The killed run dies in a child process at the start of its third unit of work, as if the
power went: no handler, no rollback; the rerun must resume it to the rows of an unbroken run,
none twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import run
from test_shards import fetch, merge, sharded

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


# A child that runs an attnwh command and kills itself (SIGKILL) when `method` of `cls` in
# `module` is called for the `at`-th time: in the middle of the run, between two units.
KILLER = textwrap.dedent(
    """
    import importlib, os, signal, sys
    module, cls, method, at = sys.argv[1:5]
    owner = getattr(importlib.import_module(module), cls)
    original = getattr(owner, method)
    calls = []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == int(at):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(owner, method, dying)
    from attnwh.cli import main
    sys.argv = ["attnwh", *sys.argv[5:]]
    main()
    """
)


def killed_then_rerun(monkeypatch, capsys, args: list[str], db: Path, where: tuple[str, str, str], at: int = 3) -> str:
    """Run `args` into `db` in a child killed at the `at`-th call of `where` (module, class,
    method), check it died there, rerun it here; returns the rerun's stdout."""
    child = subprocess.run(
        [sys.executable, "-c", KILLER, *where, str(at), *args, "--db", str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"},
        timeout=600,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(db))
    assert code == 0, err
    return out


def assert_same(a: Path, b: Path, sql: str, atol: float = 0.0) -> None:
    """The rows of `sql` in both warehouses: the same keys (all columns but the float ones),
    the float columns within `atol`, and no duplicates."""
    x, y = fetch(a, sql), fetch(b, sql)
    assert len(x) == len(y) > 0
    for r, s in zip(x, y):
        exact = [v for v in r if not isinstance(v, float)]
        assert exact == [v for v in s if not isinstance(v, float)]
        floats = np.array([v for v in r if isinstance(v, float)], float)
        np.testing.assert_allclose(floats, np.array([v for v in s if isinstance(v, float)], float), atol=atol, rtol=0)


# -- the loss sweep ------------------------------------------------------------------------

LOSS_ROWS = "SELECT config_id, example_id, span, tokens, nats FROM ablation_losses ORDER BY ALL"
LOSS_SCORES = (
    "SELECT config_id, metric, test, n_examples, value, baseline, delta, ci_low, ci_high, p_value, p_adjusted "
    "FROM ablations ORDER BY ALL"
)
LOSS_WORKER = ("attnwh.ingest.runs.loss_ablation", "LossWorker", "compute")


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    from test_decoder_ablation import make_causal_lm

    return make_causal_lm("llama", tmp_path_factory.mktemp("lm"), positions=320)


@pytest.fixture(scope="module")
def loss_runs(lm, tmp_path_factory) -> dict[str, tuple[list[str], Path]]:
    """The loss sweep on text and on induction probes, each run once in one process."""
    from helpers import cli_main

    folder = tmp_path_factory.mktemp("loss")
    out = {}
    for name, data in {
        "text": ["--task", "prose", "--max-length", "40", "--limit", "7"],
        "probes": ["--probe", "induction", "--repeat-length", "8", "--limit", "7"],
    }.items():
        args = ["ingest", "ablation", "--model", str(lm), *data, "--mode", "zero", "--resamples", "100"]
        args += ["--batch-size", "2"]
        db = folder / f"{name}.duckdb"
        cli_main(*args, "--db", str(db))
        out[name] = (args, db)
    return out


@pytest.mark.parametrize("data", ["text", "probes"])
def test_the_loss_sweep_in_three_shards_merges_and_finishes_to_the_one_process_rows(
    monkeypatch, capsys, loss_runs, tmp_path, data
):
    args, single = loss_runs[data]
    merged, shard_dir = tmp_path / "merged.duckdb", tmp_path / "shards"
    sharded(monkeypatch, capsys, args, shard_dir, 3)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert fetch(merged, "SELECT status FROM runs") == [("partial",)]
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(merged))
    assert code == 0, err
    assert fetch(merged, "SELECT status FROM runs") == [("complete",)]
    assert_same(single, merged, LOSS_ROWS)
    assert_same(single, merged, LOSS_SCORES)
    assert fetch(single, "SELECT run_key FROM runs") == fetch(merged, "SELECT run_key FROM runs")


def test_the_loss_sweep_killed_mid_run_resumes_to_the_rows_of_an_unbroken_run(monkeypatch, capsys, loss_runs, tmp_path):
    args, single = loss_runs["probes"]
    db = tmp_path / "killed.duckdb"
    out = killed_then_rerun(monkeypatch, capsys, args, db, LOSS_WORKER)
    assert "resumed" in out
    assert_same(single, db, LOSS_ROWS)
    assert_same(single, db, LOSS_SCORES)


# -- head roles ----------------------------------------------------------------------------

ROLE_ROWS = (
    "SELECT r.task, h.example_id, h.layer, h.head, h.previous_token, h.induction, h.duplicate, h.retrieval, "
    "h.sink, h.local_mass FROM head_roles AS h JOIN runs AS r USING (run_id) ORDER BY ALL"
)
ROLE_PROBES = (
    "SELECT r.task, p.example_id, p.position, p.kind, p.seed, p.depth, p.token_ids, p.segments "
    "FROM role_probes AS p JOIN runs AS r USING (run_id) ORDER BY ALL"
)
ROLE_RUNS = (
    "SELECT r.run_key, r.task, r.status, r.n_examples, s.kind, s.local_window, s.repeat_length, s.context_length, "
    "s.depths, s.text_hash FROM runs AS r JOIN role_settings AS s USING (run_id) ORDER BY ALL"
)
ROLE_CAPTURE = ("attnwh.ingest.runs.roles", "RolesCapture", "run")


@pytest.fixture(scope="module")
def role_run(tmp_path_factory) -> tuple[list[str], Path]:
    """Both probe kinds on a tiny Llama, 6 probes each in units of 2, in one process."""
    from helpers import cli_main
    from tiny_models import make_tiny_decoder

    folder = tmp_path_factory.mktemp("roles")
    model = make_tiny_decoder("llama", folder / "llama", 2, 4, seed=3, positions=256)
    args = ["ingest", "roles", "--model", str(model), "--device", "cpu", "--examples", "6", "--batch-size", "2"]
    args += ["--repeat-length", "10", "--context-length", "160", "--depths", "0,1", "--local-window", "8"]
    cli_main(*args, "--db", str(folder / "single.duckdb"))
    return args, folder / "single.duckdb"


def assert_same_roles(a: Path, b: Path) -> None:
    assert_same(a, b, ROLE_ROWS)
    assert fetch(a, ROLE_PROBES) == fetch(b, ROLE_PROBES)
    assert fetch(a, ROLE_RUNS) == fetch(b, ROLE_RUNS)
    assert [r[2] for r in fetch(b, ROLE_RUNS)] == ["complete", "complete"]


def test_roles_in_three_shards_merge_to_the_one_process_rows(monkeypatch, capsys, role_run, tmp_path):
    args, single = role_run
    merged, shard_dir = tmp_path / "merged.duckdb", tmp_path / "shards"
    sharded(monkeypatch, capsys, args, shard_dir, 3)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert_same_roles(single, merged)


def test_roles_killed_mid_run_resume_to_the_rows_of_an_unbroken_run(monkeypatch, capsys, role_run, tmp_path):
    args, single = role_run
    db = tmp_path / "killed.duckdb"
    out = killed_then_rerun(monkeypatch, capsys, args, db, ROLE_CAPTURE, at=5)  # in the needle run's units
    assert "induction run" in out and "needle run" in out and "resumed" in out
    assert_same_roles(single, db)


# -- the restriction -----------------------------------------------------------------------

RESTRICTION_LOSSES = (
    "SELECT input, kind, layer, kv_group, k, sequence, example_id, tokens, correct, nats FROM restriction_losses "
    "ORDER BY ALL"
)
RESTRICTION_TABLES = (
    "SELECT rank, layer, kv_group, loss, delta, ci_low, ci_high, p_value, p_adjusted, needle_accuracy, needle_delta "
    "FROM restriction_groups ORDER BY rank",
    "SELECT k, loss, delta, ci_low, ci_high, p_value, kv_bytes_saved, needle_accuracy FROM restriction_plan ORDER BY k",
    "SELECT sequences, tokens, loss, needles, needle_tokens, needle_loss, needle_accuracy FROM restriction_runs",
)
RESTRICTION_WORKER = ("attnwh.ingest.runs.restriction", "RestrictionWorker", "compute")


@pytest.fixture(scope="module")
def restriction_run(tmp_path_factory) -> tuple[list[str], Path]:
    """The restriction of a tiny Llama (2 layers, 2 key/value groups) on 7 text sequences and 2
    needle probes in units of 2, in one process."""
    from helpers import cli_main
    from test_restriction import make_lm

    folder = tmp_path_factory.mktemp("restriction")
    model = make_lm("llama", folder, positions=256)
    args = ["ingest", "restriction", "--model", str(model), "--device", "cpu", "--sink-tokens", "2", "--window", "4"]
    args += ["--context-length", "160", "--limit", "7", "--grid", "0,1,2,4", "--needles", "2", "--batch-size", "2"]
    cli_main(*args, "--db", str(folder / "single.duckdb"))
    return args, folder / "single.duckdb"


def assert_same_restriction(a: Path, b: Path) -> None:
    assert_same(a, b, RESTRICTION_LOSSES)
    for sql in RESTRICTION_TABLES:
        assert_same(a, b, sql)
    assert fetch(b, "SELECT kind, status, n_examples FROM runs") == [("restriction", "complete", 9)]
    assert fetch(a, "SELECT run_key FROM runs") == fetch(b, "SELECT run_key FROM runs")


def test_the_restriction_in_three_shards_merges_and_finishes_to_the_one_process_rows(
    monkeypatch, capsys, restriction_run, tmp_path
):
    args, single = restriction_run
    merged, shard_dir = tmp_path / "merged.duckdb", tmp_path / "shards"
    sharded(monkeypatch, capsys, args, shard_dir, 3)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert "ranking whole; finish it" in out and "--shard" not in out.split("finish it")[1]
    assert fetch(merged, "SELECT status FROM runs") == [("partial",)]
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(merged))
    assert code == 0, err
    assert_same_restriction(single, merged)


@pytest.mark.parametrize("at", [3, 7], ids=["in the ranking", "in the plan"])
def test_the_restriction_killed_mid_run_resumes_to_the_rows_of_an_unbroken_run(
    monkeypatch, capsys, restriction_run, tmp_path, at
):
    """5 units of ranking (9 examples in twos), then 5 of the plan: killed in either."""
    args, single = restriction_run
    db = tmp_path / "killed.duckdb"
    killed_then_rerun(monkeypatch, capsys, args, db, RESTRICTION_WORKER, at=at)
    assert_same_restriction(single, db)


# -- massive activations set to zero and to their mean --------------------------------------

MASSIVE_TABLES = (
    "SELECT intervention, sequence, example_id, tokens, nats FROM massive_ablation_losses ORDER BY ALL",
    "SELECT intervention, loss, delta, ci_low, ci_high, p_value FROM massive_ablation_results ORDER BY ALL",
    "SELECT layer, dim, token_kind, mean_value, sequences, sites FROM massive_ablation_entries ORDER BY ALL",
    "SELECT sequence, layer, dim, position, value FROM massive_ablation_sites ORDER BY ALL",
)
MASSIVE_WORKER = ("attnwh.ingest.runs.massive_ablation", "MassiveAblationWorker", "compute")


@pytest.fixture(scope="module")
def massive_run(tmp_path_factory) -> tuple[list[str], Path]:
    """The massive-ablation run of a tiny Llama at lowered thresholds, on 7 sequences in units
    of 2, in one process."""
    from helpers import cli_main
    from test_restriction import make_lm

    folder = tmp_path_factory.mktemp("massive")
    model = make_lm("llama", folder)
    args = ["ingest", "massive-ablation", "--model", str(model), "--device", "cpu", "--context-length", "24"]
    args += ["--limit", "7", "--batch-size", "2", "--min-magnitude", "0.01", "--ratio", "4", "--min-share", "0.3"]
    cli_main(*args, "--db", str(folder / "single.duckdb"))
    return args, folder / "single.duckdb"


def assert_same_massive(a: Path, b: Path) -> None:
    for sql in MASSIVE_TABLES:
        assert_same(a, b, sql)
    assert fetch(b, "SELECT kind, status, n_examples FROM runs") == [("massive_ablation", "complete", 7)]
    assert fetch(a, "SELECT run_key FROM runs") == fetch(b, "SELECT run_key FROM runs")


def test_massive_ablation_in_three_shards_merges_and_finishes_to_the_one_process_rows(
    monkeypatch, capsys, massive_run, tmp_path
):
    args, single = massive_run
    merged, shard_dir = tmp_path / "merged.duckdb", tmp_path / "shards"
    sharded(monkeypatch, capsys, args, shard_dir, 3)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert "losses whole; finish it" in out
    assert fetch(merged, "SELECT status FROM runs") == [("partial",)]
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(merged))
    assert code == 0, err
    assert_same_massive(single, merged)


def test_massive_ablation_killed_mid_run_resumes_to_the_rows_of_an_unbroken_run(
    monkeypatch, capsys, massive_run, tmp_path
):
    args, single = massive_run
    db = tmp_path / "killed.duckdb"
    out = killed_then_rerun(monkeypatch, capsys, args, db, MASSIVE_WORKER)
    assert "resumed" in out
    assert_same_massive(single, db)


# -- relations -----------------------------------------------------------------------------

RELATION_TABLES = [
    f"SELECT r.task, t.* EXCLUDE (run_id) FROM {table} AS t JOIN runs AS r USING (run_id) ORDER BY ALL"
    for table in ("dependency_heads", "dependency_baselines", "feature_attention", "frame_heads", "frame_filters")
]
RELATION_RUNS = "SELECT run_key, task, status, n_examples, n_truncated FROM runs ORDER BY task"
RELATIONS_WORKER = ("attnwh.ingest.runs.relations", "RelationsWorker", "compute")


def relations_args(model: Path) -> list[str]:
    """Dependencies on 150 sentences of the UD English-EWT dev set (three units of up to 64)
    and frames on the FrameNet dev annotations (one unit), on `model`."""
    from conftest import SHARED_DATA

    conllu, framenet = (
        SHARED_DATA / "ud" / "en_ewt-ud-dev.conllu",
        SHARED_DATA / "framenet" / "fn1.7.dev.framebert.conll",
    )
    if not conllu.is_file() or not framenet.is_file():
        pytest.skip(f"no UD or FrameNet dev set in {SHARED_DATA}")
    args = ["ingest", "relations", "--model", str(model), "--device", "cpu", "--conllu", str(conllu)]
    return args + ["--framenet", str(framenet), "--limit", "150", "--batch-size", "16"]


@pytest.fixture(scope="module")
def relations_run(tiny_model_dir, tmp_path_factory) -> tuple[list[str], Path]:
    """:func:`relations_args` on the tiny BERT, in one process."""
    from helpers import cli_main

    args = relations_args(tiny_model_dir("bert"))
    db = tmp_path_factory.mktemp("relations") / "single.duckdb"
    cli_main(*args, "--db", str(db))
    return args, db


def assert_same_relations(a: Path, b: Path) -> None:
    for sql in RELATION_TABLES:
        assert fetch(a, sql) == fetch(b, sql)  # sums in the units' order: equal, not close
    assert fetch(a, RELATION_RUNS) == fetch(b, RELATION_RUNS)
    assert [r[2] for r in fetch(b, RELATION_RUNS)] == ["complete", "complete"]
    assert fetch(b, "SELECT count(*) FROM relation_sums") == [(0,)]  # working state, gone once summed


def test_relations_in_three_shards_merge_to_the_one_process_rows(monkeypatch, capsys, relations_run, tmp_path):
    """Two shards merged leave the dependencies run (three units) partial and complete the frames
    run (one unit); the third merged completes the dependencies, with no model: the merge sums
    the units' totals."""
    args, single = relations_run
    merged, shard_dir = tmp_path / "merged.duckdb", tmp_path / "shards"
    for i in (1, 2):
        code, out, err = run(monkeypatch, capsys, *args, "--shard", f"{i}/3", "--shard-dir", str(shard_dir))
        assert code == 0, err
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert fetch(merged, "SELECT task, status FROM runs ORDER BY task") == [
        ("dependencies", "partial"),
        ("frames", "complete"),
    ]
    assert fetch(merged, "SELECT count(*) FROM dependency_heads") == [(0,)]
    # The partial run holds its merged units' totals (two of its three), the complete one none.
    sums = "SELECT r.task, count(DISTINCT s.unit) FROM relation_sums AS s JOIN runs AS r USING (run_id) GROUP BY ALL"
    assert fetch(merged, sums) == [("dependencies", 2)]
    code, out, err = run(monkeypatch, capsys, *args, "--shard", "3/3", "--shard-dir", str(shard_dir))
    assert code == 0, err
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert_same_relations(single, merged)


def test_relations_killed_mid_run_resume_to_the_rows_of_an_unbroken_run(monkeypatch, capsys, relations_run, tmp_path):
    args, single = relations_run
    db = tmp_path / "killed.duckdb"
    out = killed_then_rerun(monkeypatch, capsys, args, db, RELATIONS_WORKER, at=3)  # the third dependencies unit
    assert "resumed" in out
    assert_same_relations(single, db)
