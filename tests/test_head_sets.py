"""Sets of heads disabled together in the loss sweep (`attnwh ingest ablation --disable-top
retrieval:K --random-heads K --draws N --heads L.H,… --no-sweep`) on pass-key probes: every set's
stored loss and greedy hits per probe equal a plain forward pass of the Hugging Face model with
those heads disabled by hooks instead (their slices of o_proj's input zeroed, or the running
mean of their values for uniform); the top set is the head-roles run's ranking read with SQL
apart from attnwh's; random draws are the seed's and never touch the top set; the named query
head_set_effect equals its recomputation from the stored rows (exact sign flips, scipy's
permutation test and bootstrap); bad input is refused in one line with exit 2 and nothing
written."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from scipy import stats
from transformers import AutoModelForCausalLM

from attnwh.sql.queries import get_query, run_query
from helpers import cli_main, run
from test_decoder_ablation import HEADS, LAYERS, make_causal_lm
from test_loss_ablation import _attention

PROBES = 8
SETS = ["--disable-top", "retrieval:2", "--random-heads", "2", "--draws", "3", "--heads", "1.3,0.2"]
SWEEP = ["--probe", "passkey", "--max-length", "120", "--limit", str(PROBES), "--resamples", "200", "--no-sweep"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    return make_causal_lm("llama", tmp_path_factory.mktemp("lm-sets"), positions=320)


@pytest.fixture(scope="module")
def swept(lm, tmp_path_factory) -> Path:
    """A needle roles run, then the sets on pass-key probes in both modes."""
    db = tmp_path_factory.mktemp("sets") / "w.duckdb"
    cli_main("ingest", "roles", "--model", str(lm), "--probes", "needle", "--examples", "4", "--context-length",
             "200", "--db", str(db))  # fmt: skip
    cli_main("ingest", "ablation", "--model", str(lm), *SWEEP, *SETS, "--mode", "zero", "--mode", "uniform",
             "--db", str(db))  # fmt: skip
    return db


def reference(model, ids: list[int], heads: list[tuple[int, int]], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Per position t ≥ 1 of one unpadded sequence with `heads` disabled by hooks: the loss of
    token t in nats and whether the previous position's argmax is the token."""
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    per_group = config.num_attention_heads // config.num_key_value_heads
    values: dict[int, torch.Tensor] = {}
    hooks = []
    for layer in sorted({l for l, _ in heads}):
        v_proj, _, o_proj = _attention(model, layer)

        def keep(module, args, out, layer=layer):
            values[layer] = out

        def replace(module, args, layer=layer, off=tuple(h for l, h in heads if l == layer)):
            (x,) = args
            x = x.clone()
            for h in off:
                cols = slice(h * head_dim, (h + 1) * head_dim)
                if mode == "zero":
                    x[..., cols] = 0
                else:
                    group = h // per_group
                    v = values[layer][..., group * head_dim : (group + 1) * head_dim]
                    x[..., cols] = v.cumsum(1) / torch.arange(1, v.shape[1] + 1, dtype=v.dtype)[None, :, None]
            return (x,)

        hooks += [v_proj.register_forward_hook(keep), o_proj.register_forward_pre_hook(replace)]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
    finally:
        for hook in hooks:
            hook.remove()
    target = torch.tensor(ids[1:])
    nats = -torch.log_softmax(logits[:-1], -1)[torch.arange(len(ids) - 1), target]
    hits = logits[:-1].argmax(-1) == target
    return np.concatenate([[0.0], nats.numpy()]), np.concatenate([[False], hits.numpy()])


def _configs(con, run_id: int) -> list[tuple]:
    return con.execute(
        "SELECT config_id, kind, label, draw, roles_run, disabled FROM ablation_configs WHERE run_id = ? "
        "ORDER BY config_id",
        [run_id],
    ).fetchall()


def _heads(disabled: str) -> list[tuple[int, int]]:
    return [tuple(map(int, pair.split("-"))) for pair in disabled.split(",") if pair]


