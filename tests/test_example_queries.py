"""From a head to its examples: head_examples, pattern_examples and ablation_flips against the
same answers computed in Python from the stored rows."""

from __future__ import annotations

import json
from collections import defaultdict

import duckdb
import pytest

from helpers import cli_main, ingest_args, run, write_pairs
from test_ablation_run import classifier, swept  # noqa: F401  (fixtures: one tiny sweep)


def query(monkeypatch, capsys, db, name: str, **params: object) -> list[dict]:
    args = [x for key, value in params.items() for x in ("-p", f"{key}={value}")]
    code, out, err = run(monkeypatch, capsys, "query", name, "--db", str(db), "-f", "json", *args)
    assert code == 0, err
    return json.loads(out)


def fetch(db, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, tiny_model_dir):
    """A statistics run of a tiny BERT on 12 sentence pairs, every example's maps typed."""
    tmp = tmp_path_factory.mktemp("examples")
    db = tmp / "w.duckdb"
    cli_main(*ingest_args(tiny_model_dir("bert"), write_pairs(tmp / "p.tsv", 12), db))
    return db


def test_head_examples_rank_any_statistic(monkeypatch, capsys, ingested):
    stored = fetch(
        ingested, "SELECT example_id, to_sep, entropy FROM head_stats WHERE run_id = 1 AND layer = 1 AND head = 2"
    )
    texts = dict(fetch(ingested, "SELECT example_id, text_a FROM examples"))
    for statistic, column, order in (("to_sep", 1, "desc"), ("entropy", 2, "asc")):
        rows = query(
            monkeypatch,
            capsys,
            ingested,
            "head_examples",
            run=1,
            layer=1,
            head=2,
            statistic=statistic,
            order=order,
            top=4,
        )
        expected = sorted(stored, key=lambda r: (-r[column] if order == "desc" else r[column], r[0]))[:4]
        assert [r["example_id"] for r in rows] == [r[0] for r in expected]
        assert [r["value"] for r in rows] == pytest.approx([r[column] for r in expected], abs=1e-6)
        assert [r["rank"] for r in rows] == [1, 2, 3, 4]
        assert all(r["text_a"] == texts[r["example_id"]] for r in rows)
    # Without a statistic: every stored statistic, each ranked on its own.
    every = query(monkeypatch, capsys, ingested, "head_examples", run=1, layer=1, head=2, top=2)
    by_statistic = defaultdict(list)
    for r in every:
        by_statistic[r["statistic"]].append(r["rank"])
    assert {"to_cls", "to_sep", "entropy", "pattern_margin", "rn_to_sep"} <= set(by_statistic)
    assert "pattern" not in by_statistic  # a type code, not something to rank by
    assert all(ranks == [1, 2] for ranks in by_statistic.values())


def test_head_examples_of_a_compare_run_rank_by_cosine(monkeypatch, capsys, tmp_path):
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path / "synthetic.duckdb"
    build_synthetic_warehouse(db, examples=12, layers=3, heads=4)
    ((compare,),) = fetch(db, "SELECT min(run_id) FROM runs WHERE kind = 'compare'")
    stored = fetch(
        db, f"SELECT example_id, cosine FROM attention_change WHERE run_id = {compare} AND layer = 2 AND head = 1"
    )
    rows = query(monkeypatch, capsys, db, "head_examples", run=compare, layer=2, head=1, order="asc", top=5)
    assert {r["statistic"] for r in rows} == {"cosine"}
    assert [r["example_id"] for r in rows] == [e for e, _ in sorted(stored, key=lambda r: (r[1], r[0]))[:5]]


def test_pattern_examples_are_the_surest_maps_of_each_type(monkeypatch, capsys, ingested):
    stored = fetch(
        ingested,
        "SELECT layer, head, t.name, pattern_margin, example_id FROM head_stats JOIN pattern_types t USING (pattern) "
        "WHERE run_id = 1",
    )
    rows = query(monkeypatch, capsys, ingested, "pattern_examples", run=1, top=2)
    groups = defaultdict(list)
    for layer, head, name, margin, example in stored:
        groups[layer, head, name].append((-margin, example))
    expected = [
        (layer, head, name, example)
        for (layer, head, name), found in sorted(groups.items())
        for _, example in sorted(found)[:2]
    ]
    assert [(r["layer"], r["head"], r["pattern"], r["example_id"]) for r in rows] == expected
    assert len({(r["layer"], r["head"]) for r in rows}) == len({(k[0], k[1]) for k in groups})
    one = query(monkeypatch, capsys, ingested, "pattern_examples", run=1, layer=0, head=1, pattern=rows[0]["pattern"])
    assert one and all(r["layer"] == 0 and r["head"] == 1 and r["pattern"] == rows[0]["pattern"] for r in one)
    thumbnails = {e for (e,) in fetch(ingested, "SELECT DISTINCT example_id FROM pattern_thumbnails WHERE run_id = 1")}
    assert all(r["has_thumbnail"] == (r["example_id"] in thumbnails) for r in rows)


def test_ablation_flips_are_the_predictions_that_changed(monkeypatch, capsys, swept):  # noqa: F811
    _, _, db = swept
    (run_id,) = fetch(db, "SELECT run_id FROM runs WHERE kind = 'ablation'")[0]
    configs = {
        c: (kind, layer, head)
        for c, kind, layer, head in fetch(db, "SELECT config_id, kind, layer, head FROM ablation_configs")
    }
    predictions = defaultdict(dict)
    for config, example, prediction, correct in fetch(
        db, "SELECT config_id, example_id, prediction, correct FROM ablation_predictions"
    ):
        predictions[config][example] = (prediction, correct)
    gold = dict(fetch(db, "SELECT example_id, label FROM examples"))
    expected = {}
    for config, by_example in predictions.items():
        if config == 0:
            continue
        for example, (prediction, correct) in by_example.items():
            base, base_correct = predictions[0][example]
            if prediction != base:
                expected[config, example] = "fixed" if correct else "broken" if base_correct else "changed"
    heads = {k: v for k, v in expected.items() if configs[k[0]][0] == "head"}
    assert heads, "no head's disabling changed a prediction: the comparison below would prove little"

    rows = query(monkeypatch, capsys, db, "ablation_flips", run=run_id, kind="head")
    assert {(r["config_id"], r["example_id"]): r["flip"] for r in rows} == heads
    assert all(r["label"] == gold[r["example_id"]] for r in rows)
    assert all(r["predicted"] != r["baseline_predicted"] for r in rows)
    assert {r["predicted"] for r in rows} <= set(gold.values())  # class ids shown as the task's labels

    # One head: its own flips only (kind defaults to head when a head is named).
    config, example = next(iter(heads))
    _, layer, head = configs[config]
    one = query(monkeypatch, capsys, db, "ablation_flips", run=run_id, layer=layer, head=head)
    assert {(r["config_id"], r["example_id"]) for r in one} == {k for k in heads if k[0] == config}
    layers = query(monkeypatch, capsys, db, "ablation_flips", run=run_id, kind="layer")
    assert {(r["config_id"], r["example_id"]) for r in layers} == {k for k in expected if configs[k[0]][0] == "layer"}
