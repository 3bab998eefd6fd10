"""The whole study on the real all-mpnet-base-v2 (12 layers × 12 heads, BERT-base's size) on a
handful of SST-2 examples: every stage runs, every one of the 144 heads is stored and swept,
the stored statistics of an example equal HF's eager `output_attentions` maps of the real
model, and a rerun skips every stage. Skips without the model's folder (`python
tools/fetch_all_mpnet.py`; CI fetches it) or without ../shared/data."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from helpers import MPNET_DIR, run

GLUE_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
STAGES = ("ingest-base", "finetune", "ingest-tuned", "compare", "ablation", "report")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    if not MPNET_DIR.exists():
        pytest.skip(f"no all-mpnet-base-v2 at {MPNET_DIR} (python tools/fetch_all_mpnet.py)")
    if not GLUE_DIR.exists():
        pytest.skip(f"no GLUE data at {GLUE_DIR}")
    return tmp_path_factory.mktemp("mpnet-study")


def study_args(tmp: Path) -> list[str]:
    return [
        "study", "--model", str(MPNET_DIR), "--glue-dir", str(GLUE_DIR), "--tasks", "sst2",
        "--limit", "6", "--ablation-limit", "6", "--max-train-examples", "16", "--epochs", "1",
        "--batch-size", "8", "--resamples", "100", "--device", "cpu", "--db", str(tmp / "w.duckdb"),
        "--report", str(tmp / "report.html"), "--out-dir", str(tmp / "models"),
    ]  # fmt: skip


def test_the_study_runs_at_bert_base_size_and_reruns_nothing(studied, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    code, _, err = run(monkeypatch, capsys, *study_args(studied))
    assert code == 0, err
    with duckdb.connect(str(studied / "w.duckdb"), read_only=True) as con:
        heads = con.execute(
            "SELECT r.kind, count(DISTINCT (s.layer, s.head)) FROM head_stats AS s JOIN runs AS r USING (run_id)"
            " GROUP BY 1"
        ).fetchall()
        swept = dict(
            con.execute(
                "SELECT c.kind, count(DISTINCT (c.layer, c.head)) FROM ablation_configs AS c"
                " JOIN ablations AS a USING (run_id, config_id) WHERE c.kind IN ('head', 'layer') GROUP BY 1"
            ).fetchall()
        )
        layers = con.execute("SELECT count(DISTINCT layer) FROM attention_change").fetchone()[0]
    assert dict(heads) == {"statistics": 144}
    assert swept == {"head": 144, "layer": 12} and layers == 12
    assert (studied / "report.html").stat().st_size > 0
    code, _, err = run(monkeypatch, capsys, *study_args(studied))
    assert code == 0, err
    for stage in STAGES:
        assert f"{stage} skipped" in err, (stage, err)


def test_stored_statistics_of_the_real_model_equal_eager_maps(studied, monkeypatch, capsys):
    """to_cls, to_sep and max_weight of the base model's first stored example, every head,
    against HF's eager maps of all-mpnet-base-v2 (within 1e-5)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    db = studied / "w.duckdb"
    if not db.exists():
        code, _, err = run(monkeypatch, capsys, *study_args(studied))
        assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        (run_id,) = con.execute(
            "SELECT min(r.run_id) FROM runs AS r JOIN models AS m USING (model_id)"
            " WHERE r.kind = 'statistics' AND m.name = ?",
            [str(MPNET_DIR)],
        ).fetchone()
        example, text = con.execute(
            "SELECT e.example_id, e.text_a FROM run_examples AS x JOIN examples AS e USING (example_id)"
            " WHERE x.run_id = ? ORDER BY e.example_id LIMIT 1",
            [run_id],
        ).fetchone()
        stored = con.execute(
            "SELECT layer, head, to_cls, to_sep, max_weight FROM head_stats WHERE run_id = ? AND example_id = ?"
            " ORDER BY layer, head",
            [run_id, example],
        ).fetchall()
    tokenizer = AutoTokenizer.from_pretrained(MPNET_DIR)
    model = AutoModel.from_pretrained(MPNET_DIR, attn_implementation="eager").eval()
    inputs = tokenizer(text, return_tensors="pt", truncation=True)
    with torch.no_grad():
        maps = model(**inputs, output_attentions=True).attentions
    ids = inputs["input_ids"][0]
    cls = ids == tokenizer.cls_token_id
    sep = ids == tokenizer.sep_token_id
    assert len(stored) == 144
    for layer, head, to_cls, to_sep, max_weight in stored:
        a = maps[layer][0, head].double().numpy()
        np.testing.assert_allclose(
            [to_cls, to_sep, max_weight],
            [a[:, cls.numpy()].sum(1).mean(), a[:, sep.numpy()].sum(1).mean(), a.max(1).mean()],
            atol=1e-5,
            err_msg=f"layer {layer} head {head}",
        )
