"""Attention pattern types: the rules on synthetic maps of known type, thumbnails and
features written by a real ingest, the named queries, relabelling, hand labels and the CNN."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from attnwh.ingest.measures import pattern_cnn, pattern_model, patterns
from fixtures import synthetic_maps
from helpers import ingest_args, run, write_pairs

# Never used while the thresholds were set (seeds 0–6 were).
HELD_OUT_SEED = 20241130


# ---------------------------------------------------------------- the rules on synthetic maps


def test_recall_on_held_out_synthetic_maps_is_at_least_095():
    maps = synthetic_maps.generate(300, HELD_OUT_SEED)
    labels = np.array([m.label for m in maps])
    codes = synthetic_maps.predicted(maps)
    report = synthetic_maps.per_class_report(labels, codes)
    for name, _precision, recall, support in report:
        assert support == 300
        assert recall >= 0.95, (name, recall, report)
    # The table agrees with scikit-learn's.
    from sklearn.metrics import precision_recall_fscore_support

    p, r, _, _ = precision_recall_fscore_support(labels, codes, labels=range(5), zero_division=0)
    np.testing.assert_allclose([row[1] for row in report], p)
    np.testing.assert_allclose([row[2] for row in report], r)


def test_generator_is_seeded_and_laid_out_like_a_tokenizer():
    a, b = synthetic_maps.generate(4, 3), synthetic_maps.generate(4, 3)
    assert all(np.array_equal(x.attention, y.attention) for x, y in zip(a, b))
    maps = synthetic_maps.generate(40, 5)
    lengths = {len(m.cls) for m in maps}
    assert min(lengths) >= 8 and max(lengths) <= 128 and len(lengths) > 20
    assert {m.pair for m in maps} == {True, False}
    for m in maps:
        np.testing.assert_allclose(m.attention.sum(1), 1, atol=1e-9)
        assert m.cls[0] and m.cls.sum() == 1 and m.sep[-1]
        assert m.sep.sum() == (1 if not m.pair else m.sep.sum()) and (not m.pair or m.sep.sum() in (2, 3))
        assert not (m.punct & (m.cls | m.sep)).any()
        if m.label == patterns.BLOCK:
            assert m.pair


def test_rules_on_hand_made_features():
    f = torch.tensor(
        [
            # col_cls, col_sep, col_punct, col_other, band, block
            [0.3, 0.3, 0.0, 0.0, 0.05, 0.0],  # vertical
            [0.0, 0.0, 0.0, 0.05, 0.7, 0.0],  # diagonal
            [0.2, 0.1, 0.0, 0.0, 0.3, 0.0],  # vertical+diagonal
            [0.05, 0.05, 0.0, 0.02, 0.1, 0.8],  # block
            [0.05, 0.05, 0.02, 0.03, 0.1, 0.3],  # heterogeneous
            [0.05, 0.05, 0.02, 0.03, 0.1, 0.0],  # heterogeneous, single sentence
        ]
    )
    names = [patterns.PATTERN_TYPES[c] for c in patterns.classify(f).tolist()]
    assert names == ["vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous", "heterogeneous"]
    stricter = patterns.Thresholds(vertical=0.9)
    assert patterns.PATTERN_TYPES[int(patterns.classify(f[:1], stricter))] == "heterogeneous"


def test_pattern_types_table_matches_the_code(tmp_path):
    from attnwh.sql import warehouse

    con = warehouse.connect(tmp_path / "w.duckdb")
    rows = con.execute("SELECT pattern, name FROM pattern_types ORDER BY pattern").fetchall()
    con.close()
    assert [name for _, name in rows] == list(patterns.PATTERN_TYPES)


def test_macro_f1_matches_sklearn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.integers(0, 5, 60)
        p = np.where(rng.random(60) < 0.6, y, rng.integers(0, 4, 60))
        assert pattern_cnn.macro_f1(y, p) == pytest.approx(f1_score(y, p, average="macro", zero_division=0))


# ---------------------------------------------------------------- a real ingest


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    from helpers import cli_main

    tmp = tmp_path_factory.mktemp("patterns")
    db = tmp / "w.duckdb"
    model = tiny_model_dir("bert")
    cli_main(*ingest_args(model, write_pairs(tmp / "pairs.tsv", 12), db, "--thumbnails", "3"))
    return db, model


def test_ingest_stores_types_features_and_thumbnails(ingested):
    db, _ = ingested
    with duckdb.connect(str(db), read_only=True) as con:
        missing = con.execute("SELECT count(*) FROM head_stats WHERE pattern IS NULL OR band IS NULL").fetchall()[0][0]
        assert missing == 0
        n, distinct, examples, cells = con.execute(
            "SELECT count(*), count(DISTINCT (run_id, example_id, layer, head)), count(DISTINCT example_id),"
            " min(len(thumbnail)) FROM pattern_thumbnails"
        ).fetchall()[0]
        assert examples == 3 and n == distinct == 3 * 2 * 4 and cells == 32 * 32
        low = con.execute("SELECT min(list_min(thumbnail)) FROM pattern_thumbnails").fetchall()[0][0]
        assert low >= 0


def test_thumbnail_equals_pooled_eager_map(ingested):
    from transformers import AutoModel, AutoTokenizer

    db, model_dir = ingested
    with duckdb.connect(str(db), read_only=True) as con:
        example_id, layer, head, thumb, n = con.execute(
            "SELECT example_id, layer, head, thumbnail, n_tokens FROM pattern_thumbnails ORDER BY ALL LIMIT 1"
        ).fetchall()[0]
        text_a, text_b = con.execute(
            "SELECT text_a, text_b FROM examples WHERE example_id = ?", [example_id]
        ).fetchall()[0]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eager = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    inputs = tokenizer(text_a, text_b, return_tensors="pt")
    assert inputs["input_ids"].shape[1] == n
    with torch.no_grad():
        maps = eager(**inputs, output_attentions=True).attentions
    expected = torch.nn.functional.adaptive_avg_pool2d(maps[layer][0, head][None], 32).flatten()
    np.testing.assert_allclose(np.array(thumb), expected.numpy(), atol=1e-6)


def test_pattern_shares_have_bootstrap_intervals_over_examples(tmp_path):
    """pattern_frequency's intervals against a numpy bootstrap of the same examples (another
    random source, so the bounds agree to within the resampling noise), the same for the same
    seed, and a point interval when every example has the same shares."""
    from attnwh.sql import queries, warehouse

    rng = np.random.default_rng(0)
    maps = synthetic_maps.generate(12, 3)  # 60 maps of known type, one per example
    db = tmp_path / "w.duckdb"
    synthetic_maps.write_warehouse(db, maps)
    con = warehouse.connect(db, read_only=True)
    query = queries.get_query("pattern_frequency")
    rows = queries.run_query(con, query, {"n_boot": 2000}).to_pylist()
    again = queries.run_query(con, query, {"n_boot": 2000}).to_pylist()
    other = queries.run_query(con, query, {"n_boot": 2000, "seed": 7}).to_pylist()
    codes = np.array(con.execute("SELECT pattern FROM head_stats ORDER BY example_id").fetchall())[:, 0]
    con.close()
    assert rows == again and rows != other
    draws = rng.integers(0, len(codes), (4000, len(codes)))
    for row in rows:
        code = patterns.PATTERN_TYPES.index(row["pattern"])
        shares = (codes[draws] == code).mean(1)
        assert row["share"] == pytest.approx(np.mean(codes == code))
        assert row["share_low"] == pytest.approx(np.quantile(shares, 0.025), abs=0.02)
        assert row["share_high"] == pytest.approx(np.quantile(shares, 0.975), abs=0.02)
        assert row["share_low"] <= row["share"] <= row["share_high"] and row["examples"] == len(codes)


def test_pattern_share_intervals_resample_examples_with_all_their_heads(tmp_path):
    """Four heads per example that share their example's type: pattern_frequency's interval
    equals a numpy cluster bootstrap over the query's own draws of examples (every head of a
    drawn example counted), and is visibly wider than resampling the 240 maps one by one."""
    from attnwh.sql import queries, warehouse

    heads = 4
    db = tmp_path / "w.duckdb"
    synthetic_maps.write_warehouse(db, synthetic_maps.generate(12, 3))  # 60 examples, one map each
    with duckdb.connect(str(db)) as con:
        con.execute(
            f"INSERT INTO head_stats SELECT s.* REPLACE (h.range AS head) FROM head_stats AS s, range(1, {heads}) AS h"
        )
        run_id, examples = con.execute(
            "SELECT any_value(run_id), count(DISTINCT example_id) FROM head_stats"
        ).fetchone()
        codes = np.array(
            [c for (c,) in con.execute("SELECT pattern FROM head_stats ORDER BY example_id, head").fetchall()]
        ).reshape(examples, heads)
        # The query's draws, (resample, slot) -> example position in example_id order: the
        # random numbers only; the shares and percentiles are recomputed here.
        drawn = con.execute(
            "SELECT (hash(CAST(42 AS BIGINT), CAST($run AS INTEGER), r.range, s.range) % CAST($n AS UBIGINT))::BIGINT"
            " FROM range(1000) AS r, range($n) AS s ORDER BY r.range, s.range",
            {"run": run_id, "n": examples},
        ).fetchnumpy()
    drawn = next(iter(drawn.values())).reshape(1000, examples)
    con = warehouse.connect(db, read_only=True)
    rows = queries.run_query(con, queries.get_query("pattern_frequency")).to_pylist()
    con.close()
    per_map = np.random.default_rng(0).integers(0, codes.size, (4000, codes.size))
    wider = 0
    for row in rows:
        code = patterns.PATTERN_TYPES.index(row["pattern"])
        assert row["maps"] == int(np.sum(codes == code)) and row["examples"] == examples
        cluster = (codes[drawn] == code).mean(axis=(1, 2))  # every head of each drawn example
        assert (row["share_low"], row["share_high"]) == pytest.approx(
            tuple(np.quantile(cluster, [0.025, 0.975])), abs=1e-12
        )
        one_by_one = (codes.ravel()[per_map] == code).mean(axis=1)
        width, map_width = row["share_high"] - row["share_low"], np.subtract(*np.quantile(one_by_one, [0.975, 0.025]))
        if row["share"] > 0:
            assert width > 1.5 * map_width, (row["pattern"], width, map_width)  # about sqrt(4) = 2 times
            wider += 1
    assert wider >= 3


def test_gallery_shows_typical_then_borderline_maps_by_margin(ingested):
    """pattern_gallery: per type one or two typical maps (the second only with a margin of at
    least 0.8), then at most two borderline ones, every typical margin at least every
    borderline one, and the margins are those of the shipped
    classifier (head_stats.pattern_margin and pattern equal what it gives the stored features)."""
    from attnwh.sql import queries, warehouse

    db, _ = ingested
    con = warehouse.connect(db, read_only=True)
    rows = queries.run_query(con, queries.get_query("pattern_gallery")).to_pylist()
    stored = con.execute(
        f"SELECT {', '.join((*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS))}, pattern, pattern_margin"
        " FROM head_stats WHERE pattern IS NOT NULL"
    ).fetchall()
    con.close()
    values = torch.from_numpy(np.array(stored, np.float32))
    k = len(patterns.FEATURE_COLUMNS)
    code, margin = pattern_model.default().classify(values[:, :k], values[:, k:-2])
    np.testing.assert_array_equal(values[:, -2].numpy(), code.numpy())
    np.testing.assert_allclose(values[:, -1].numpy(), margin.numpy(), atol=1e-6)
    assert rows
    for name in {r["pattern"] for r in rows}:
        kinds = [r["kind"] for r in rows if r["pattern"] == name]
        assert kinds == sorted(kinds, reverse=True) and kinds.count("typical") <= 2 and kinds.count("borderline") <= 2
        typical = [r["margin"] for r in rows if r["pattern"] == name and r["kind"] == "typical"]
        borderline = [r["margin"] for r in rows if r["pattern"] == name and r["kind"] == "borderline"]
        assert all(t >= b for t in typical for b in borderline)
        if borderline:  # there were more maps: the surest is typical, the next one if sure enough
            assert len(typical) == 2 or (len(typical) == 1 and max(borderline) < 0.8)
        assert all(m >= 0.8 for m in typical[1:])


def test_whole_maps_and_tokens_equal_eager_ones(ingested):
    """pattern_maps holds every head's map of each short thumbnail example exactly as HF's
    eager `output_attentions` gives it, and example_tokens its tokens, in order."""
    from transformers import AutoModel, AutoTokenizer

    db, model_dir = ingested
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eager = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    with duckdb.connect(str(db), read_only=True) as con:
        thumbs = con.execute("SELECT DISTINCT example_id FROM pattern_thumbnails ORDER BY 1").fetchall()
        stored = con.execute(
            "SELECT m.example_id, m.layer, m.head, m.n_tokens, m.attention, t.tokens, e.text_a, e.text_b"
            " FROM pattern_maps AS m JOIN example_tokens AS t USING (run_id, example_id)"
            " JOIN examples AS e USING (example_id) ORDER BY ALL"
        ).fetchall()
    assert {r[0] for r in stored} == {r[0] for r in thumbs}  # every sampled example is short here
    assert len(stored) == len(thumbs) * 2 * 4  # layers × heads
    for _, layer, head, n, attention, tokens, text_a, text_b in stored:
        inputs = tokenizer(text_a, text_b, return_tensors="pt")
        assert tokens == tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
        with torch.no_grad():
            maps = eager(**inputs, output_attentions=True).attentions
        assert n == inputs["input_ids"].shape[1]
        np.testing.assert_allclose(np.array(attention).reshape(n, n), maps[layer][0, head].numpy(), atol=1e-6)


def test_named_queries_on_patterns(ingested, monkeypatch, capsys):
    import json

    db, _ = ingested
    code, out, err = run(monkeypatch, capsys, "query", "pattern_frequency", "--db", str(db), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["pattern"] for r in rows] == list(patterns.PATTERN_TYPES)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0) and sum(r["maps"] for r in rows) == 12 * 2 * 4
    code, out, err = run(monkeypatch, capsys, "query", "pattern_by_layer", "--db", str(db), "--format", "json")
    layers = json.loads(out)
    assert code == 0 and len(layers) == 2 * 5
    for layer in (0, 1):
        assert sum(r["share"] for r in layers if r["layer"] == layer) == pytest.approx(1.0)
    code, out, err = run(monkeypatch, capsys, "query", "vertical_targets", "--db", str(db), "--format", "json")
    assert code == 0, err
    for r in json.loads(out):
        assert r["to_cls"] + r["to_sep"] + r["to_punct"] + r["elsewhere"] == pytest.approx(1.0)


def test_reclassify_follows_thresholds_and_comes_back(ingested, monkeypatch, capsys, tmp_path):
    import shutil

    db = tmp_path / "copy.duckdb"
    shutil.copy(ingested[0], db)

    def codes():
        with duckdb.connect(str(db), read_only=True) as con:
            return con.execute("SELECT pattern FROM head_stats ORDER BY run_id, example_id, layer, head").fetchall()

    before = codes()
    everything_vertical = ["--set", "vertical=0", "--set", "mixed_diagonal=2"]
    code, out, err = run(monkeypatch, capsys, "patterns", "reclassify", *everything_vertical, "--db", str(db))
    assert code == 0, err
    # The summary counts every stored map and gives each type its share (the console may wrap it).
    summary = " ".join(out.split())
    assert f"{len(before)} maps labelled by rules" in summary
    assert "vertical 100.0%" in summary and "block 0.0%" in summary, summary
    assert {c for (c,) in codes()} == {patterns.VERTICAL}
    code, out, err = run(monkeypatch, capsys, "patterns", "reclassify", "--db", str(db))
    assert code == 0, err
    assert codes() == before
    code, _, err = run(monkeypatch, capsys, "patterns", "reclassify", "--set", "nope=1", "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--set takes NAME=VALUE" in err


# ---------------------------------------------------------------- labels and the CNN


def _write_labels(path: Path, rows) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "example", "layer", "head", "type"])
        writer.writerows(rows)
    return path


@pytest.mark.slow
def test_cnn_trains_and_classifies_end_to_end(tmp_path, monkeypatch, capsys):
    db = tmp_path / "labelled.duckdb"
    labels = synthetic_maps.write_warehouse(db, synthetic_maps.generate(40, 17))
    csv_path = _write_labels(tmp_path / "labels.csv", labels)
    code, out, err = run(monkeypatch, capsys, "patterns", "import-labels", str(csv_path), "--db", str(db))
    assert code == 0 and "200 labels imported" in out, err
    code, out, err = run(monkeypatch, capsys, "patterns", "train", "--epochs", "40", "--db", str(db))
    assert code == 0, err
    assert "held-out macro F1" in out
    with duckdb.connect(str(db), read_only=True) as con:
        n_train, n_test, f1_cnn, f1_rules, weights = con.execute(
            "SELECT n_train, n_test, f1_cnn, f1_rules, octet_length(weights) FROM pattern_models"
        ).fetchall()[0]
    assert n_train + n_test == 200 and n_test == 50 and weights > 1000
    assert f1_cnn > 0.6 and f1_rules > 0.9  # the rules know these maps; the CNN learns them from 150
    code, out, err = run(monkeypatch, capsys, "patterns", "reclassify", "--classifier", "cnn", "--db", str(db))
    assert code == 0 and "200 maps labelled by CNN 1" in out, err
    code, out, err = run(
        monkeypatch, capsys, "query", "pattern_frequency", "-p", "classifier=cnn", "--db", str(db), "--format", "csv"
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        agree = con.execute(
            "SELECT avg((t.cnn_pattern = l.pattern)::INT) FROM pattern_thumbnails AS t JOIN pattern_labels AS l"
            " USING (run_id, example_id, layer, head)"
        ).fetchall()[0][0]
    assert agree > 0.7


@pytest.mark.parametrize(
    "rows, message",
    [
        ([(1, 1000000001, 0, 0, "spiral")], "line 2: unknown type 'spiral'"),
        ([(1, "x", 0, 0, "block")], "line 2: run, example, layer and head must be integers"),
        ([(1, 1000000001, 0, 0, "block"), (1, 5, 0, 0, "block")], "line 3: no map run 1, example 5"),
        ([(1, 1000000001, 0, 0, "block"), (1, 1000000001, 0, 0, "diagonal")], "line 3: the same map is labelled twice"),
    ],
)
def test_bad_labels_are_one_line(tmp_path, monkeypatch, capsys, rows, message):
    db = tmp_path / "w.duckdb"
    synthetic_maps.write_warehouse(db, synthetic_maps.generate(2, 1))
    code, _, err = run(
        monkeypatch, capsys, "patterns", "import-labels", str(_write_labels(tmp_path / "l.csv", rows)), "--db", str(db)
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM pattern_labels").fetchall()[0][0] == 0


def test_missing_columns_and_untrained_cnn(tmp_path, monkeypatch, capsys):
    db = tmp_path / "w.duckdb"
    synthetic_maps.write_warehouse(db, synthetic_maps.generate(2, 1))
    bad = tmp_path / "bad.csv"
    bad.write_text("run,example,layer\n1,2,3\n", encoding="utf-8")
    code, _, err = run(monkeypatch, capsys, "patterns", "import-labels", str(bad), "--db", str(db))
    assert code == 2 and "missing column(s) head, type" in err
    code, _, err = run(monkeypatch, capsys, "patterns", "reclassify", "--classifier", "cnn", "--db", str(db))
    assert code == 2 and "no trained pattern CNN" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(monkeypatch, capsys, "patterns", "train", "--db", str(db))
    assert code == 2 and "labelled maps have thumbnails" in err


def test_report_knows_the_same_pattern_types():
    from attnwh.reports import charts

    assert charts.PATTERN_TYPES == patterns.PATTERN_TYPES


def test_label_page_choices_and_errors(ingested, tmp_path, monkeypatch, capsys):
    """`patterns label`: filters and the uncertain order pick the maps the stored margins say;
    nothing to show, an unknown type or a missing warehouse is one line and no page."""
    from attnwh.ingest.runs import patterns as pattern_store

    db, _ = ingested
    with duckdb.connect(str(db), read_only=True) as con:
        everything = pattern_store.label_sample(con, limit=None)
        uncertain = pattern_store.label_sample(con, order="uncertain", limit=5)
        layer1 = pattern_store.label_sample(con, layer=1, limit=None)
        margins = con.execute(
            "SELECT pattern_margin FROM head_stats AS s JOIN pattern_thumbnails USING (run_id, example_id, layer, head)"
        ).fetchnumpy()["pattern_margin"]
    assert len(everything) == 3 * 2 * 4 and {m["layer"] for m in layer1} == {1} and len(layer1) == 12
    np.testing.assert_allclose([m["margin"] for m in uncertain], np.sort(margins)[:5], rtol=1e-6)
    seeded = [pattern_store.label_sample(duckdb.connect(str(db), read_only=True), seed=s, limit=6) for s in (1, 1, 2)]
    keys = [[(m["example"], m["layer"], m["head"]) for m in maps] for maps in seeded]
    assert keys[0] == keys[1] != keys[2]

    out = tmp_path / "page.html"
    for args, message in [
        (["--task", "nope"], "no stored maps match"),
        (["--type", "diagonalish"], "unknown type 'diagonalish'"),
        (["--db", str(tmp_path / "none.duckdb")], "no warehouse at"),
    ]:
        code, _, err = run(monkeypatch, capsys, "patterns", "label", str(out), "--db", str(db), *args)
        assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()


@pytest.mark.e2e
def test_gallery_typical_maps_of_the_default_ingest_are_labelled_so_by_eye(tmp_path, monkeypatch, capsys):
    """The report's typical maps must be maps people label as that type. The default ingest
    (bundled MiniLM, bundled sample) shows these typical maps; each was labelled by eye under
    docs/pattern_labels.md, without its stored type (tests/fixtures/gallery_typical.csv). A
    change that shows another map as typical fails here until that map is labelled by eye
    and added (docs/pattern_labels.md, "The gallery's typical maps")."""
    import json

    db = tmp_path / "g.duckdb"
    code, _, err = run(monkeypatch, capsys, "ingest", "--db", str(db))
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "query", "pattern_gallery", "--db", str(db), "--format", "json")
    assert code == 0, err
    typical = [r for r in json.loads(out) if r["kind"] == "typical"]
    with (Path(__file__).parent / "fixtures" / "gallery_typical.csv").open() as handle:
        by_eye = {(int(r["example"]), int(r["layer"]), int(r["head"])): r["type"] for r in csv.DictReader(handle)}
    assert {r["pattern"] for r in typical} == set(patterns.PATTERN_TYPES)
    for r in typical:
        key = (r["example_id"], r["layer"], r["head"])
        assert key in by_eye, f"typical {r['pattern']} map {key} was never labelled by eye"
        assert by_eye[key] == r["pattern"], (key, r["pattern"], by_eye[key])
