"""`attnwh ingest restriction` on a tiny random Llama with grouped-query attention (2 layers,
4 query heads on 2 key/value groups): the stored ranking and plan equal a float64 reference
with the dropped keys masked before the softmax, each sequence alone; the stored p values and adjusted p values equal
the sign-flip test (enumerated) and scipy's Benjamini–Hochberg recomputed from the stored
per-sequence losses; the KV bytes equal the formula
worked by hand; a rerun keeps the stored run and --replace replaces it; an encoder is refused
in one line; the API's chosen set for a loss budget; the report's section."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from scipy import stats

from attnwh import api
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.sources.examples import Example
from attnwh.ingest.sources.probes import needle_probes
from attnwh.ingest.sources.text import cut_documents, load_sample_text
from attnwh.reports.sections import NoteBlock
from helpers import cli_main, run
from test_restriction import make_lm, reference_logits
from tiny_models import make_tiny

SINKS, WINDOW, CONTEXT, SEQUENCES = 2, 4, 24, 5
GRID = [0, 1, 2, 4]
KV_CONTEXT = 4096
SETTINGS = (
    "--sink-tokens", str(SINKS), "--window", str(WINDOW), "--context-length", str(CONTEXT),
    "--limit", str(SEQUENCES), "--grid", ",".join(map(str, GRID)), "--kv-context", str(KV_CONTEXT),
    "--kv-dtype", "float16", "--needles", "0", "--device", "cpu",
)  # fmt: skip
# A run with needle probes: a tiny Llama that reads 256 positions (its tokenizer spends 130
# tokens on a needle, its question and the answer), 2 probes with the needle mid-haystack.
NEEDLE_CONTEXT, NEEDLES = 160, 2
NEEDLE_GRID = [0, 2, 4]


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    return make_lm("llama", tmp_path_factory.mktemp("restriction-lm"))


@pytest.fixture(scope="module")
def stored(lm, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("restriction-db") / "w.duckdb"
    cli_main("ingest", "restriction", "--model", str(lm), "--db", str(db), *SETTINGS)
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def sequences(tokenizer) -> list[tuple[int, ...]]:
    """The bundled prose, its paragraphs joined, cut into CONTEXT-token sequences: the first few."""
    data = load_sample_text("prose")
    joined = "\n\n".join(doc.text_a for doc in data.examples)
    whole = replace(data, examples=(Example(0, None, joined, None, None),))
    return [e.token_ids for e in cut_documents(whole, tokenizer, CONTEXT).examples][:SEQUENCES]


def test_stored_ranking_and_plan_equal_a_masked_float64_reference(stored, lm, monkeypatch):
    """Every set's loss recomputed with nothing of attnwh: each sequence alone at positions
    0..n-1 through an eager attention written out in float64 with the dropped keys masked
    before the softmax (test_restriction.reference_attention); the stored ranking orders the
    groups by that loss's increase, the plan restricts the k least harmed, and every stored
    loss is the reference's."""
    import test_restriction

    monkeypatch.setattr(test_restriction, "SINKS", SINKS)
    monkeypatch.setattr(test_restriction, "WINDOW", WINDOW)
    encoder = load_model(str(lm), "cpu", language_model=True)
    ids = sequences(encoder.tokenizer)
    width = max(len(s) for s in ids)
    batch = {
        "input_ids": torch.zeros((len(ids), width), dtype=torch.long),
        "attention_mask": torch.zeros((len(ids), width), dtype=torch.long),
    }
    for row, seq in enumerate(ids):
        batch["input_ids"][row, : len(seq)] = torch.tensor(seq)
        batch["attention_mask"][row, : len(seq)] = 1
    tokens = (batch["attention_mask"].sum(-1) - 1).sum().item()

    def loss(chosen: set[tuple[int, int]]) -> float:
        logits = test_restriction.reference_logits(lm, batch, chosen, positions=True)
        return float(test_restriction.reference_nats(logits, batch).sum() / tokens)

    base = loss(set())
    groups = [(layer, group) for layer in range(2) for group in range(2)]
    increase = {g: loss({g}) - base for g in groups}
    ranked = rows(stored, "SELECT layer, kv_group, loss, delta FROM restriction_groups ORDER BY rank")
    assert {(r[0], r[1]) for r in ranked} == set(groups)
    for layer, group, stored_loss, delta in ranked:
        assert stored_loss == pytest.approx(base + increase[(layer, group)], rel=1e-6)
        assert delta == pytest.approx(increase[(layer, group)], abs=1e-6)
    order = sorted(groups, key=lambda g: (increase[g], g))
    assert [(r[0], r[1]) for r in ranked] == order
    assert max(increase.values()) - min(increase.values()) > 1e-3  # the order is no tie-break
    planned = rows(stored, "SELECT k, groups, loss FROM restriction_plan ORDER BY k")
    assert [p[0] for p in planned] == GRID
    for k, chosen, stored_loss in planned:
        assert [(g["layer"], g["kv_group"]) for g in chosen] == sorted(order[:k])
        assert stored_loss == pytest.approx(loss(set(order[:k])), rel=1e-6)


