"""Head roles of decoders (`attnwh ingest roles`): every score equals the one recomputed here,
plainly, from HF's eager ``output_attentions=True`` maps of the same probe (to 1e-6), on a tiny
random Llama with grouped-query attention, a tiny GPT-2 and a Mistral whose sliding window is
shorter than the probes, with the long needle probes read in
tiles under a small attention memory; the command stores one run per probe kind, a rerun
adds nothing, and an encoder or empty text is refused in one line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModel

from attnwh import api
from attnwh.ingest.measures import roles
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.sources import probes
from attnwh.ingest.sources.text import load_sample_text
from helpers import run
from tiny_models import make_tiny, make_tiny_decoder

LAYERS, HEADS, POSITIONS = 2, 4, 256
NEEDLE_LENGTH = 200
WINDOW = 8
# Small enough that a needle probe's layer is read in several tiles (see the assertion).
MEMORY = 1 << 20


@pytest.fixture(scope="module", params=["llama", "gpt2", "mistral"])
def decoder(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"roles-{request.param}")
    return make_tiny_decoder(request.param, out, LAYERS, HEADS, seed=3, positions=POSITIONS)


def eager_maps(folder: Path, ids: tuple[int, ...]) -> np.ndarray:
    """(layer, head, n, n) attention maps of HF's eager attention, float64."""
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return np.stack([a[0].double().numpy() for a in out.attentions])


def reference(probe: probes.ProbeSequence, maps: np.ndarray) -> np.ndarray:
    """(layer, head, 6) scores of one probe, by the definitions, one row at a time."""
    layers, heads, n, _ = maps.shape
    out = np.full((layers, heads, 6), np.nan)
    for layer in range(layers):
        for head in range(heads):
            a = maps[layer, head]
            out[layer, head, 0] = np.mean([a[i, i - 1] for i in range(1, n)])
            out[layer, head, 4] = np.mean([a[i, 0] for i in range(n)])
            out[layer, head, 5] = np.mean([a[i, max(0, i - WINDOW + 1) : i + 1].sum() for i in range(n)])
            if probe.kind == "induction":
                m = len(probe.span("first"))
                repeat = probe.span("repeat")
                out[layer, head, 1] = np.mean([a[r, r - m + 1] for r in repeat])
                out[layer, head, 2] = np.mean([a[r, r - m] for r in repeat])
            elif probe.kind == "needle":
                needle, ids = probe.span("needle"), probe.token_ids
                retrieved = set()
                for position in probe.span("answer"):
                    row = position - 1
                    key = int(np.argmax(a[row, : row + 1]))
                    if key in needle and key not in retrieved and ids[key] == ids[position]:
                        retrieved.add(key)
                out[layer, head, 3] = len(retrieved) / len(needle)
    return out


def test_scores_match_eager_maps(decoder) -> None:
    encoder = load_model(str(decoder), "cpu")
    text = [e.text_a for e in load_sample_text("prose").examples]
    made = [
        *probes.induction_probes(encoder.tokenizer, 3, 12, seed=1),
        *probes.needle_probes(encoder.tokenizer, text, 2, NEEDLE_LENGTH, (0.3, 1.0), seed=1),
        *probes.random_probes(encoder.tokenizer, 2, 24, seed=1),
        *probes.text_probes(encoder.tokenizer, text, 2, 24, seed=1),
    ]
    result = roles.measure_roles(encoder, made, local_window=WINDOW, attention_memory=MEMORY, batch_size=4)
    # The needle probes' layers were read in tiles: more tiles than layers × batches.
    assert result.tiles_read > LAYERS * 3
    assert result.scores.shape == (len(made), LAYERS, HEADS, len(roles.ROLE_COLUMNS))
    for probe, got in zip(made, result.scores):
        want = reference(probe, eager_maps(decoder, probe.token_ids))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    # The scores are not all trivially 0: a head of these peaked random maps reads its
    # previous token, and (needles) some answer step retrieves.
    assert np.nanmax(result.scores[..., 0]) > 0.05


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return make_tiny_decoder("llama", tmp_path_factory.mktemp("roles-cli"), LAYERS, HEADS, seed=3, positions=POSITIONS)


