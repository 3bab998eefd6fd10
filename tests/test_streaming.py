"""`attnwh ingest streaming` (StreamingLLM's experiment) on a tiny random Llama with grouped-query
attention (2 layers, 4 query heads on 2 key/value groups): every stored loss, per sequence,
setting and bucket of positions, equals a plain eager transformers forward pass of the sequence
alone with an explicit additive attention mask that hides exactly the evicted keys (written
here, nothing of attnwh); with S + W ≥ L nothing changes; the named query's Δ, interval and p
equal scipy's on the stored losses; a run stopped midway resumes to the rows of an unbroken
one, a rerun keeps it and --replace replaces it; static shards merged and finished give the
same rows; the refusals are one line and write nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from scipy import stats
from transformers import AutoModelForCausalLM, AutoTokenizer

from attnwh import api
from attnwh.errors import AttnwhError
from attnwh.ingest.measures.streaming import position_edges, streaming_loss
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs import streaming as runs_of
from attnwh.ingest.runs.restriction import read_text
from helpers import cli_main, run
from test_restriction import make_lm
from tiny_models import make_tiny

SINKS, WINDOW, LENGTHS, LIMIT = (0, 1, 2), 8, (24, 40), 6
SETTINGS = (
    "--sink-tokens", ",".join(map(str, SINKS)), "--window", str(WINDOW),
    "--context-lengths", ",".join(map(str, LENGTHS)), "--limit", str(LIMIT), "--batch-size", "4", "--device", "cpu",
)  # fmt: skip
LOSS_ROWS = (
    "SELECT example_id, context_length, sequence, sinks, position_from, position_to, nats, tokens "
    "FROM streaming_losses ORDER BY ALL"
)
RESULT_ROWS = "SELECT * EXCLUDE (run_id) FROM streaming_results ORDER BY ALL"


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    return make_lm("llama", tmp_path_factory.mktemp("streaming-lm"))


@pytest.fixture(scope="module")
def stored(lm, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("streaming-db") / "w.duckdb"
    cli_main("ingest", "streaming", "--model", str(lm), "--db", str(db), *SETTINGS)
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def evicting_mask(length: int, sinks: int | None, window: int) -> torch.Tensor:
    """(1, 1, L, L) additive mask: 0 where query i may read key j — j ≤ i and, under S sinks,
    j < S or i − j < W — and the dtype's lowest value elsewhere (causal only for None)."""
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    visible = j <= i
    if sinks is not None:
        visible &= (j < sinks) | (i - j < window)
    mask = torch.zeros(length, length).masked_fill(~visible, torch.finfo(torch.float32).min)
    return mask[None, None]