def test_stored_p_values_equal_scipy_on_the_stored_losses(stored):
    losses = rows(stored, "SELECT kind, layer, kv_group, k, sequence, nats, tokens FROM restriction_losses")
    by_set: dict[tuple, dict[int, float]] = {}
    tokens: dict[int, int] = {}
    for kind, layer, group, k, sequence, nats, n in losses:
        by_set.setdefault((kind, layer, group, k), {})[sequence] = nats
        tokens[sequence] = n
    order = sorted(tokens)
    count = np.array([tokens[s] for s in order], dtype=float)
    base = np.array([by_set[("unrestricted", None, None, None)][s] for s in order])

    def expected(key) -> tuple[float, float]:
        diff = np.array([by_set[key][s] for s in order]) - base
        # The sign-flip permutation p of Σ diff, enumerated: 2^n sign vectors (n = 5 < the
        # run's 1000 resamples, so the stored p is exact too).
        signs = np.array(list(itertools.product([1.0, -1.0], repeat=len(diff))))
        p = 1.0 if not diff.any() else np.mean(np.abs(signs @ diff) >= abs(diff.sum()) * (1 - 1e-9))
        return diff.sum() / count.sum(), p

    groups = rows(
        stored,
        "SELECT layer, kv_group, delta, p_value, p_adjusted, ci_low, ci_high FROM restriction_groups ORDER BY layer, kv_group",
    )
    ps = []
    for layer, group, delta, p, _, low, high in groups:
        want_delta, want_p = expected(("group", layer, group, None))
        assert delta == pytest.approx(want_delta, abs=1e-12) and p == pytest.approx(want_p, rel=1e-12)
        assert low <= high
        ps.append(p)
    assert [g[4] for g in groups] == pytest.approx(list(stats.false_discovery_control(ps, method="bh")), rel=1e-12)
    for k, delta, p in rows(stored, "SELECT k, delta, p_value FROM restriction_plan ORDER BY k"):
        want_delta, want_p = expected(("plan", None, None, k))
        assert delta == pytest.approx(want_delta, abs=1e-12) and p == pytest.approx(want_p, rel=1e-12)
    assert len(set(ps)) > 1  # the test looks at real differences, not only ties at p = 1


def test_kv_bytes_equal_the_formula_by_hand(stored, lm):
    config = json.loads((lm / "config.json").read_text())
    d_head = config["hidden_size"] // config["num_attention_heads"]
    layers, kv_heads, value = config["num_hidden_layers"], config["num_key_value_heads"], 2  # float16
    assert (layers, kv_heads) == (2, 2)
    per_group = (KV_CONTEXT - SINKS - WINDOW) * 2 * d_head * value
    per_group_run = (CONTEXT - SINKS - WINDOW) * 2 * d_head * value
    whole, whole_run, dtype = rows(stored, "SELECT kv_bytes, kv_bytes_run, kv_dtype FROM restriction_runs")[0]
    assert (whole, whole_run, dtype) == (
        layers * kv_heads * KV_CONTEXT * 2 * d_head * value,
        layers * kv_heads * CONTEXT * 2 * d_head * value,
        "float16",
    )
    assert {r[0] for r in rows(stored, "SELECT kv_bytes_saved FROM restriction_groups")} == {per_group}
    for k, saved, saved_run in rows(stored, "SELECT k, kv_bytes_saved, kv_bytes_saved_run FROM restriction_plan"):
        assert (saved, saved_run) == (k * per_group, k * per_group_run)


