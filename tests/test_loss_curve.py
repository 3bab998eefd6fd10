"""`attnwh ingest loss-curve` and the in-context learning score (Olsson et al. 2022) on a tiny
random Llama that reads 600 positions: every stored per-position loss equals cross-entropy
on the logits of plain transformers' eager forward pass of the same model, sequence by
sequence; loss_by_position and icl_score equal the stored rows averaged by hand, the
score's sign-flip p equals scipy.stats.permutation_test (exact, every sign vector; and
within Monte Carlo error when sampled) and its interval scipy.stats.bootstrap's (within
Monte Carlo error); three static shards merged, a run killed mid-way and rerun, and the
one-process run store the same rows; a rerun keeps the run and --replace redoes it; an
encoder, a context past the model's limit, a text too short for one sequence and a score
asked of too short a run are refused in one line, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from attnwh import api
from attnwh.ingest.runs.restriction import read_text
from attnwh.ingest.sources.text import cut_documents
from helpers import cli_main, run
from test_engine_kinds import assert_same, killed_then_rerun
from test_restriction import make_lm
from test_shards import fetch, merge, sharded
from tiny_models import make_tiny

CONTEXT, SEQUENCES = 520, 16
ARGS = ["--context-length", str(CONTEXT), "--limit", str(SEQUENCES), "--batch-size", "4", "--device", "cpu"]
ROWS = "SELECT sequence, example_id, position, token_id, loss FROM position_losses ORDER BY sequence, position"
WORKER = ("attnwh.ingest.runs.loss_curve", "LossCurveWorker", "compute")


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    return make_lm("llama", tmp_path_factory.mktemp("loss-curve-lm"), positions=600)


@pytest.fixture(scope="module")
def stored(lm, tmp_path_factory) -> tuple[list[str], Path]:
    args = ["ingest", "loss-curve", "--model", str(lm), *ARGS]
    db = tmp_path_factory.mktemp("loss-curve") / "w.duckdb"
    cli_main(*args, "--db", str(db))
    return args, db


def per_sequence(db: Path, early: int, late: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Each sequence's mean loss over the window around `early` and around `late`, from the
    stored rows by numpy."""
    rows = fetch(db, "SELECT sequence, position, loss FROM position_losses")
    n = 1 + max(r[0] for r in rows)
    losses = np.full((n, CONTEXT), np.nan)
    for sequence, position, loss in rows:
        losses[sequence, position] = loss
    start = window // 2
    return (
        losses[:, early - start : early - start + window].mean(1),
        losses[:, late - start : late - start + window].mean(1),
    )


