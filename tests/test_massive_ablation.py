"""`attnwh ingest massive-ablation` (Sun et al. 2024, §3) on a tiny random Llama: one with a
massive activation planted (the first token's dimension 5 made huge through the BOS
embedding, so it is there from layer 0's output on, the same in every sequence) at the paper's
thresholds, and the plain model at thresholds lowered until a few entries of each layer count.
The stored entries, sites and per-sequence losses equal an independent reference: plain
transformers (eager), its own numpy scan with np.median, each sequence alone, the entries
overwritten by a hook written here. The mean leaves the planted model's loss as it is and zero
moves it; the stored p and interval agree with scipy's; a rerun keeps the run and --replace
replaces it; the refusals are one line (exit 2) with nothing stored."""

from __future__ import annotations

import shutil
import unicodedata
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from scipy import stats
from transformers import AutoModelForCausalLM, AutoTokenizer

from attnwh import api
from attnwh.ingest.sources.examples import Example
from attnwh.ingest.sources.text import cut_documents, load_sample_text
from helpers import cli_main, run
from test_restriction import make_lm
from tiny_models import make_tiny

CONTEXT, SEQUENCES = 24, 6
PLANTED_DIM, PLANTED_VALUE = 5, 500.0
SETTINGS = ("--context-length", str(CONTEXT), "--limit", str(SEQUENCES), "--device", "cpu")
# Thresholds under which the plain tiny Llama (|h| at most about 0.1) has a few entries per layer.
LOWERED = ("--min-magnitude", "0.01", "--ratio", "4", "--min-share", "0.3")
THRESHOLDS = {"planted": (100.0, 1000.0, 0.5), "lowered": (0.01, 4.0, 0.3)}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("massive-ablation")
    plain = make_lm("llama", folder)
    model = AutoModelForCausalLM.from_pretrained(plain)
    with torch.no_grad():  # seeded by make_lm; the planted value added to every sequence's BOS
        model.model.embed_tokens.weight[model.config.bos_token_id, PLANTED_DIM] = PLANTED_VALUE
    planted = folder / "planted"
    model.save_pretrained(planted)
    AutoTokenizer.from_pretrained(plain).save_pretrained(planted)
    return {"planted": planted, "lowered": plain}