def eager_token_nats(model, ids: tuple[int, ...], sinks: int | None, window: int) -> np.ndarray:
    """Per query position i, the cross-entropy of token i + 1 (nats), from transformers' own
    eager forward pass with the mask of :func:`evicting_mask` (every head, every layer)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=x, attention_mask=evicting_mask(len(ids), sinks, window), use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits[0, :-1].double(), x[0, 1:], reduction="none").numpy()


def test_stored_losses_equal_an_eager_pass_with_the_evicted_keys_masked(stored, lm):
    model = AutoModelForCausalLM.from_pretrained(lm, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(lm)
    options = runs_of.StreamingOptions(sinks=SINKS, window=WINDOW, context_lengths=LENGTHS, limit=LIMIT)
    text = runs_of.cut_lengths(read_text(None), tokenizer, options)
    found = rows(stored, LOSS_ROWS)
    assert len(found) == sum(
        LIMIT * (1 + len(SINKS)) * (len(position_edges(n, WINDOW)) - 1) for n in LENGTHS
    )  # every sequence, setting and bucket once
    by = {(r[1], r[2], r[3], r[4]): r for r in found}
    changed = 0.0
    for length in LENGTHS:
        edges = position_edges(length, WINDOW)
        assert edges == ((0, 8, 16, 23) if length == 24 else (0, 8, 16, 32, 39))
        assert len(text.sequences[length]) == LIMIT
        for sequence, ids in enumerate(text.sequences[length]):
            assert len(ids) == length
            plain = eager_token_nats(model, ids, None, WINDOW)
            for sinks in (None, *SINKS):
                nats = eager_token_nats(model, ids, sinks, WINDOW)
                for lo, hi in zip(edges, edges[1:]):
                    row = by[(length, sequence, sinks, lo)]
                    assert row[5] == hi and row[7] == hi - lo
                    assert row[6] == pytest.approx(nats[lo:hi].sum(), abs=1e-5), (length, sequence, sinks, lo)
                if sinks is not None:
                    # Below S + W no key is evicted: the same as the model as it is.
                    np.testing.assert_allclose(nats[: sinks + WINDOW], plain[: sinks + WINDOW], atol=1e-5)
                    changed = max(changed, abs(nats.sum() - plain.sum()))
    assert changed > 1e-2  # the eviction reaches the loss: the comparison is not of equal numbers


def test_nothing_changes_where_sinks_and_window_cover_the_sequence(lm):
    encoder = load_model(str(lm), "cpu", language_model=True)
    ids = torch.tensor([list(range(5, 35)), list(range(40, 70))])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    for sinks, window in ((0, 30), (2, 28), (4, 60)):
        loss = streaming_loss(encoder.model, batch, [sinks], window, position_edges(30, window))
        assert np.array_equal(loss.nats[1], loss.nats[0]), (sinks, window)
    shorter = streaming_loss(encoder.model, batch, [0], 8, position_edges(30, 8))
    assert not np.array_equal(shorter.nats[1], shorter.nats[0])
    assert np.array_equal(shorter.nats[1][:, 0], shorter.nats[0][:, 0])  # queries below W: bit for bit


def test_the_named_query_equals_scipy_on_the_stored_losses(stored):
    summed = rows(
        stored,
        "SELECT context_length, sinks, sequence, sum(nats), sum(tokens) FROM streaming_losses GROUP BY ALL ORDER BY ALL",
    )
    by = {(r[0], r[1], r[2]): (r[3], r[4]) for r in summed}
    found = api.Warehouse(stored).query("streaming_loss")
    assert found.height == len(LENGTHS) * len(SINKS)
    for row in found.iter_rows(named=True):
        length, sinks = row["context_length"], row["sinks"]
        order = range(LIMIT)
        tokens = np.array([by[(length, None, s)][1] for s in order], dtype=float)
        base = np.array([by[(length, None, s)][0] for s in order])
        nats = np.array([by[(length, sinks, s)][0] for s in order])
        assert row["baseline_loss"] == pytest.approx(base.sum() / tokens.sum(), rel=1e-12)
        assert row["loss"] == pytest.approx(nats.sum() / tokens.sum(), rel=1e-12)
        assert row["perplexity"] == pytest.approx(np.exp(nats.sum() / tokens.sum()), rel=1e-12)
        assert row["baseline_perplexity"] == pytest.approx(np.exp(base.sum() / tokens.sum()), rel=1e-12)
        assert (row["sequences"], row["tokens"], row["window"]) == (LIMIT, LIMIT * (length - 1), WINDOW)
        pairs = [("", base)] + ([("versus_", np.array([by[(length, 0, s)][0] for s in order]))] if sinks else [])
        if not sinks:
            assert row["versus_sinks"] is None and row["versus_delta"] is None and row["versus_p_value"] is None
        for prefix, other in pairs:
            diff = nats - other
            assert row[f"{prefix}delta"] == pytest.approx(diff.sum() / tokens.sum(), abs=1e-12)
            # 2^6 sign vectors: scipy enumerates them all, as the stored p (1000 resamples ≥ 64) did.
            exact = stats.permutation_test(
                (nats / tokens.sum(), other / tokens.sum()),
                lambda x, y, axis=-1: np.sum(x - y, axis=axis),
                permutation_type="samples",
                vectorized=True,
                n_resamples=np.inf,
                alternative="two-sided",
            )
            assert row[f"{prefix}p_value"] == pytest.approx(exact.pvalue, rel=1e-9)
            # The percentile bootstrap of Σ diff / Σ tokens over sequences, scipy's own resamples:
            # the stored interval (1000 resamples, seed 0) agrees within resampling noise.
            boot = stats.bootstrap(
                (diff, tokens),
                lambda d, t, axis=-1: d.sum(axis) / t.sum(axis),
                paired=True,
                vectorized=True,
                n_resamples=20000,
                method="percentile",
                rng=np.random.default_rng(1),
            )
            low, high = boot.confidence_interval
            width = high - low
            assert row[f"{prefix}ci_low"] == pytest.approx(low, abs=0.15 * width)
            assert row[f"{prefix}ci_high"] == pytest.approx(high, abs=0.15 * width)
            assert row[f"{prefix}ci_low"] <= row[f"{prefix}delta"] <= row[f"{prefix}ci_high"]


def test_by_position_adds_up_to_the_whole_and_is_zero_before_the_window(stored):
    found = api.Warehouse(stored).query("streaming_by_position")
    assert set(found["position_from"].to_list()) == {0, 8, 16, 32}
    first = found.filter(found["position_from"] == 0)
    assert first["delta"].abs().max() < 1e-12  # queries below W evict nothing
    whole = api.Warehouse(stored).query("streaming_loss")
    for row in whole.iter_rows(named=True):
        part = found.filter((found["context_length"] == row["context_length"]) & (found["sinks"] == row["sinks"]))
        assert (part["loss"] * part["tokens"]).sum() / part["tokens"].sum() == pytest.approx(row["loss"], rel=1e-12)


def test_an_interrupted_run_resumes_a_rerun_keeps_it_and_replace_replaces_it(stored, lm, tmp_path, monkeypatch):
    db = tmp_path / "w.duckdb"
    original = runs_of.StreamingWorker.compute
    calls = []

    def stopping(self, unit):
        calls.append(unit.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, unit)

    monkeypatch.setattr(runs_of.StreamingWorker, "compute", stopping)
    with pytest.raises((KeyboardInterrupt, AttnwhError)):
        api.streaming(model=str(lm), db=db, **_options())
    assert rows(db, "SELECT status FROM runs") == [("interrupted",)]
    assert 0 < rows(db, "SELECT count(*) FROM run_examples")[0][0] < LIMIT * len(LENGTHS)
    assert rows(db, "SELECT count(*) FROM streaming_results") == [(0,)]
    monkeypatch.setattr(runs_of.StreamingWorker, "compute", original)
    done = api.streaming(model=str(lm), db=db, **_options())
    assert done.results[0].outcome == "resumed"
    assert rows(db, LOSS_ROWS) == rows(stored, LOSS_ROWS)  # none twice, none missing
    assert rows(db, RESULT_ROWS) == rows(stored, RESULT_ROWS)
    first = rows(db, "SELECT run_id, status FROM runs")
    assert api.streaming(model=str(lm), db=db, **_options()).results[0].outcome == "already complete"
    assert rows(db, "SELECT run_id, status FROM runs") == first and rows(db, LOSS_ROWS) == rows(stored, LOSS_ROWS)
    again = api.streaming(model=str(lm), db=db, replace=True, **_options())
    assert again.results[0].outcome == "replaced" and rows(db, "SELECT run_id FROM runs") != [first[0][:1]]
    assert rows(db, LOSS_ROWS) == rows(stored, LOSS_ROWS)
    assert rows(db, "SELECT count(DISTINCT run_id) FROM streaming_losses") == [(1,)]


def _options() -> dict:
    return {
        "sink_tokens": ",".join(map(str, SINKS)),
        "window": WINDOW,
        "context_lengths": ",".join(map(str, LENGTHS)),
        "limit": LIMIT,
        "batch_size": 4,
        "device": "cpu",
    }


def test_static_shards_merged_and_finished_give_the_same_rows(stored, lm, tmp_path, monkeypatch, capsys):
    db, shards = tmp_path / "w.duckdb", tmp_path / "shards"
    for index in (1, 2):
        code, _, err = run(
            monkeypatch, capsys, "ingest", "streaming", "--model", str(lm), *SETTINGS,
            "--shard", f"{index}/2", "--shard-dir", str(shards),
        )  # fmt: skip
        assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "merge", str(shards), "--db", str(db))
    assert code == 0, err
    assert "finish it (the tests)" in out and rows(db, "SELECT status FROM runs") == [("partial",)]
    code, out, err = run(monkeypatch, capsys, "ingest", "streaming", "--model", str(lm), *SETTINGS, "--db", str(db))
    assert code == 0, err
    assert rows(db, "SELECT status FROM runs") == [("complete",)]
    assert rows(db, LOSS_ROWS) == rows(stored, LOSS_ROWS) and rows(db, RESULT_ROWS) == rows(stored, RESULT_ROWS)


def test_the_table_shows_each_length_and_sinks(stored, lm, monkeypatch, capsys, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(stored, db)
    code, out, err = run(monkeypatch, capsys, "ingest", "streaming", "--model", str(lm), *SETTINGS, "--db", str(db))
    assert code == 0, err
    assert "already complete" in out and "Δ vs S=0" in out and ("[+" in out or "[-" in out)
    lines = out.splitlines()
    assert sum(1 for line in lines if "│ all │" in line) == len(LENGTHS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--context-lengths", "24,80"), "reads at most 64 tokens"),
        (("--context-lengths", "10,24"), "not longer than --sink-tokens + --window (10)"),
        (("--sink-tokens", "0,x"), "give whole numbers"),
        (("--text", "SHORT"), "makes no sequence of 24 tokens"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(lm, monkeypatch, capsys, tmp_path, args, message):
    short = tmp_path / "short.txt"
    short.write_text("A short text of a few words.\n")
    args = tuple(str(short) if a == "SHORT" else a for a in args)
    db = tmp_path / "w.duckdb"
    chosen = dict(zip(SETTINGS[::2], SETTINGS[1::2], strict=True)) | dict(zip(args[::2], args[1::2], strict=True))
    settings = [word for pair in chosen.items() for word in pair]
    code, _, err = run(monkeypatch, capsys, "ingest", "streaming", "--model", str(lm), "--db", str(db), *settings)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not db.exists() or rows(db, "SELECT count(*) FROM runs") == [(0,)]


def test_an_encoder_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    bert = make_tiny("bert", tmp_path / "bert")
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, "ingest", "streaming", "--model", str(bert), "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is an encoder" in err and "Traceback" not in err
    assert not db.exists() or rows(db, "SELECT count(*) FROM runs") == [(0,)]
