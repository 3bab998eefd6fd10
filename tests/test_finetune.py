"""`attnwh finetune` on tiny models: saved, loadable, scored with the task metric, recorded."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest
from sklearn.metrics import accuracy_score

from attnwh.ingest.model.encoding import encode_task
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs.finetune import LINEAGE_FILE, FinetuneOptions, finetune, predict
from attnwh.ingest.sources.examples import Example, TaskData
from helpers import SENTENCES, run

OPTIONS = FinetuneOptions(epochs=2, batch_size=8, max_length=32, seed=3)


def task(n: int, regression: bool = False, split: str = "train") -> TaskData:
    examples = tuple(
        Example(
            i, None, SENTENCES[i % len(SENTENCES)] + f" {i}", None, f"{(i % 11) / 2:.1f}" if regression else str(i % 2)
        )
        for i in range(n)
    )
    return TaskData(
        "test", "stsb" if regression else "toy", split, examples, None if regression else ("0", "1"), "test"
    )


def test_finetune_saves_a_loadable_model_scored_like_sklearn(tiny_model_dir, tmp_path):
    out = tmp_path / "tuned"
    result = finetune(str(tiny_model_dir("bert")), task(48), task(20, split="dev"), out, OPTIONS, device="cpu")
    tuned = load_model(str(out), device="cpu")
    assert tuned.architecture == "BertForSequenceClassification"
    assert tuned.weights_hash == result.tuned_weights_hash != result.base_weights_hash
    lineage = json.loads((out / LINEAGE_FILE).read_text())
    assert lineage["task"] == "toy" and lineage["base_weights_hash"] == result.base_weights_hash
    # The stored score is the accuracy of the saved model's own predictions.
    dev = task(20, split="dev")
    predictions = predict(tuned.model, tuned.tokenizer, encode_task(tuned.tokenizer, dev, 32), False, 8, tuned.device)
    gold = np.array([int(e.label) for e in dev.examples])
    assert result.scores == {"accuracy": pytest.approx(accuracy_score(gold, predictions))}
    assert result.final_loss is not None and np.isfinite(result.final_loss)


def test_regression_task_gets_correlations(tiny_model_dir, tmp_path):
    """The stored Pearson and Spearman are scipy's on the saved model's own predictions for
    the dev examples, read back with plain transformers."""
    import torch
    from scipy import stats
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out, dev = tmp_path / "r", task(16, True, "dev")
    result = finetune(str(tiny_model_dir("bert")), task(40, True), dev, out, OPTIONS, "cpu")
    assert set(result.scores) == {"pearson", "spearman"}
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    with torch.no_grad():
        batch = tokenizer(
            [e.text_a for e in dev.examples], truncation=True, max_length=32, padding=True, return_tensors="pt"
        )
        predictions = model(**batch).logits[:, 0].numpy()
    gold = np.array([float(e.label) for e in dev.examples])
    assert len(set(gold)) < len(gold) and np.std(predictions) > 0  # ties in the gold scores; a defined correlation
    expected = {
        "pearson": stats.pearsonr(gold, predictions).statistic,
        "spearman": stats.spearmanr(gold, predictions).statistic,
    }
    assert result.scores == pytest.approx(expected, abs=1e-5)
    assert json.loads((out / LINEAGE_FILE).read_text())["scores"] == pytest.approx(expected, abs=1e-5)


def test_from_scratch_starts_from_random_weights(tiny_model_dir, tmp_path):
    base = tiny_model_dir("bert")
    options = FinetuneOptions(epochs=0.01, batch_size=8, max_length=32, seed=3, learning_rate=0.0)
    kept = finetune(str(base), task(16), task(8, split="dev"), tmp_path / "a", options, "cpu")
    scratch = finetune(
        str(base),
        task(16),
        task(8, split="dev"),
        tmp_path / "b",
        FinetuneOptions(**{**options.__dict__, "from_scratch": True}),
        "cpu",
    )
    a = load_model(str(tmp_path / "a"), "cpu").model.state_dict()
    b = load_model(str(tmp_path / "b"), "cpu").model.state_dict()
    encoder_keys = [k for k in a if "embeddings.word_embeddings" in k]
    base_weights = load_model(str(base), "cpu").model.state_dict()
    key = encoder_keys[0]
    # learning rate 0: the pre-trained start keeps the base's weights, the scratch one does not
    assert np.allclose(a[key].numpy(), base_weights[key.removeprefix("bert.")].numpy())
    assert not np.allclose(b[key].numpy(), a[key].numpy())
    assert kept.tuned_weights_hash != scratch.tuned_weights_hash


def test_zero_epochs_scores_the_pretrained_encoder_with_an_untrained_head(tiny_model_dir, tmp_path):
    # The paper's Table 1 "pre-trained" column: no step is taken, the encoder is the base's,
    # and the score is that of the saved model (base encoder + seeded random head).
    base = tiny_model_dir("bert")
    options = FinetuneOptions(epochs=0, batch_size=8, max_length=32, seed=3)
    result = finetune(str(base), task(16), task(20, split="dev"), tmp_path / "z", options, "cpu")
    assert result.final_loss is None
    saved = load_model(str(tmp_path / "z"), "cpu")
    base_weights = load_model(str(base), "cpu").model.state_dict()
    encoder = {k.removeprefix("bert."): v for k, v in saved.model.state_dict().items() if k.startswith("bert.")}
    assert encoder.keys() >= {k for k in base_weights if not k.startswith("pooler.")}
    for key, value in encoder.items():
        assert np.array_equal(value.numpy(), base_weights[key].numpy()), key
    dev = task(20, split="dev")
    predictions = predict(saved.model, saved.tokenizer, encode_task(saved.tokenizer, dev, 32), False, 8, saved.device)
    gold = np.array([int(e.label) for e in dev.examples])
    assert result.scores == {"accuracy": pytest.approx(accuracy_score(gold, predictions))}


def test_cli_records_run_scores_and_lineage(monkeypatch, capsys, tiny_model_dir, tmp_path):
    db, out = tmp_path / "w.duckdb", tmp_path / "tuned"
    code, stdout, err = run(
        monkeypatch,
        capsys,
        "finetune",
        "--model",
        str(tiny_model_dir("bert")),
        "--task",
        "sentiment",
        "--max-train-examples",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--out",
        str(out),
        "--db",
        str(db),
    )
    assert code == 0, err
    assert "accuracy" in stdout and str(out.resolve()) in stdout
    with duckdb.connect(str(db), read_only=True) as con:
        run_row = con.execute("SELECT kind, task, split, n_examples, model_id, base_model_id FROM runs").fetchall()
        # The run describes what the model was trained on; the scores keep the dev split's size.
        assert [r[:4] for r in run_row] == [("finetune", "sentiment", "train", 32)]
        assert con.execute("SELECT example_limit, source LIKE '%train%' FROM runs").fetchall() == [(32, True)]
        assert con.execute("SELECT DISTINCT n_examples FROM scores").fetchall() == [(400,)]
        tuned = con.execute(
            "SELECT name, base_model_id, finetuned_task FROM models WHERE model_id = ?", [run_row[0][4]]
        ).fetchall()
        assert tuned == [(str(out), run_row[0][5], "sentiment")]
        assert con.execute("SELECT train_examples, from_scratch, eval_split FROM finetunes").fetchall() == [
            (32, False, "dev")
        ]
        assert [r[0] for r in con.execute("SELECT metric FROM scores").fetchall()] == ["accuracy"]
    # The saved folder is an ordinary model for every other command, and keeps its lineage
    # in a warehouse that never saw the fine-tuning.
    other = tmp_path / "other.duckdb"
    for model in (tiny_model_dir("bert"), out):
        code, _, err = run(
            monkeypatch,
            capsys,
            "ingest",
            "--model",
            str(model),
            "--limit",
            "4",
            "--task",
            "sentiment",
            "--db",
            str(other),
        )
        assert code == 0, err
    with duckdb.connect(str(other), read_only=True) as con:
        rows = con.execute(
            "SELECT model_id, name, base_model_id, finetuned_task FROM models ORDER BY model_id"
        ).fetchall()
    assert rows[1][1:] == (str(out), rows[0][0], "sentiment") and rows[0][2:] == (None, None)


def test_out_must_not_clobber_a_non_model_folder(monkeypatch, capsys, tiny_model_dir, tmp_path):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("mine")
    code, _, err = run(
        monkeypatch,
        capsys,
        "finetune",
        "--model",
        str(tiny_model_dir("bert")),
        "--out",
        str(tmp_path / "stuff"),
        "--db",
        str(tmp_path / "w.duckdb"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "holds no model" in err


def test_cli_trains_on_local_files(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from helpers import write_pairs

    (tmp_path / "reviews").mkdir()
    train, dev = write_pairs(tmp_path / "reviews" / "train.tsv", 24), write_pairs(tmp_path / "reviews" / "dev.tsv", 10)
    common = [
        "finetune",
        "--model",
        str(tiny_model_dir("bert")),
        "--data",
        str(train),
        "--text-column",
        "premise",
        "--pair-column",
        "hypothesis",
        "--out",
        str(tmp_path / "m"),
        "--db",
        str(tmp_path / "w.duckdb"),
        "--epochs",
        "1",
        "--batch-size",
        "8",
    ]
    code, _, err = run(monkeypatch, capsys, *common)
    assert code == 2 and "--eval-data" in err
    code, out, err = run(monkeypatch, capsys, *common, "--eval-data", str(dev), "--label-column", "label")
    assert code == 0, err
    # train.tsv is a split: the task is named after the files' folder.
    assert out.startswith("reviews: trained on 24 examples") and "(10): accuracy" in out
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT task FROM runs").fetchall() == [("reviews",)]
    # --epochs 0: nothing trained, said so, and recorded as 0 epochs with no loss.
    untrained = [str(tmp_path / "u") if a == str(tmp_path / "m") else a for a in common[:-3]]
    untrained += ["0", "--eval-data", str(dev)]
    code, out, err = run(monkeypatch, capsys, *untrained, "--label-column", "label")
    assert code == 0, err
    assert out.startswith("reviews: not trained (epochs 0)") and "(10): accuracy" in out
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT epochs, final_loss FROM finetunes ORDER BY run_id").fetchall()[-1] == (0.0, None)


def test_cli_run_spans_training_and_scoring(monkeypatch, capsys, tiny_model_dir, tmp_path):
    """started_at is when training began, not when the run was recorded."""
    db = tmp_path / "w.duckdb"
    code, _, err = run(
        monkeypatch,
        capsys,
        "finetune",
        "--model",
        str(tiny_model_dir("bert")),
        "--max-train-examples",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--out",
        str(tmp_path / "tuned"),
        "--db",
        str(db),
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        started, finished, train_seconds = con.execute(
            "SELECT r.started_at, r.finished_at, f.train_seconds FROM runs r JOIN finetunes f USING (run_id)"
        ).fetchone()
    assert train_seconds > 0
    assert (finished - started).total_seconds() >= train_seconds - 0.01


@pytest.mark.parametrize("family", ["deberta-v2", "mpnet", "modernbert"])
def test_families_without_fused_attention_train_on_eager(tiny_model_dir, tmp_path, family):
    """DeBERTa and MPNet have no sdpa path: fine-tuning falls back to eager, and the saved
    model loads for capture."""
    out = tmp_path / "tuned"
    result = finetune(str(tiny_model_dir(family)), task(16), task(8, split="dev"), out, OPTIONS, device="cpu")
    tuned = load_model(str(out), device="cpu")
    assert tuned.family == family and tuned.architecture.endswith("ForSequenceClassification")
    assert tuned.weights_hash == result.tuned_weights_hash != result.base_weights_hash