def test_stored_losses_equal_cross_entropy_of_a_plain_eager_forward(stored, lm):
    """Per sequence and position, within 1e-5: the sequences are the prose cut as the
    restriction cuts it (exactly CONTEXT tokens, the first SEQUENCES), position t the
    cross-entropy of token t on the logits at t − 1 of AutoModelForCausalLM (eager), each
    sequence run alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, db = stored
    tokenizer = AutoTokenizer.from_pretrained(lm)
    cut = cut_documents(read_text(None), tokenizer, CONTEXT)
    sequences = [e.token_ids for e in cut.examples if len(e.token_ids or ()) == CONTEXT][:SEQUENCES]
    assert len(sequences) == SEQUENCES
    model = AutoModelForCausalLM.from_pretrained(lm, attn_implementation="eager").eval()
    rows = fetch(db, ROWS)
    assert len(rows) == SEQUENCES * (CONTEXT - 1)
    got = np.array([r[4] for r in rows]).reshape(SEQUENCES, CONTEXT - 1)
    assert [r[2] for r in rows[: CONTEXT - 1]] == list(range(1, CONTEXT))
    for s, ids in enumerate(sequences):
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(input_ids=x).logits[0]
        want = torch.nn.functional.cross_entropy(logits[:-1].double(), x[0, 1:], reduction="none").numpy()
        np.testing.assert_allclose(got[s], want, atol=1e-5, rtol=0)
        assert [r[3] for r in rows[s * (CONTEXT - 1) : (s + 1) * (CONTEXT - 1)]] == list(ids[1:])
    assert fetch(db, "SELECT kind, status, n_examples, max_length FROM runs") == [
        ("loss_curve", "complete", SEQUENCES, CONTEXT)
    ]


def test_loss_by_position_is_the_mean_over_sequences(stored):
    _, db = stored
    wh = api.Warehouse(db)
    rows = fetch(db, "SELECT sequence, position, loss FROM position_losses")
    losses = np.zeros((SEQUENCES, CONTEXT))
    for sequence, position, loss in rows:
        losses[sequence, position] = loss
    curve = wh.loss_by_position()
    assert curve["position"].to_list() == list(range(1, CONTEXT)) and set(curve["sequences"]) == {SEQUENCES}
    np.testing.assert_allclose(curve["loss"].to_numpy(), losses[:, 1:].mean(0), atol=1e-12)
    binned = wh.loss_by_position(bin=100)
    assert binned["position"].to_list() == [1, 100, 200, 300, 400, 500]
    assert binned["position_last"].to_list() == [99, 199, 299, 399, 499, CONTEXT - 1]
    bins = [losses[:, 1:100], *(losses[:, k : k + 100] for k in range(100, 500, 100)), losses[:, 500:]]
    np.testing.assert_allclose(binned["loss"].to_numpy(), [b.mean() for b in bins], atol=1e-12)
    sd = [b.mean(1).std(ddof=1) / np.sqrt(SEQUENCES) for b in bins]
    np.testing.assert_allclose(binned["std_error"].to_numpy(), sd, rtol=1e-9)


@pytest.mark.parametrize("window", [1, 25])
def test_the_icl_score_and_its_tests_equal_scipy(stored, window):
    """The score is the mean over sequences of late − early; its p is scipy's paired
    permutation test — exactly when every one of the 2^16 sign vectors is enumerated
    (resamples ≥ 65536, as scipy decides), within Monte Carlo error with 9999 random ones —
    and its interval scipy's percentile bootstrap within Monte Carlo error."""
    _, db = stored
    wh = api.Warehouse(db)
    early, late = per_sequence(db, 50, 500, window)
    d = late - early

    def permutation(resamples: int) -> float:
        found = stats.permutation_test(
            (late, early),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            n_resamples=resamples,
            rng=np.random.default_rng(0),
        )
        return float(found.pvalue)

    row = wh.icl_score(window=window).row(0, named=True)
    assert row["sequences"] == SEQUENCES and row["window"] == window and not row["exact_test"]
    assert row["icl_score"] == pytest.approx(d.mean(), abs=1e-12)
    assert row["loss_early"] == pytest.approx(early.mean(), abs=1e-12)
    assert row["loss_late"] == pytest.approx(late.mean(), abs=1e-12)
    p = permutation(9999)
    assert abs(row["p_value"] - p) < 0.02 and 0.01 < p < 0.99  # a p that Monte Carlo error can move
    se = d.std(ddof=1) / np.sqrt(len(d))
    boot = stats.bootstrap((d,), np.mean, method="percentile", n_resamples=9999, rng=np.random.default_rng(0))
    assert row["ci_low"] == pytest.approx(boot.confidence_interval.low, abs=0.15 * se)
    assert row["ci_high"] == pytest.approx(boot.confidence_interval.high, abs=0.15 * se)
    assert row["ci_low"] < row["icl_score"] < row["ci_high"]
    exact = wh.icl_score(window=window, resamples=2**SEQUENCES).row(0, named=True)
    assert exact["exact_test"] and exact["p_value"] == pytest.approx(permutation(2**SEQUENCES), rel=1e-12)
    # Seeded: the same numbers again.
    assert wh.icl_score(window=window).row(0, named=True) == row