def test_a_rerun_keeps_the_run_and_replace_replaces_it(stored, lm, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(stored, db)
    tables = ("runs", "restriction_runs", "restriction_groups", "restriction_plan", "restriction_losses")

    def counts() -> dict[str, int]:
        return {t: rows(db, f"SELECT count(*) FROM {t}")[0][0] for t in tables}

    before, first = counts(), rows(db, "SELECT run_id FROM runs")
    assert before["restriction_losses"] == (1 + 4 + len(GRID)) * SEQUENCES
    cli_main("ingest", "restriction", "--model", str(lm), "--db", str(db), *SETTINGS)
    assert counts() == before and rows(db, "SELECT run_id FROM runs") == first
    cli_main("ingest", "restriction", "--model", str(lm), "--db", str(db), *SETTINGS, "--replace")
    replaced = rows(db, "SELECT run_id FROM runs")
    assert counts() == before and replaced != first
    assert {r[0] for r in rows(db, "SELECT DISTINCT run_id FROM restriction_losses")} == {replaced[0][0]}


def test_an_encoder_and_a_grid_past_the_groups_are_refused_in_one_line(lm, monkeypatch, capsys, tmp_path):
    bert = make_tiny("bert", tmp_path / "bert")
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, "ingest", "restriction", "--model", str(bert), "--db", str(db))
    assert code != 0 and len(err.strip().splitlines()) == 1 and "is an encoder" in err and "Traceback" not in err
    code, _, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "restriction",
        "--model",
        str(lm),
        "--window",
        "4",
        "--grid",
        "0,9",
        "--db",
        str(db),
    )
    assert code != 0 and len(err.strip().splitlines()) == 1 and "4 key/value groups" in err
    assert not db.exists() or rows(db, "SELECT count(*) FROM runs") == [(0,)]


def test_the_chosen_set_for_a_loss_budget(stored, tmp_path):
    """The largest measured k whose Δ is within the budget, on the stored curve and on a copy
    whose Δ are set by hand (one that is not monotone: the largest k within wins)."""
    wh = api.Warehouse(stored)
    curve = wh.restriction_plan()
    assert curve["k"].to_list() == GRID and (curve["saved_share"] <= 1).all()
    every = {(layer, group) for layer in range(2) for group in range(2)}

    def check(wh: api.Warehouse, budget: float, want: int) -> None:
        chosen = wh.restriction_choice(budget)
        assert chosen.k == want and chosen.delta <= budget
        restricted = set(zip(chosen.restricted["layer"], chosen.restricted["kv_group"], strict=True))
        kept = set(zip(chosen.whole_context["layer"], chosen.whole_context["kv_group"], strict=True))
        assert len(restricted) == want and restricted | kept == every and not restricted & kept
        ranked = rows(wh.path, "SELECT layer, kv_group FROM restriction_groups ORDER BY rank")
        assert restricted == set(ranked[:want])

    for budget in sorted({max(0.0, d) for d in curve["delta"].to_list()}):
        check(wh, budget, max(k for k, d in zip(curve["k"], curve["delta"], strict=True) if d <= budget))
    db = tmp_path / "w.duckdb"
    shutil.copy(stored, db)
    with duckdb.connect(str(db)) as con:
        for k, delta in ((1, 0.01), (2, 0.5), (4, 0.03)):
            con.execute("UPDATE restriction_plan SET delta = ? WHERE k = ?", [delta, k])
    edited = api.Warehouse(db)
    for budget, want in ((0.0, 0), (0.005, 0), (0.02, 1), (0.03, 4), (0.4, 4), (1.0, 4)):
        check(edited, budget, want)
    with pytest.raises(api.UsageError, match="loss budget"):
        wh.restriction_choice(-1.0)
    with pytest.raises(api.UsageError, match="no restriction run"):
        wh.restriction_choice(0.1, run=999)


