"""The ablation sweep scored by next-token loss (`attnwh ingest ablation` on plain text or
probes): every stored per-sequence loss equals a plain forward pass of the Hugging Face model
with the head disabled another way (forward hooks on the attention's value and output
projections, one sequence at a time, no padding, no prefix cache); the stored Δ, p-value and
q-value equal their recomputation from the stored rows (exact sign-flip enumeration, scipy's
Benjamini–Hochberg); an interrupted run resumes without duplicates; bad input is refused in
one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from scipy import stats
from transformers import AutoModelForCausalLM

from attnwh.sql.queries import get_query, run_query
from helpers import cli_main, run
from test_decoder_ablation import make_causal_lm

FAMILIES = ("llama", "gpt2")  # grouped-query attention and a BOS; multi-head, no BOS, an output bias
SWEEP = ["--max-length", "40", "--limit", "4", "--resamples", "200"]
PROBE = ["--probe", "induction", "--repeat-length", "8", "--limit", "4", "--mode", "zero", "--resamples", "200"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (a forward pass is a millisecond; a second thread
    only waits for it, and far longer on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def lms(tmp_path_factory) -> dict[str, Path]:
    # Positions for a needle probe's 300 tokens (the tiny tokenizers cut words into pieces).
    return {f: make_causal_lm(f, tmp_path_factory.mktemp(f"lm-{f}"), positions=320) for f in FAMILIES}


@pytest.fixture(scope="module")
def swept(lms, tmp_path_factory) -> Path:
    """Each model swept on the prose sample in both modes, and on induction probes (zero)."""
    db = tmp_path_factory.mktemp("loss") / "w.duckdb"
    for lm in lms.values():
        cli_main("ingest", "ablation", "--model", str(lm), "--task", "prose", *SWEEP, "--mode", "zero",
                 "--mode", "uniform", "--db", str(db))  # fmt: skip
        cli_main("ingest", "ablation", "--model", str(lm), *PROBE, "--db", str(db))
    return db


def _attention(model, layer: int):
    """The layer's attention module, its value projection's slice of the output, and the
    projection into the residual stream (whose input holds the heads side by side)."""
    if model.config.model_type == "gpt2":
        attn = model.transformer.h[layer].attn
        width = model.config.n_embd
        return attn.c_attn, slice(2 * width, 3 * width), attn.c_proj
    attn = model.model.layers[layer].self_attn
    return attn.v_proj, slice(None), attn.o_proj


def reference_nats(model, ids: list[int], heads: list[tuple[int, int]], mode: str) -> float:
    """Summed next-token loss of one unpadded sequence with `heads` disabled by hooks: the
    head's slice of the output projection's input becomes 0 (zero) or, at position t, the mean
    of its values at positions 0..t (uniform: weights 1/(t+1) over the causal keys; under GQA
    a query head reads its key/value group's values)."""
    config = model.config
    n_heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    per_group = n_heads // (getattr(config, "num_key_value_heads", None) or n_heads)
    values: dict[int, torch.Tensor] = {}
    hooks = []
    for layer in sorted({l for l, _ in heads}):
        off = [h for l, h in heads if l == layer]
        v_proj, v_cols, o_proj = _attention(model, layer)

        def keep(module, args, out, layer=layer, cols=v_cols):
            values[layer] = out[..., cols]

        def replace(module, args, layer=layer, off=off):
            (x,) = args
            x = x.clone()
            for h in off:
                head = slice(h * head_dim, (h + 1) * head_dim)
                if mode == "zero":
                    x[..., head] = 0
                else:
                    group = h // per_group
                    v = values[layer][..., group * head_dim : (group + 1) * head_dim]
                    counts = torch.arange(1, v.shape[1] + 1, dtype=v.dtype)[None, :, None]
                    x[..., head] = v.cumsum(1) / counts
            return (x,)

        hooks += [v_proj.register_forward_hook(keep), o_proj.register_forward_pre_hook(replace)]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
    finally:
        for hook in hooks:
            hook.remove()
    logp = torch.log_softmax(logits[:-1], -1)
    return float(-logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())


def _runs(con, lm: Path) -> list[tuple[int, str, str]]:
    return con.execute(
        "SELECT DISTINCT r.run_id, c.mode, r.task FROM runs AS r JOIN models AS m USING (model_id) "
        "JOIN ablation_configs AS c USING (run_id) WHERE m.name = ? AND r.kind = 'ablation' ORDER BY r.run_id",
        [str(lm)],
    ).fetchall()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_stored_loss_is_a_plain_forward_with_the_head_disabled_another_way(swept, lms, family):
    model = AutoModelForCausalLM.from_pretrained(lms[family], attn_implementation="eager").eval()
    con = duckdb.connect(str(swept), read_only=True)
    found = _runs(con, lms[family])
    assert sorted((mode, task) for _, mode, task in found) == [("uniform", "prose"), ("zero", "induction"),
                                                              ("zero", "prose")]  # fmt: skip
    lengths, effects = set(), []
    for run_id, mode, _ in found:
        configs = con.execute(
            "SELECT config_id, disabled FROM ablation_configs WHERE run_id = ? ORDER BY config_id", [run_id]
        ).fetchall()
        assert len(configs) == 1 + 2 * 4 + 2  # baseline, every head, every layer
        sequences = con.execute("SELECT example_id, token_ids FROM run_examples WHERE run_id = ?", [run_id]).fetchall()
        for example_id, ids in sequences:
            lengths.add(len(ids))
            stored = dict(
                con.execute(
                    "SELECT config_id, nats / tokens FROM ablation_losses WHERE run_id = ? AND example_id = ? "
                    "AND span = 'all' AND tokens = ?",
                    [run_id, example_id, len(ids) - 1],
                ).fetchall()
            )
            assert len(stored) == len(configs)
            base = reference_nats(model, ids, [], mode) / (len(ids) - 1)
            for config_id, disabled in configs:
                heads = [tuple(map(int, pair.split("-"))) for pair in disabled.split(",") if pair]
                expected = reference_nats(model, ids, heads, mode) / (len(ids) - 1)
                assert stored[config_id] == pytest.approx(expected, abs=1e-5), (run_id, config_id)
                effects.append(abs(expected - base))
    assert len(lengths) > 1  # padded batches of mixed lengths
    assert max(effects) > 1e-3  # disabling moves the loss far beyond the tolerance


def test_stored_delta_p_and_q_match_a_recomputation_from_the_stored_rows(swept, lms):
    con = duckdb.connect(str(swept), read_only=True)
    run_id = next(r for r, mode, task in _runs(con, lms["llama"]) if mode == "zero" and task == "prose")
    rows = con.execute(
        "SELECT config_id, example_id, nats, tokens FROM ablation_losses WHERE run_id = ? AND span = 'all' "
        "ORDER BY config_id, example_id",
        [run_id],
    ).fetchnumpy()
    n = len(set(rows["example_id"].tolist()))
    nats = rows["nats"].reshape(-1, n)
    tokens = rows["tokens"].reshape(-1, n)[0].astype(float)
    stored = con.execute(
        "SELECT a.config_id, a.value, a.baseline, a.delta, a.ci_low, a.ci_high, a.p_value, a.p_adjusted, c.kind "
        "FROM ablations AS a JOIN ablation_configs AS c USING (run_id, config_id) WHERE run_id = ? "
        "AND metric = 'loss' ORDER BY config_id",
        [run_id],
    ).fetchall()
    assert len(stored) == len(nats)
    signs = np.array(list(itertools.product([1.0, -1.0], repeat=n)))  # every sign flip: 2^4 < 200, exact
    p_values = []
    for config_id, value, baseline, delta, low, high, p, q, kind in stored:
        assert value == pytest.approx(nats[config_id].sum() / tokens.sum(), rel=1e-12)
        assert baseline == pytest.approx(nats[0].sum() / tokens.sum(), rel=1e-12)
        assert delta == pytest.approx(value - baseline, abs=1e-12)
        differences = nats[config_id] - nats[0]
        flipped = np.abs(signs @ differences)
        expected = 1.0 if not differences.any() else np.mean(flipped >= abs(differences.sum()) * (1 - 1e-9))
        assert p == pytest.approx(expected, abs=1e-12)
        assert low <= high
        if kind == "baseline":
            assert (delta, low, high, q) == (0.0, 0.0, 0.0, None)
        else:
            p_values.append((p, q))
    q_expected = stats.false_discovery_control([p for p, _ in p_values], method="bh")
    assert [q for _, q in p_values] == pytest.approx(q_expected.tolist(), abs=1e-12)


def test_probe_spans_split_the_whole_sequence_and_are_tested(swept, lms, tmp_path):
    db = tmp_path / "needle.duckdb"
    cli_main("ingest", "ablation", "--model", str(lms["gpt2"]), "--probe", "needle", "--limit", "2", "--max-length",
             "300", "--mode", "zero", "--resamples", "100", "--db", str(db))  # fmt: skip
    with duckdb.connect(str(db), read_only=True) as con:
        spans = con.execute(
            "SELECT span, count(*), min(tokens), max(tokens) FROM ablation_losses GROUP BY span ORDER BY span"
        ).fetchall()
        # The answer is the payload teacher-forced again: as many tokens, and it ends the sequence.
        by_span = {name: (rows, low, high) for name, rows, low, high in spans}
        assert set(by_span) == {"all", "answer", "needle", "needle_sentence", "question"}
        assert all(rows == 11 * 2 for rows, _, _ in by_span.values())
        assert by_span["answer"][1:] == by_span["needle"][1:] and by_span["all"][1:] == (299, 299)
        metrics = {m for (m,) in con.execute("SELECT DISTINCT metric FROM ablations").fetchall()}
        assert metrics == {"loss", *(f"loss:{name}" for name in by_span if name != "all")}
    con = duckdb.connect(str(swept), read_only=True)
    for family, bos in (("llama", 1), ("gpt2", 0)):
        run_id = next(r for r, _, task in _runs(con, lms[family]) if task == "induction")
        sums = con.execute(
            "SELECT config_id, example_id, "
            "sum(nats) FILTER (WHERE span = 'all'), sum(nats) FILTER (WHERE span IN ('first', 'repeat')), "
            "sum(tokens) FILTER (WHERE span = 'first'), sum(tokens) FILTER (WHERE span = 'repeat') "
            "FROM ablation_losses WHERE run_id = ? GROUP BY ALL",
            [run_id],
        ).fetchall()
        assert len(sums) == 11 * 4
        for _, _, whole, halves, first, repeat in sums:
            assert halves == pytest.approx(whole, rel=1e-12)
            assert (first, repeat) == (8 - (1 - bos), 8)  # without a BOS, token 0 has no loss
        metrics = {
            m for (m,) in con.execute("SELECT DISTINCT metric FROM ablations WHERE run_id = ?", [run_id]).fetchall()
        }
        assert metrics == {"loss", "loss:first", "loss:repeat"}
        # The named query's per-span loss is the stored rows' sum(nats) / sum(tokens), with the tests beside it.
        named = run_query(con, get_query("loss_ablation"), {"run": run_id, "span": "repeat"}).to_pylist()
        assert len(named) == 11 and all(r["span"] == "repeat" and r["sequences"] == 4 for r in named)
        for r in named:
            nats, tokens = con.execute(
                "SELECT sum(nats), sum(tokens) FROM ablation_losses WHERE run_id = ? AND config_id = ? "
                "AND span = 'repeat'",
                [run_id, r["config_id"]],
            ).fetchone()
            assert r["loss"] == pytest.approx(nats / tokens, rel=1e-12)
            assert r["delta"] == pytest.approx(r["loss"] - r["baseline_loss"], abs=1e-12)


def test_an_interrupted_sweep_resumes_without_duplicates_and_replace_redoes_it(lms, tmp_path, monkeypatch, capsys):
    from attnwh.ingest.runs import loss_ablation

    db = tmp_path / "w.duckdb"
    args = ["ingest", "ablation", "--model", str(lms["gpt2"]), "--task", "prose", *SWEEP, "--batch-size", "2",
            "--mode", "zero", "--db", str(db)]  # fmt: skip
    compute = loss_ablation.LossWorker.compute
    calls = []

    def interrupted(self, unit):
        calls.append(unit.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return compute(self, unit)

    monkeypatch.setenv("COLUMNS", "250")  # the summary's outcome whole
    monkeypatch.setattr(loss_ablation.LossWorker, "compute", interrupted)
    code, _, err = run(monkeypatch, capsys, *args)
    assert code != 0 and "Traceback" not in err
    monkeypatch.setattr(loss_ablation.LossWorker, "compute", compute)

    def stored() -> tuple[int, int, int, str]:
        with duckdb.connect(str(db), read_only=True) as con:
            return con.execute(
                "SELECT (SELECT count(*) FROM ablation_losses), (SELECT count(DISTINCT (config_id, example_id, span)) "
                "FROM ablation_losses), (SELECT count(*) FROM ablations), (SELECT string_agg(status, ',') FROM runs)"
            ).fetchone()

    partial = stored()
    assert partial[0] == 11 * 2 and partial[3] != "complete"  # the first batch of two sequences only
    code, out, _ = run(monkeypatch, capsys, *args)
    assert code == 0 and "resumed" in out
    assert stored() == (11 * 4, 11 * 4, 11, "complete")
    code, out, _ = run(monkeypatch, capsys, *args)
    assert code == 0 and "already" in out and stored() == (11 * 4, 11 * 4, 11, "complete")
    code, out, _ = run(monkeypatch, capsys, *args, "--replace")
    assert code == 0 and "replaced" in out and stored() == (11 * 4, 11 * 4, 11, "complete")


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("encoder", ["--task", "prose"], "is an encoder"),
        ("lm", ["--text", "{empty}"], "no text"),
        ("lm", ["--task", "prose", "--prompt"], "drop --prompt"),
        ("lm", ["--task", "prose", "--probe", "induction"], "--probe induction sweeps random tokens"),
        ("lm", ["--task", "prose", "--repeat-length", "8"], "--repeat-length goes with --probe induction"),
        ("lm", ["--task", "prose", "--task", "sentiment"], "sentiment is a labelled task"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_written(
    lms, tmp_path, monkeypatch, capsys, model, extra, message
):
    from tiny_models import make_tiny

    folder = make_tiny("bert", tmp_path / "bert") if model == "encoder" else lms["gpt2"]
    (tmp_path / "empty.txt").write_text("\n\n")
    extra = [e.format(empty=tmp_path / "empty.txt") for e in extra]
    db = tmp_path / "w.duckdb"
    capsys.readouterr()
    code, _, err = run(monkeypatch, capsys, "ingest", "ablation", "--model", str(folder), "--db", str(db), *extra)
    assert code != 0
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not db.exists()
