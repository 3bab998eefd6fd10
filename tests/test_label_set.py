"""The shipped hand-labelled set of real maps (tools/label_set, docs/pattern_labels.md):
well formed, and rebuildable: every labelled map belongs to the thumbnail sample of the
documented ingest of the GLUE dev sets, with a whole map kept. Skips without ../shared/data."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from attnwh.ingest.measures import patterns

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "tools" / "label_set" / "labels.csv"
GLUE_DIR = ROOT.parent / "shared" / "data" / "glue"


def _rows() -> list[dict[str, str]]:
    with LABELS.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_set_is_well_formed():
    rows = _rows()
    assert len(rows) >= 400
    keys = [(r["task"], r["example"], r["layer"], r["head"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert {r["task"] for r in rows} == {"sst2", "rte", "mrpc"}
    for r in rows:
        assert {r["pass1"], r["pass2"], r["type"]} <= set(patterns.PATTERN_TYPES)
        # The final label is the passes' where they agree.
        assert r["pass1"] != r["pass2"] or r["type"] == r["pass1"]
    assert Counter(r["layer"] for r in rows).keys() == {str(i) for i in range(6)}


def test_every_labelled_map_is_rebuilt_by_the_documented_ingest():
    """`attnwh ingest --glue-dir DIR --task sst2,rte,mrpc --limit 150 --thumbnails 80` with
    the bundled MiniLM keeps whole maps of exactly the examples the set labels."""
    if not GLUE_DIR.exists():
        pytest.skip(f"no GLUE data at {GLUE_DIR}")
    from attnwh.ingest.encoder.loading import load_encoder
    from attnwh.ingest.runs import rows as run_rows
    from attnwh.ingest.runs.loop import IngestOptions, prepare_tasks
    from attnwh.ingest.sources import files

    encoder = load_encoder(None, "cpu")
    options = IngestOptions(limit=150, thumbnails=80)
    wanted: dict[str, set[int]] = {}
    for r in _rows():
        wanted.setdefault(r["task"], set()).add(int(r["example"]))
    for task, examples in wanted.items():
        (prepared,) = prepare_tasks(encoder, [files.load_glue(GLUE_DIR, task, "dev")], options)
        sample = run_rows.thumbnail_sample(prepared.example_ids, options.thumbnails, options.seed)
        lengths = dict(zip(prepared.example_ids.tolist(), np.asarray(prepared.encoded.n_tokens).tolist(), strict=True))
        assert examples <= sample, task
        assert all(6 <= lengths[e] <= patterns.MAP_MAX_TOKENS for e in examples), task


@pytest.mark.slow
def test_the_shipped_classifier_is_rebuilt_from_the_set(tmp_path, monkeypatch, capsys):
    """The documented steps (ingest, export, import-labels, `pattern_label_set.py model`)
    rebuild the shipped classifier: the same architecture, and the same types for the
    labelled maps."""
    if not GLUE_DIR.exists():
        pytest.skip(f"no GLUE data at {GLUE_DIR}")
    import subprocess
    import sys

    import duckdb
    import torch

    from attnwh.ingest.measures import pattern_model
    from helpers import run

    db = tmp_path / "w.duckdb"
    args = ["ingest", "--db", str(db), "--glue-dir", str(GLUE_DIR), "--task", "sst2,rte,mrpc", "--limit", "150"]
    code, _, err = run(monkeypatch, capsys, *args, "--thumbnails", "80")
    assert code == 0, err
    tool = [sys.executable, str(ROOT / "tools" / "pattern_label_set.py")]
    subprocess.run([*tool, "export", str(db), str(LABELS), str(tmp_path / "labels.csv")], check=True)
    code, _, err = run(monkeypatch, capsys, "patterns", "import-labels", str(tmp_path / "labels.csv"), "--db", str(db))
    assert code == 0, err
    rebuilt_path = tmp_path / "model.json"
    subprocess.run([*tool, "model", str(db), "--out", str(rebuilt_path)], check=True)
    rebuilt = pattern_model.PatternModel.from_json(rebuilt_path.read_text())
    shipped = pattern_model.default()
    assert rebuilt.name == shipped.name
    columns = (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute(
            f"SELECT {', '.join('s.' + c for c in columns)} FROM pattern_labels JOIN head_stats AS s"
            " USING (run_id, example_id, layer, head)"
        ).fetchall()
    x = torch.from_numpy(pattern_model.features_of(stored))
    same = (rebuilt.probabilities(x).argmax(-1) == shipped.probabilities(x).argmax(-1)).float().mean()
    assert len(stored) == len(_rows()) and same >= 0.99