def test_positions_and_windows_outside_the_run_are_refused_in_one_line(stored, monkeypatch, capsys):
    _, db = stored
    for params, says in (
        (["late=520"], "--context-length 521"),
        (["late=510", "window=21"], "--context-length 521"),
        (["early=5", "window=12"], "starts before position 1"),
        (["early=500", "late=50"], "early must be a position before late"),
    ):
        p = [x for param in params for x in ("-p", param)]
        code, _, err = run(monkeypatch, capsys, "query", "icl_score", *p, "-p", "run=1", "--db", str(db))
        assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err


@pytest.mark.slow  # a child process that dies, and four runs of the command
def test_three_shards_merged_and_a_killed_run_store_the_one_process_rows(stored, monkeypatch, capsys, tmp_path):
    args, single = stored
    merged, shard_dir = tmp_path / "merged.duckdb", tmp_path / "shards"
    sharded(monkeypatch, capsys, args, shard_dir, 3)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert_same(single, merged, ROWS)
    assert fetch(merged, "SELECT kind, status, n_examples, run_key FROM runs") == fetch(
        single, "SELECT kind, status, n_examples, run_key FROM runs"
    )
    killed = tmp_path / "killed.duckdb"
    out = killed_then_rerun(monkeypatch, capsys, args, killed, WORKER, at=3)  # 4 units of 4 sequences
    assert "resumed" in out and "ICL score" in out
    assert_same(single, killed, ROWS)
    assert fetch(killed, "SELECT status FROM runs") == [("complete",)]


def test_a_rerun_keeps_the_run_and_replace_redoes_it(stored, monkeypatch, capsys, tmp_path):
    args, single = stored
    db = tmp_path / "w.duckdb"
    shutil.copy(single, db)
    first = fetch(db, "SELECT run_id FROM runs")
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(db))
    assert code == 0 and "already complete" in out and "ICL score" in out, err
    assert fetch(db, "SELECT run_id FROM runs") == first
    code, out, err = run(monkeypatch, capsys, *args, "--replace", "--db", str(db))
    assert code == 0, err
    replaced = fetch(db, "SELECT run_id FROM runs")
    assert replaced != first and fetch(db, "SELECT DISTINCT run_id FROM position_losses") == replaced
    assert_same(single, db, ROWS)


def test_the_api_returns_the_run_and_a_short_context_gives_the_curve_alone(lm, tmp_path, monkeypatch, capsys):
    db = tmp_path / "w.duckdb"
    done = api.loss_curve(model=str(lm), context_length=64, limit=3, device="cpu", db=db)
    (summary,) = done.results
    assert isinstance(done, api.Done) and summary.outcome == "complete" and summary.sequences == 3
    assert fetch(db, "SELECT count(*), max(position) FROM position_losses") == [(3 * 63, 63)]
    again = ["ingest", "loss-curve", "--model", str(lm), "--context-length", "64", "--limit", "3", "--device", "cpu"]
    code, out, err = run(monkeypatch, capsys, *again, "--db", str(db))
    assert code == 0 and "already complete" in out and "no ICL score" in out and "--context-length 501" in out, err


def test_bad_models_lengths_and_texts_are_refused_in_one_line(lm, tmp_path, monkeypatch, capsys):
    db = tmp_path / "w.duckdb"
    short = tmp_path / "short.txt"
    short.write_text("Too short for a sequence of five hundred and twenty tokens.\n")
    bert = make_tiny("bert", tmp_path / "bert")
    for model, extra, says in (
        (bert, [], "is an encoder"),
        (lm, ["--context-length", "700"], "reads at most 600 tokens"),
        (lm, ["--text", str(short), "--context-length", "520"], "no sequence of 520 tokens"),
    ):
        code, _, err = run(monkeypatch, capsys, "ingest", "loss-curve", "--model", str(model), *extra, "--db", str(db))
        assert code == 2 and len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, err
    assert not db.exists() or fetch(db, "SELECT count(*) FROM runs") == [(0,)]