@pytest.fixture(scope="module")
def stored(models, tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, extra in (("planted", ()), ("lowered", LOWERED)):
        db = tmp_path_factory.mktemp(f"ma-{name}") / "w.duckdb"
        cli_main("ingest", "massive-ablation", "--model", str(models[name]), "--db", str(db), *SETTINGS, *extra)
        out[name] = db
    return out


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def sequences(tokenizer) -> list[tuple[int, ...]]:
    """The bundled prose, its paragraphs joined, cut into CONTEXT-token sequences: the first few."""
    data = load_sample_text("prose")
    joined = "\n\n".join(doc.text_a for doc in data.examples)
    whole = replace(data, examples=(Example(0, None, joined, None, None),))
    return [e.token_ids for e in cut_documents(whole, tokenizer, CONTEXT).examples][:SEQUENCES]


def kind_of(tokenizer, ids: tuple[int, ...], position: int) -> str:
    if position == 0:
        return "first token"
    text = "" if ids[position] in tokenizer.all_special_ids else tokenizer.decode([ids[position]]).strip()
    return "punctuation" if text and all(unicodedata.category(c).startswith("P") for c in text) else "other"


def layer_outputs(model, ids: tuple[int, ...], overwrite: dict[int, list[tuple[int, int, float]]] | None = None):
    """Every layer's output for one sequence alone, and its logits; `overwrite[layer]` sets
    (position, dim) to a value in that layer's output first."""
    outputs: list[np.ndarray] = []

    def hook(layer: int, output):
        hidden = output if isinstance(output, torch.Tensor) else output[0]
        for position, dim, value in (overwrite or {}).get(layer, []):
            hidden = hidden.clone()
            hidden[0, position, dim] = value
        outputs.append(hidden[0].numpy().copy())
        return hidden if isinstance(output, torch.Tensor) else (hidden, *output[1:])

    hooks = [m.register_forward_hook(lambda m, a, o, i=i: hook(i, o)) for i, m in enumerate(model.model.layers)]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
    finally:
        for h in hooks:
            h.remove()
    return outputs, logits


def reference(model_dir: Path, min_magnitude: float, ratio: float, share: float):
    """The run written out plainly: (entries {(layer, dim, kind): (mean, sequences, sites)},
    sites {(sequence, layer, dim, position): value}, nats {(intervention, sequence): nats/token})."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    ids = sequences(tokenizer)
    found: dict[tuple[int, int, str], dict[int, list[tuple[int, float]]]] = {}
    for s, seq in enumerate(ids):
        for layer, h in enumerate(layer_outputs(model, seq)[0]):
            magnitude = np.abs(h.astype(np.float32))
            median = np.median(magnitude)
            for p, d in zip(*np.nonzero((magnitude > min_magnitude) & (magnitude > ratio * median)), strict=True):
                found.setdefault((layer, int(d), kind_of(tokenizer, seq, int(p))), {}).setdefault(s, []).append(
                    (int(p), float(h[p, d]))
                )
    first: dict[tuple[int, str], int] = {}
    for (layer, dim, kind), where in sorted(found.items()):
        if len(where) >= share * len(ids) and (dim, kind) not in first:
            first[(dim, kind)] = layer
    entries, sites = {}, {}
    for (dim, kind), layer in first.items():
        where = found[(layer, dim, kind)]
        values = [v for s in where for _, v in where[s]]
        entries[(layer, dim, kind)] = (float(np.mean(values)), len(where), len(values))
        for s, at in where.items():
            sites |= {(s, layer, dim, p): v for p, v in at}
    nats = {}
    for s, seq in enumerate(ids):
        targets = torch.tensor(seq[1:])
        for name in ("none", "zero", "mean"):
            overwrite: dict[int, list[tuple[int, int, float]]] = {}
            if name != "none":
                for (sequence, layer, dim, p), _ in sites.items():
                    if sequence == s:
                        mean = next(m for (la, d, _), (m, _, _) in entries.items() if (la, d) == (layer, dim))
                        overwrite.setdefault(layer, []).append((p, dim, 0.0 if name == "zero" else mean))
            logits = layer_outputs(model, seq, overwrite)[1]
            logp = torch.log_softmax(logits[:-1].double(), -1)
            nats[(name, s)] = float(-logp[torch.arange(len(targets)), targets].mean())
    return entries, sites, nats


@pytest.mark.parametrize("case", ["planted", "lowered"])
def test_stored_entries_sites_and_losses_equal_an_eager_reference(models, stored, case):
    entries, sites, nats = reference(models[case], *THRESHOLDS[case])
    db = stored[case]
    got = rows(db, "SELECT layer, dim, token_kind, mean_value, sequences, sites FROM massive_ablation_entries")
    assert {(r[0], r[1], r[2]) for r in got} == set(entries)
    for layer, dim, kind, mean, n, count in got:
        want_mean, want_n, want_count = entries[(layer, dim, kind)]
        assert mean == pytest.approx(want_mean, rel=1e-5, abs=1e-7) and (n, count) == (want_n, want_count)
    got_sites = {
        (r[0], r[1], r[2], r[3]): r[4]
        for r in rows(db, "SELECT sequence, layer, dim, position, value FROM massive_ablation_sites")
    }
    assert set(got_sites) == set(sites)
    for key, value in got_sites.items():
        assert value == pytest.approx(sites[key], rel=1e-5, abs=1e-7)
    losses = rows(db, "SELECT intervention, sequence, nats / tokens FROM massive_ablation_losses")
    assert len(losses) == 3 * SEQUENCES
    for name, s, loss in losses:
        assert loss == pytest.approx(nats[(name, s)], abs=1e-5), (name, s)
    if case == "planted":  # one entry: where it was put, in every sequence, at the first token
        assert list(entries) == [(0, PLANTED_DIM, "first token")] and entries[(0, PLANTED_DIM, "first token")][1:] == (
            SEQUENCES,
            SEQUENCES,
        )
    else:  # several, on more than one layer and position: the choice of layer and the sites are tested
        assert len(entries) >= 3 and len({k[0] for k in entries}) == 2 and len({k[3] for k in sites}) > 2


def test_on_the_planted_model_the_mean_keeps_the_loss_and_zero_moves_it(stored):
    """The planted value is the same in every sequence, so its mean is that value and writing
    it changes nothing; zero removes it from the residual stream from layer 0 on."""
    results = {
        r[0]: r[1:]
        for r in rows(stored["planted"], "SELECT intervention, loss, delta, p_value FROM massive_ablation_results")
    }
    assert set(results) == {"none", "zero", "mean"}
    assert abs(results["mean"][1]) < 1e-9 and results["mean"][2] == 1.0
    assert abs(results["zero"][1]) > 1e-3
    mean_value = rows(stored["planted"], "SELECT mean_value FROM massive_ablation_entries")[0][0]
    assert mean_value == pytest.approx(PLANTED_VALUE, rel=1e-3)


def test_the_named_query_and_the_api(stored, models, tmp_path):
    frame = api.Warehouse(stored["planted"]).query("massive_ablation")
    assert frame["intervention"].to_list() == ["none", "zero", "mean"]
    assert frame["perplexity"].to_list() == pytest.approx(np.exp(frame["loss"].to_numpy()).tolist(), rel=1e-12)
    assert set(frame["sequences"].to_list()) == {SEQUENCES} and set(frame["entries"].to_list()) == {1}
    assert frame["delta"][0] == 0.0 and frame["ci_low"][0] is None
    db = tmp_path / "w.duckdb"
    shutil.copy(stored["planted"], db)
    done = api.massive_ablation(
        model=str(models["planted"]), db=db, context_length=CONTEXT, limit=SEQUENCES, device="cpu"
    )
    assert isinstance(done, api.Done) and done.results[0].outcome == "already complete"


def test_the_stored_p_and_interval_agree_with_scipy(stored):
    """From the stored per-sequence losses: the p of a paired sign-flip test of Σ (nats − nats_none)
    is scipy's exact permutation_test (2^6 sign vectors, fewer than the run's 1000 resamples),
    and the interval is scipy's paired percentile bootstrap of Σ diff / Σ tokens, within the
    noise of resampling."""
    for db in stored.values():
        losses = rows(db, "SELECT intervention, sequence, nats, tokens FROM massive_ablation_losses ORDER BY sequence")
        by = {name: np.array([r[2] for r in losses if r[0] == name]) for name in ("none", "zero", "mean")}
        tokens = np.array([r[3] for r in losses if r[0] == "none"], dtype=float)
        for name, delta, low, high, p in rows(
            db,
            "SELECT intervention, delta, ci_low, ci_high, p_value FROM massive_ablation_results WHERE intervention <> 'none'",
        ):
            diff = by[name] - by["none"]
            assert delta == pytest.approx(diff.sum() / tokens.sum(), abs=1e-12)
            if not diff.any():
                assert p == 1.0 and low == high == 0.0
                continue
            exact = stats.permutation_test(
                (by[name] / tokens.sum(), by["none"] / tokens.sum()),
                lambda x, y, axis=-1: np.sum(x - y, axis=axis),
                permutation_type="samples",
                vectorized=True,
                n_resamples=np.inf,
            )
            assert p == pytest.approx(exact.pvalue, rel=1e-9)
            boot = stats.bootstrap(
                (diff, tokens),
                lambda d, t, axis=-1: d.sum(axis=axis) / t.sum(axis=axis),
                paired=True,
                vectorized=True,
                method="percentile",
                n_resamples=20000,
                rng=np.random.default_rng(1),
            )
            width = boot.confidence_interval.high - boot.confidence_interval.low
            assert low == pytest.approx(boot.confidence_interval.low, abs=0.25 * width)
            assert high == pytest.approx(boot.confidence_interval.high, abs=0.25 * width)


def test_a_rerun_keeps_the_run_and_replace_replaces_it(stored, models, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(stored["planted"], db)
    tables = ("runs", *(f"massive_ablation_{t}" for t in ("runs", "entries", "sites", "losses", "results")))

    def counts() -> dict[str, int]:
        return {t: rows(db, f"SELECT count(*) FROM {t}")[0][0] for t in tables}

    before, first = counts(), rows(db, "SELECT run_id, status, kind FROM runs")
    assert first[0][1:] == ("complete", "massive_ablation")
    args = ("ingest", "massive-ablation", "--model", str(models["planted"]), "--db", str(db), *SETTINGS)
    cli_main(*args)
    assert counts() == before and rows(db, "SELECT run_id, status, kind FROM runs") == first
    cli_main(*args, "--replace")
    replaced = rows(db, "SELECT run_id FROM runs")
    assert counts() == before and replaced[0][0] != first[0][0]
    assert {r[0] for r in rows(db, "SELECT DISTINCT run_id FROM massive_ablation_losses")} == {replaced[0][0]}


def test_refusals_are_one_line_with_nothing_stored(models, monkeypatch, capsys, tmp_path):
    bert = make_tiny("bert", tmp_path / "bert")
    short = tmp_path / "short.txt"
    short.write_text("A short text.", encoding="utf-8")
    cases = [
        (["--model", str(bert)], "is an encoder"),
        (["--model", str(models["lowered"]), *SETTINGS], "no massive activation at the thresholds"),
        (["--model", str(models["lowered"]), "--context-length", "65", "--device", "cpu"], "reads at most 64 tokens"),
        (["--model", str(models["planted"]), "--text", str(short), "--device", "cpu"], "at least 2 are needed"),
    ]
    for args, message in cases:
        db = tmp_path / "w.duckdb"
        code, _, err = run(monkeypatch, capsys, "ingest", "massive-ablation", "--db", str(db), *args)
        # The refusals before the scan are all stderr says; the scan's (no massive activation)
        # follows the line on the model and the scan's bar.
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("attnwh: error:")]
        assert code == 2 and errors == lines[-1:] and message in errors[0] and "Traceback" not in err, err
        assert len(lines) == 1 or message.startswith("no massive"), err
        assert not db.exists() or rows(db, "SELECT count(*) FROM runs") == [(0,)]


def test_the_command_prints_a_line_per_intervention(models, stored, monkeypatch, capsys, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(stored["planted"], db)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run(
        monkeypatch, capsys, "ingest", "massive-ablation", "--model", str(models["planted"]), "--db", str(db), *SETTINGS
    )
    assert code == 0, err
    assert "dim 5 on the first token from layer 0" in out and "already complete" in out
    for label in ("as it is", "set to zero", "set to their mean"):
        assert label in out