def test_the_report_draws_the_curve_and_the_groups(stored, lm, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(stored, db)
    cli_main("ingest", "--model", str(lm), "--task", "prose", "--limit", "2", "--max-length", "32", "--db", str(db))
    page = api.Warehouse(db).build_report()
    ids = [block.id for section in page.sections for block in section.blocks]
    assert "chart-restriction-curve" in ids and "table-whole-context" in ids
    spec = json.dumps(next(b for s in page.sections for b in s.blocks if b.id == "chart-restriction-curve").spec())
    assert "whole context everywhere" in spec and "all 4 groups restricted" in spec
    # The run read no needles: their chart is a sentence saying so.
    needles = next(b for s in page.sections for b in s.blocks if b.id == "chart-restriction-needles")
    assert isinstance(needles, NoteBlock) and "--needles 0" in needles.text


def test_needle_accuracy_and_loss_of_each_set_equal_the_masked_reference(tmp_path):
    """Each plan set's and each group's needle accuracy (greedy hits on the answer) and answer
    loss change equal the masked-before-softmax reference model's on the same probes; the
    unrestricted accuracy equals plain transformers' eager model's; the rows add up."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = make_lm("llama", tmp_path, positions=256)
    db = tmp_path / "w.duckdb"
    cli_main(
        "ingest", "restriction", "--model", str(lm), "--db", str(db), "--sink-tokens", str(SINKS),
        "--window", str(WINDOW), "--context-length", str(NEEDLE_CONTEXT), "--limit", "2",
        "--grid", ",".join(map(str, NEEDLE_GRID)), "--needles", str(NEEDLES), "--depths", "0.5", "--device", "cpu",
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(lm)
    paragraphs = [e.text_a for e in load_sample_text("prose").examples]
    probes = needle_probes(tokenizer, paragraphs, NEEDLES, NEEDLE_CONTEXT, (0.5,), 42)
    batch = {"input_ids": torch.tensor([p.token_ids for p in probes])}
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    # Token t of an answer is predicted at t − 1.
    answer = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    for row, probe in enumerate(probes):
        answer[row, list(probe.span("answer"))] = True
    scored, targets = answer[:, 1:], batch["input_ids"][:, 1:]

    def reference(logits: torch.Tensor) -> tuple[float, float]:
        """Accuracy and loss (nats per token) on the answers."""
        hits = (logits[:, :-1].argmax(-1) == targets) & scored
        nats = torch.nn.functional.cross_entropy(logits[:, :-1].double().transpose(1, 2), targets, reduction="none")
        return float(hits.sum() / scored.sum()), float((nats * scored).sum() / scored.sum())

    (run,) = rows(
        db, "SELECT needles, needle_tokens, needle_accuracy, needle_loss, needle_depths FROM restriction_runs"
    )
    assert run[0] == NEEDLES and run[1] == int(scored.sum()) and run[4] == [0.5]
    with torch.no_grad():
        plain = AutoModelForCausalLM.from_pretrained(lm, attn_implementation="eager")(**batch).logits
    accuracy, loss = reference(plain)
    assert run[2] == pytest.approx(accuracy, abs=1e-12) and run[3] == pytest.approx(loss, rel=1e-6)
    plan_rows = rows(db, "SELECT k, groups, needle_accuracy, needle_delta FROM restriction_plan ORDER BY k")
    group_rows = rows(db, "SELECT layer, kv_group, needle_accuracy, needle_delta FROM restriction_groups")
    sets = [({(g["layer"], g["kv_group"]) for g in p[1]}, p[2], p[3]) for p in plan_rows]
    sets += [({(g[0], g[1])}, g[2], g[3]) for g in group_rows]
    deltas = []
    for restricted, stored_accuracy, stored_delta in sets:
        accuracy, restricted_loss = reference(reference_logits(lm, batch, restricted, positions=True))
        assert stored_accuracy == pytest.approx(accuracy, abs=1e-12), restricted
        assert stored_delta == pytest.approx(restricted_loss - loss, abs=1e-5), restricted
        deltas.append(stored_delta)
    assert max(abs(d) for d in deltas) > 1e-3  # the restrictions reach the answers
    summed = rows(
        db,
        "SELECT k, sum(correct) / sum(tokens), count(*) FROM restriction_losses "
        "WHERE input = 'needle' AND kind = 'plan' GROUP BY k ORDER BY k",
    )
    assert [(k, n) for k, _, n in summed] == [(k, NEEDLES) for k in NEEDLE_GRID]
    assert [a for _, a, _ in summed] == pytest.approx([p[2] for p in plan_rows], abs=1e-12)
    assert rows(db, "SELECT count(*) FROM restriction_losses WHERE input = 'text'") == [((1 + 4 + 3) * 2,)]
    assert api.Warehouse(db).restriction_choice(10.0).needle_accuracy == plan_rows[-1][2]


@pytest.mark.parametrize(("n", "tested"), [(2, False), (6, True)])
def test_intervals_are_printed_only_where_a_test_can_find_a_change(lm, monkeypatch, capsys, tmp_path, n, tested):
    """Two sequences: a sign-flip test cannot go below p = 0.5, and a bootstrap of two pairs
    gives intervals that exclude 0 all the same; the table says the sequences are too few
    instead of showing one. Six: p can reach 0.03, and the intervals are shown. Printed to a
    file (not a terminal, COLUMNS unset), the table is as wide as it is, not cut at 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    settings = list(SETTINGS)
    settings[settings.index("--limit") + 1] = str(n)
    code, out, err = run(
        monkeypatch, capsys, "ingest", "restriction", "--model", str(lm), "--db", str(tmp_path / "w.duckdb"), *settings
    )
    assert code == 0, err
    assert ("too few for any test" in out) is not tested, out
    assert ("[+" in out or "[-" in out) is tested, out
    header = next(line for line in out.splitlines() if "Δ loss" in line)
    assert "95 % interval" in header and "of the cache" in header, out
    assert max(len(line) for line in out.splitlines()) > 80


def test_the_curves_axis_labels_stay_apart():
    """SmolLM2's plan at 32,768 tokens saves up to 717 MiB: ticks every 50 MiB, whose last two
    labels ran together ("750800") when the last was pushed to the axis's end. Every label of
    the drawn x axis keeps clear of the next (digits are at most 0.6 em wide)."""
    import re

    import polars as pl
    import vl_convert

    from attnwh.reports.restriction_charts import restriction_curve

    ks = list(range(0, 91, 9))
    delta = [0.0, -0.023, -0.027, -0.015, -0.011, -0.006, 0.009, 0.04, 0.081, 0.125, 0.14]
    frame = pl.DataFrame(
        {
            "model": ["SmolLM2"] * 11, "run_id": [5] * 11, "k": ks, "n_groups": [90] * 11, "delta": delta,
            "ci_low": [d - 0.01 for d in delta], "ci_high": [d + 0.01 for d in delta],
            "needle_accuracy": [None] * 11, "needles": [0] * 11, "kv_context": [32768] * 11,
            "kv_bytes_saved": [round(k / 90 * 717 * 2**20) for k in ks], "saved_share": [k / 90 for k in ks],
        }
    )  # fmt: skip
    svg = vl_convert.vegalite_to_svg(restriction_curve(frame).to_json())
    x_axis = svg[svg.index("role-axis-label") :].split("</g>")[0]  # the first axis drawn: x
    labels = re.findall(
        r'<text text-anchor="(\w+)" transform="translate\(([\d.]+),[\d.]+\)"[^>]*font-size="(\d+)px"[^>]*>([^<]+)<',
        x_axis,
    )
    assert len(labels) >= 5, x_axis[:500]
    extents = []
    for anchor, at, size, text in labels:
        width, x = 0.6 * float(size) * len(text), float(at)
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        extents.append((left, left + width, text))
    for (_, right, a), (left, _, b) in zip(extents, extents[1:]):
        assert left - right >= 2, (a, b, extents)