def test_every_set_is_a_plain_forward_with_its_heads_disabled_another_way(swept, lm):
    model = AutoModelForCausalLM.from_pretrained(lm, attn_implementation="eager").eval()
    con = duckdb.connect(str(swept), read_only=True)
    found = con.execute(
        "SELECT DISTINCT run_id, mode FROM ablation_configs WHERE kind = 'set' ORDER BY mode"
    ).fetchall()
    assert [mode for _, mode in found] == ["uniform", "zero"]
    moved = 0.0
    for run_id, mode in found:
        configs = _configs(con, run_id)
        # The baseline, then the top set, the three draws and the list: no head or layer of the sweep.
        assert [(kind, label, draw) for _, kind, label, draw, _, _ in configs] == [
            ("baseline", None, None), ("set", "top-2 retrieval", None), ("set", "random-2", 1),
            ("set", "random-2", 2), ("set", "random-2", 3), ("set", "heads 0.2,1.3", None),
        ]  # fmt: skip
        probes = con.execute(
            "SELECT e.example_id, e.token_ids, l.tokens FROM run_examples AS e JOIN ablation_losses AS l "
            "ON l.run_id = e.run_id AND l.example_id = e.example_id AND l.config_id = 0 AND l.span = 'answer' "
            "WHERE e.run_id = ?",
            [run_id],
        ).fetchall()
        assert len(probes) == PROBES
        for example_id, ids, answer_tokens in probes:
            assert len(ids) == 120
            stored = {
                (c, span): (nats, tokens, correct)
                for c, span, nats, tokens, correct in con.execute(
                    "SELECT config_id, span, nats, tokens, correct FROM ablation_losses WHERE run_id = ? "
                    "AND example_id = ?",
                    [run_id, example_id],
                ).fetchall()
            }
            base = reference(model, ids, [], mode)[0][-answer_tokens:].sum()
            for config_id, _, _, _, _, disabled in configs:
                nats, hits = reference(model, ids, _heads(disabled), mode)
                # The answer ends the probe: its last `answer_tokens` positions.
                answer = (nats[-answer_tokens:].sum(), answer_tokens, int(hits[-answer_tokens:].sum()))
                whole = (nats.sum(), len(ids) - 1, int(hits.sum()))
                for span, expected in (("answer", answer), ("all", whole)):
                    got = stored[(config_id, span)]
                    assert got[0] == pytest.approx(expected[0], abs=1e-4), (run_id, config_id, span)
                    assert got[1:] == expected[1:], (run_id, config_id, span)
                moved = max(moved, abs(answer[0] - base))
    assert moved > 1e-2  # the sets move the answer's loss far beyond the tolerance


def test_top_set_is_the_roles_ranking_and_random_draws_are_the_seeds(swept, lm):
    from attnwh.ingest.runs.head_sets import HeadSets, set_configurations

    con = duckdb.connect(str(swept), read_only=True)
    roles_run = con.execute("SELECT max(run_id) FROM runs WHERE kind = 'roles'").fetchone()[0]
    ranking = con.execute(
        "SELECT layer, head FROM head_roles WHERE run_id = ? GROUP BY layer, head "
        "ORDER BY avg(retrieval) DESC, layer, head LIMIT 2",
        [roles_run],
    ).fetchall()
    for run_id in {r for (r,) in con.execute("SELECT run_id FROM ablation_configs WHERE kind = 'set'").fetchall()}:
        configs = _configs(con, run_id)
        top = next(c for c in configs if c[2] == "top-2 retrieval")
        assert top[4] == roles_run and _heads(top[5]) == sorted(ranking)
        # The draws: default_rng(--seed 42) over every head but the top set's, one after the other.
        pool = [(l, h) for l in range(LAYERS) for h in range(HEADS) if (l, h) not in ranking]
        rng = np.random.default_rng(42)
        for c in configs:
            if c[2] == "random-2":
                expected = sorted(pool[i] for i in rng.choice(len(pool), size=2, replace=False))
                assert _heads(c[5]) == expected and not set(expected) & set(ranking)
    hashes = con.execute("SELECT weights_hash FROM models").fetchall()[0][0]
    sets = HeadSets(sweep=False, random_k=3, draws=4)

    def draws(seed: int) -> list[tuple]:
        return [c.heads for c in set_configurations(sets, range(LAYERS), HEADS, seed, None, hashes, "m")]

    assert draws(1) == draws(1) and draws(1) != draws(2)
    assert all(len(set(h)) == 3 for h in draws(1))


