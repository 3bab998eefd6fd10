"""`attnwh ingest compare`: cosine of two models' attention maps, per example, layer and head.

Parity against HF's eager `output_attentions=True` maps, the invariants (identical models,
a change confined to the last layer), and the command end to end: rows, resume, replace,
named queries and refused model pairs.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from attnwh.ingest.measures.change import ChangeCapture, prepare_comparison
from attnwh.ingest.model.encoding import collate
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs import rows as ingest_rows
from attnwh.ingest.runs.loop import IngestOptions, ingest_runs
from attnwh.ingest.sources.files import load_file
from attnwh.sql.queries import get_query, run_query
from helpers import digest, pair_args, run, write_pairs
from tiny_models import make_tiny


def perturb_last_layer(src: Path, out: Path, scale: float = 0.5, seed: int = 1) -> Path:
    """A "tuned" copy of the model at `src`: noise on the last layer's query and key weights
    only, saved with the same tokenizer."""
    model = AutoModel.from_pretrained(src)
    last = model.config.num_hidden_layers - 1
    generator = torch.Generator().manual_seed(seed)
    touched = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if f"layer.{last}." in name and name.endswith(("query.weight", "key.weight")):
                param.add_(scale * param.abs().mean() * torch.randn(param.shape, generator=generator) * 10)
                touched += 1
    assert touched == 2, "expected one query and one key weight in the last layer"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """bert (2 layers), its last-layer-perturbed copy, a 3-layer bert with the same tokenizer
    and its perturbed copy, and roberta with its perturbed copy."""
    root = tmp_path_factory.mktemp("compare-models")
    bert3 = make_tiny("bert", root / "bert3", layers=3)
    return {
        "bert": tiny_model_dir("bert"),
        "bert-tuned": perturb_last_layer(tiny_model_dir("bert"), root / "bert-tuned"),
        "bert3": bert3,
        "bert3-tuned": perturb_last_layer(bert3, root / "bert3-tuned"),
        "roberta": tiny_model_dir("roberta"),
        "roberta-tuned": perturb_last_layer(tiny_model_dir("roberta"), root / "roberta-tuned"),
        "albert": tiny_model_dir("albert"),  # its <pad> has BERT's [PAD] id, 0: only the ids differ
    }


def compare_in_db(base: Path, tuned: Path, data: Path, db: Path, batch_size: int = 32):
    """Run a comparison through the library and return (prepared task, cosines by example id
    as (layer, head) arrays)."""
    base_enc = load_model(str(base), device="cpu")
    tuned_enc = load_model(str(tuned), device="cpu")
    options = IngestOptions(batch_size=batch_size)
    task = load_file(data, "premise", "hypothesis", "label")
    prepared = prepare_comparison(base_enc, tuned_enc, [task], options)
    ingest_runs(db, ChangeCapture(base_enc, tuned_enc), prepared, options)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT example_id, layer, head, cosine FROM attention_change").fetchall()
    stored: dict[int, np.ndarray] = {}
    shape = (tuned_enc.num_layers, tuned_enc.num_heads)
    for eid, layer, head, cosine in rows:
        stored.setdefault(eid, np.full(shape, np.nan))[layer, head] = cosine
    return prepared[0], stored


def eager_maps(path: Path, ids: np.ndarray, types: np.ndarray | None) -> list[np.ndarray]:
    """Per layer (heads, n, n) maps of one unpadded example on the eager path."""
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    inputs = {"input_ids": torch.tensor([ids.tolist()])}
    if types is not None and "token_type_ids" in inspect.signature(model.forward).parameters:
        inputs["token_type_ids"] = torch.tensor([types.tolist()])
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    return [a[0].double().numpy() for a in out.attentions]


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_stored_cosines_match_eager_output_attentions(models, tmp_path, family):
    data = write_pairs(tmp_path / "pairs.tsv", 7)
    # One batch of 7 examples of different lengths: all but the longest are padded.
    task, stored = compare_in_db(models[family], models[f"{family}-tuned"], data, tmp_path / "w.duckdb")
    lengths = task.encoded.n_tokens
    assert len(set(lengths.tolist())) > 1
    assert set(stored) == set(task.example_ids.tolist())
    for i, eid in enumerate(task.example_ids.tolist()):
        ids = task.encoded.input_ids[i]
        types = None if task.encoded.token_type_ids is None else task.encoded.token_type_ids[i]
        base = eager_maps(models[family], ids, types)
        tuned = eager_maps(models[f"{family}-tuned"], ids, types)
        expected = np.array(
            [
                [np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(la, lb)]
                for la, lb in zip(base, tuned)
            ]
        )  # (layer, head); the maps are already n × n: cropped to the real tokens
        np.testing.assert_allclose(stored[eid], expected, atol=1e-5, rtol=0)
    # The comparison must see a change, or the parity above would prove little.
    last = np.array([v[-1] for v in stored.values()])
    assert last.min() < 0.99


def test_identical_models_give_cosine_one(models, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", 9)
    _, stored = compare_in_db(models["bert"], models["bert"], data, tmp_path / "w.duckdb", batch_size=4)
    values = np.array(list(stored.values()))
    assert values.shape == (9, 2, 4)
    np.testing.assert_allclose(values, 1.0, atol=1e-6, rtol=0)


def test_changing_the_last_layer_leaves_the_others_at_one(models, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", 9)
    _, stored = compare_in_db(models["bert3"], models["bert3-tuned"], data, tmp_path / "w.duckdb", batch_size=4)
    values = np.array(list(stored.values()))  # (example, layer, head)
    assert values.shape == (9, 3, 4)
    np.testing.assert_allclose(values[:, :2], 1.0, atol=1e-6, rtol=0)
    assert values[:, 2].mean() < 0.99 and values[:, 2].max() <= 1 + 1e-6


def test_batched_cosines_equal_one_example_at_a_time(models, tmp_path):
    base = load_model(str(models["bert"]), device="cpu")
    tuned = load_model(str(models["bert-tuned"]), device="cpu")
    task = load_file(write_pairs(tmp_path / "pairs.tsv", 6), "premise", "hypothesis", "label")
    prepared = prepare_comparison(base, tuned, [task], IngestOptions())[0]
    capture = ChangeCapture(base, tuned)
    pad = tuned.tokenizer.pad_token_id
    together = capture.run(collate(prepared.encoded, list(range(6)), pad, tuned.device))
    assert together.shape == (6, 2, 4, 1)
    for i in range(6):
        alone = capture.run(collate(prepared.encoded, [i], pad, tuned.device))
        np.testing.assert_allclose(alone[0], together[i], atol=1e-6, rtol=0)


def compare_args(base: Path, tuned: Path, data: Path, db: Path, *extra: str) -> list[str]:
    return ["ingest", "compare", "--base", str(base), "--tuned", str(tuned), *pair_args(data, db), *extra]


def change_counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("models", "examples", "runs", "run_examples", "attention_change", "head_stats")
        }


@pytest.mark.slow
def test_cli_writes_resumes_replaces_and_queries(monkeypatch, capsys, models, tmp_path):
    db = tmp_path / "w.duckdb"
    data = write_pairs(tmp_path / "pairs.tsv", 12)
    args = compare_args(models["bert"], models["bert-tuned"], data, db)

    # Interrupted after two batches: the run is marked and the rerun resumes it.
    real_write = ingest_rows.store_part
    calls = []

    def write_then_interrupt(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_write(*a, **k)

    monkeypatch.setattr(ingest_rows, "store_part", write_then_interrupt)
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 130 and err.strip().splitlines()[-1].startswith("attnwh: error: interrupted")
    assert change_counts(db)["attention_change"] == 10 * 2 * 4
    monkeypatch.setattr(ingest_rows, "store_part", real_write)
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "resumed" in out and "attention-change rows" in out

    with duckdb.connect(str(db), read_only=True) as con:
        rows, unique, examples = con.execute(
            "SELECT count(*), count(DISTINCT (run_id, example_id, layer, head)), count(DISTINCT example_id) "
            "FROM attention_change"
        ).fetchall()[0]
        assert rows == unique == 12 * 2 * 4 and examples == 12
        run_row = con.execute(
            "SELECT r.kind, r.status, r.n_examples, t.name, b.name FROM runs r "
            "JOIN models t ON t.model_id = r.model_id JOIN models b ON b.model_id = r.base_model_id"
        ).fetchall()
        assert run_row == [("compare", "complete", 12, str(models["bert-tuned"]), str(models["bert"]))]
        assert con.execute("SELECT count(*) FROM run_examples").fetchall()[0][0] == 12
    first = change_counts(db)
    assert first["models"] == 2 and first["head_stats"] == 0

    code, out, _ = run(monkeypatch, capsys, *args)
    assert code == 0 and "already complete" in out
    assert change_counts(db) == first
    code, out, _ = run(monkeypatch, capsys, *args, "--replace")
    assert code == 0 and "replaced" in out
    assert change_counts(db) == first

    # A statistics ingest of the tuned model is a different run, not a resume of the comparison.
    code, _, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "--model",
        str(models["bert-tuned"]),
        "--data",
        str(data),
        "--text-column",
        "premise",
        "--pair-column",
        "hypothesis",
        "--db",
        str(db),
    )
    assert code == 0, err
    assert change_counts(db)["runs"] == 2

    with duckdb.connect(str(db), read_only=True) as con:
        by_layer = run_query(con, get_query("finetune_change_by_layer"), {"task": "pairs"}).to_pylist()
        by_head = run_query(con, get_query("finetune_change_by_head")).to_pylist()
        none = run_query(con, get_query("finetune_change_by_layer"), {"base": "no-such-model"}).to_pylist()
        direct = con.execute(
            "SELECT layer, avg(cosine), min(cosine), max(cosine) FROM attention_change GROUP BY layer ORDER BY layer"
        ).fetchall()
    assert [(r["layer"], r["examples"], r["base"], r["tuned"], r["task"]) for r in by_layer] == [
        (layer, 12, str(models["bert"]), str(models["bert-tuned"]), "pairs") for layer in range(2)
    ]
    for row, (_layer, mean, low, high) in zip(by_layer, direct):
        assert row["mean_cosine"] == pytest.approx(mean) and row["min_cosine"] == pytest.approx(low)
        assert row["max_cosine"] == pytest.approx(high)
    assert by_layer[0]["mean_cosine"] == pytest.approx(1.0, abs=1e-6) and by_layer[1]["mean_cosine"] < 0.99
    assert [(r["layer"], r["head"], r["examples"]) for r in by_head] == [(l, h, 12) for l in range(2) for h in range(4)]
    assert all(r["stddev_cosine"] is not None for r in by_head)
    assert none == []

    # The query command finds them by name, with the documented parameters.
    code, out, err = run(
        monkeypatch,
        capsys,
        "query",
        "finetune_change_by_head",
        "-p",
        f"tuned={models['bert-tuned']}",
        "--format",
        "csv",
        "--db",
        str(db),
    )
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1 + 2 * 4


@pytest.mark.parametrize(
    "case, expected",
    [
        ("different layer count", "same layers and heads"),
        ("different tokenizer", "tokenize differently"),
        ("different vocabulary, same padding id", "tokenize differently (first: pairs row"),
    ],
)
def test_mismatched_models_give_one_line_and_leave_the_database_unchanged(
    monkeypatch, capsys, models, tmp_path, case, expected
):
    db = tmp_path / "w.duckdb"
    data = write_pairs(tmp_path / "pairs.tsv", 6)
    assert run(monkeypatch, capsys, *compare_args(models["bert"], models["bert-tuned"], data, db))[0] == 0
    before = digest(db)
    tuned = {
        "different layer count": models["bert3"],
        "different tokenizer": models["roberta-tuned"],
        "different vocabulary, same padding id": models["albert"],
    }[case]
    if case != "different layer count":
        # Same shape (2 layers × 4 heads), so only the tokenizer check can refuse it.
        assert AutoModel.from_pretrained(tuned).config.num_hidden_layers == 2
    code, _, err = run(monkeypatch, capsys, *compare_args(models["bert"], tuned, data, db))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1, err
    assert lines[0].startswith("attnwh: error:") and expected in lines[0], lines[0]
    assert digest(db) == before


def test_compare_needs_both_models(monkeypatch, capsys, models, tmp_path):
    code, _, err = run(
        monkeypatch, capsys, "ingest", "compare", "--base", str(models["bert"]), "--db", str(tmp_path / "w.duckdb")
    )
    assert code == 2 and "--tuned" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.duckdb").exists()