def test_the_command_stores_each_probe_kind_once(llama, tmp_path, monkeypatch, capsys) -> None:
    decoder = llama
    db = tmp_path / "w.duckdb"
    args = ["ingest", "roles", "--model", str(decoder), "--device", "cpu", "--db", str(db), "--examples", "3"]
    args += ["--repeat-length", "10", "--context-length", "160", "--depths", "0,1", "--local-window", str(WINDOW)]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "induction run" in out and "needle run" in out
    code, out, err = run(monkeypatch, capsys, *args)  # the same settings again: nothing new
    assert code == 0, err
    assert out.count("already complete") == 2
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute("SELECT task, status, n_examples FROM runs WHERE kind = 'roles' ORDER BY task").fetchall()
        assert runs == [("induction", "complete", 3), ("needle", "complete", 3)]
        per_run = con.execute("SELECT count(*) FROM head_roles GROUP BY run_id").fetchall()
        assert per_run == [(3 * LAYERS * HEADS,)] * 2
        # NULL exactly where a probe kind does not define the score.
        nulls = con.execute(
            "SELECT r.task, count(induction), count(duplicate), count(retrieval), count(previous_token) "
            "FROM head_roles JOIN runs AS r USING (run_id) GROUP BY r.task ORDER BY r.task"
        ).fetchall()
        n = 3 * LAYERS * HEADS
        assert nulls == [("induction", n, n, 0, n), ("needle", 0, 0, n, n)]
        # A stored probe is the one the seed builds again, and its scores come back in the query.
        run_id, example_id, ids, segments = con.execute(
            "SELECT run_id, example_id, token_ids, segments FROM role_probes JOIN runs USING (run_id) "
            "WHERE task = 'needle' AND position = 1"
        ).fetchone()
        encoder = load_model(str(decoder), "cpu")
        text = [e.text_a for e in load_sample_text("prose").examples]
        again = probes.needle_probes(encoder.tokenizer, text, 3, 160, (0.0, 1.0), seed=42)[1]
        assert tuple(ids) == again.token_ids and json.loads(segments)["answer"] == list(again.segments["answer"])
        stored = con.execute(
            "SELECT previous_token FROM head_roles WHERE run_id = ? AND example_id = ? ORDER BY layer, head",
            [run_id, example_id],
        ).fetchall()
    finally:
        con.close()
    # `attnwh show`'s maps of a stored probe are of exactly its tokens, and give its stored score.
    maps = api.Warehouse(db).example_maps(run_id, example_id, device="cpu")
    assert len(maps.tokens) == len(again)
    weights = maps.maps["weights"]  # (layer, head, n, n)
    redrawn = [float(np.diagonal(weights[k, h], -1).mean()) for k in range(LAYERS) for h in range(HEADS)]
    np.testing.assert_allclose(redrawn, [v for (v,) in stored], atol=1e-6)
    code, out, err = run(monkeypatch, capsys, "query", "head_roles", "--db", str(db), "--format", "csv")
    assert code == 0, err
    assert out.count("\n") == 1 + 2 * LAYERS * HEADS and "induction_rank" in out and "kv_group" in out
    # "Which heads": each run's rows ranked by the score its probes are for.
    rows = list(csv.DictReader(io.StringIO(out)))
    for run_id in {r["run_id"] for r in rows}:
        of_run = [r for r in rows if r["run_id"] == run_id]
        main = "induction" if of_run[0]["probe"] == "induction" else "retrieval"
        ranks = [int(r[f"{main}_rank"]) for r in of_run]
        assert ranks == sorted(ranks) and ranks[0] == 1, (main, ranks)


def test_random_and_text_probes_store_the_sink_share(llama, tmp_path, monkeypatch, capsys) -> None:
    """Where sinks emerge (Gu et al. 2025): a run per kind of probes of --sink-length tokens, each
    head's sink share stored per probe (NULL induction and retrieval), and the command's count
    of heads above 0.3 is the one the stored means give."""
    db = tmp_path / "w.duckdb"
    args = ["ingest", "roles", "--model", str(llama), "--device", "cpu", "--db", str(db), "--examples", "3"]
    code, out, err = run(monkeypatch, capsys, *args, "--probes", "random,text", "--sink-length", "20")
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute(
            "SELECT r.task, r.n_examples, s.context_length, s.text_hash IS NULL, r.source FROM runs AS r "
            "JOIN role_settings AS s USING (run_id) ORDER BY r.task"
        ).fetchall()
        assert runs == [("random", 3, 20, True, "random tokens"), ("text", 3, 20, False, "sample:prose")]
        lengths = con.execute("SELECT DISTINCT len(token_ids) FROM role_probes").fetchall()
        assert lengths == [(20,)]
        defined = con.execute(
            "SELECT count(induction) + count(duplicate) + count(retrieval), count(sink) FROM head_roles"
        ).fetchone()
        assert defined == (0, 2 * 3 * LAYERS * HEADS)
        for task in ("random", "text"):
            sinks = con.execute(
                "SELECT count(*) FILTER (WHERE sink > 0.3), count(*) FROM head_role_means WHERE probe = ?", [task]
            ).fetchone()
            assert f"sink heads (first-token share > 0.3): {sinks[0]} of {sinks[1]}" in out
    code, out, err = run(monkeypatch, capsys, *args, "--probes", "random,nonsense")
    assert code == 2 and "choose from induction, needle, random, text" in err and err.count("\n") == 1


def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    encoder = make_tiny("bert", tmp_path / "bert")
    code, _, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "roles",
        "--model",
        str(encoder),
        "--device",
        "cpu",
        "--db",
        str(tmp_path / "w.duckdb"),
    )
    assert code != 0 and "needs a decoder (a causal language model)" in err and "Traceback" not in err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    decoder = make_tiny_decoder("gpt2", tmp_path / "gpt2", 1, 2)
    code, _, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "roles",
        "--model",
        str(decoder),
        "--text",
        str(empty),
        "--device",
        "cpu",
        "--db",
        str(tmp_path / "w.duckdb"),
    )
    assert code != 0 and "empty" in err and "Traceback" not in err
    assert not (tmp_path / "w.duckdb").exists() or "roles" not in str(
        duckdb.connect(str(tmp_path / "w.duckdb")).execute("SELECT kind FROM runs").fetchall()
    )


def test_retrieval_counts_each_payload_position_once() -> None:
    # Payload at 2..4 holding tokens 7, 8, 7; the answer (8..10) repeats them.
    probe = probes.ProbeSequence(
        (1, 5, 7, 8, 7, 6, 9, 9, 7, 8, 7), "needle", {"needle": (2, 5), "answer": (8, 11)}, 0.5
    )
    assert roles.retrieval(probe, np.array([2, 3, 4])) == 1.0  # each step copies from its own position
    assert roles.retrieval(probe, np.array([2, 3, 2])) == pytest.approx(2 / 3)  # position 2 only once
    assert roles.retrieval(probe, np.array([3, 2, 4])) == pytest.approx(1 / 3)  # wrong tokens, then right
    assert roles.retrieval(probe, np.array([8, 9, 5])) == 0.0  # outside the payload