def test_head_set_effect_equals_its_recomputation(swept, tmp_path):
    """On a copy whose answer hits are set by hand (the tiny model answers nothing), so the
    accuracy statistics have something to show."""
    db = tmp_path / "w.duckdb"
    shutil.copy(swept, db)
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE ablation_losses SET correct = CASE WHEN config_id = 0 THEN tokens - abs(example_id % 2)::INTEGER "
            "ELSE (hash(config_id, example_id) % (tokens + 1))::INTEGER END WHERE span = 'answer'"
        )
    con = duckdb.connect(str(db), read_only=True)
    run_id = con.execute("SELECT min(run_id) FROM ablation_configs WHERE kind = 'set'").fetchall()[0][0]
    rows = con.execute(
        "SELECT config_id, example_id, correct / tokens, nats / tokens FROM ablation_losses WHERE run_id = ? "
        "AND span = 'answer' ORDER BY config_id, example_id",
        [run_id],
    ).fetchnumpy()
    accuracy = rows["(correct / tokens)"].reshape(-1, PROBES)
    loss = rows["(nats / tokens)"].reshape(-1, PROBES)
    for solved, resamples in ((0.0, 1000), (1.0, 1000), (0.0, 100)):
        found = run_query(
            con, get_query("head_set_effect"), {"run": run_id, "solved": solved, "resamples": resamples}
        ).to_pylist()
        assert [r["config_id"] for r in found] == [1, 5, 2, 3, 4]  # top and list first, then the draws
        keep = accuracy[0] >= solved
        n = int(keep.sum())
        assert 0 < n < PROBES or solved == 0.0
        for r in found:
            c = r["config_id"]
            assert (r["probes"], r["solved"]) == (PROBES, n)
            assert r["baseline_accuracy_all"] == pytest.approx(accuracy[0].mean(), abs=1e-12)
            assert r["accuracy_all"] == pytest.approx(accuracy[c].mean(), abs=1e-12)
            for name, values in (("accuracy", accuracy), ("loss", loss)):
                d = values[c][keep] - values[0][keep]
                assert r[f"baseline_{name}"] == pytest.approx(values[0][keep].mean(), abs=1e-12)
                assert r[name] == pytest.approx(values[c][keep].mean(), abs=1e-12)
                assert r[f"{name}_delta"] == pytest.approx(d.mean(), abs=1e-12)
                flipped = np.abs(np.array(list(itertools.product([1.0, -1.0], repeat=n))) @ d)
                exact = float(np.mean(flipped >= abs(d.sum()) * (1 - 1e-9) - 1e-12))
                if 2**n <= resamples:  # every flip: exact, as scipy's exact permutation test
                    assert r[f"{name}_p"] == pytest.approx(exact, abs=1e-12)
                    if d.any():
                        scipy_p = stats.permutation_test(
                            (d,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
                        ).pvalue
                        assert r[f"{name}_p"] == pytest.approx(min(scipy_p, 1.0), abs=1e-9)
                else:  # random flips: (1 + hits) / (1 + resamples), near the exact p
                    assert r[f"{name}_p"] >= 1 / (1 + resamples) and r[f"{name}_p"] == pytest.approx(exact, abs=0.15)
                low, high = r[f"{name}_ci_low"], r[f"{name}_ci_high"]
                assert low <= d.mean() + 1e-12 and d.mean() <= high + 1e-12
                if n > 1 and np.ptp(d) > 0 and resamples == 1000:
                    reference = stats.bootstrap(
                        (d,), np.mean, n_resamples=20000, method="percentile", rng=np.random.default_rng(0)
                    ).confidence_interval
                    width = reference.high - reference.low
                    assert low == pytest.approx(reference.low, abs=0.15 * width + 1e-9)
                    assert high == pytest.approx(reference.high, abs=0.15 * width + 1e-9)
        draws = [r for r in found if r["draw"] is not None]
        deltas = np.array([r["accuracy_delta"] for r in draws])
        for r in draws:
            assert r["set_name"] == "random-2" and r["draws"] == 3
            assert r["draws_mean_delta"] == pytest.approx(deltas.mean(), abs=1e-12)
            assert r["draws_sd_delta"] == pytest.approx(deltas.std(ddof=1), abs=1e-12)
            assert (r["draws_min_delta"], r["draws_max_delta"]) == (
                pytest.approx(deltas.min()),
                pytest.approx(deltas.max()),
            )
        assert all(r["draws"] is None for r in found if r["draw"] is None)


def test_loss_ablation_and_the_summary_show_the_sets(swept):
    con = duckdb.connect(str(swept), read_only=True)
    run_id = con.execute("SELECT min(run_id) FROM ablation_configs WHERE kind = 'set'").fetchall()[0][0]
    named = run_query(con, get_query("loss_ablation"), {"run": run_id, "span": "answer"}).to_pylist()
    assert [(r["kind"], r["label"], r["draw"]) for r in named][:2] == [("baseline", None, None),
                                                                      ("set", "top-2 retrieval", None)]  # fmt: skip
    for r in named:
        correct, tokens = con.execute(
            "SELECT sum(correct), sum(tokens) FROM ablation_losses WHERE run_id = ? AND config_id = ? "
            "AND span = 'answer'",
            [run_id, r["config_id"]],
        ).fetchone()
        assert r["accuracy"] == pytest.approx(correct / tokens, abs=1e-12)
        assert r["q_value"] is None  # sets are chosen, not swept: no Benjamini–Hochberg across them


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--disable-top", "retrieval:2"], "no head-roles run"),
        (["--disable-top", "retrieval:9"], "the model has 8 heads"),
        (["--disable-top", "attention:2"], "give ROLE:K"),
        (["--random-heads", "9"], "the model has 8 heads"),
        (["--draws", "2"], "--draws goes with --random-heads"),
        (["--heads", "1:3"], "give heads as LAYER.HEAD"),
        (["--heads", "2.0"], "the model has no head 2.0"),
        (["--heads", "0.4"], "the model has no head 0.4"),
        (["--max-length", "400"], "limit of 320 tokens"),
        (["--task", "sentiment", "--no-sweep"], "go with the loss sweep"),
    ],
)
def test_bad_input_is_refused_in_one_line_with_exit_2_before_anything_is_written(
    lm, tmp_path, monkeypatch, capsys, extra, message
):
    db = tmp_path / "w.duckdb"
    args = ["ingest", "ablation", "--model", str(lm), "--db", str(db)]
    if extra[0] != "--task":
        args += ["--probe", "passkey", "--limit", "2", "--no-sweep"]
        args += [] if extra[0] == "--max-length" else ["--max-length", "120"]
    code, _, err = run(monkeypatch, capsys, *args, *extra)
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not db.exists()
