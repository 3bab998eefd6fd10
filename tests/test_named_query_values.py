"""The values of named queries that only the format smoke tests ran: finetune_runs,
model_lineage, run_provenance, frame_coverage, head_lenses, mixing_by_layer, head_thumbnails
and label_maps, each on a warehouse the real commands filled, against what the test gave
those commands (data files, options, models), the eager model's own maps, or a plain
computation over the base tables; never against the query's own output."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
import torch

from attnwh.api import Warehouse
from attnwh.ingest.measures.patterns import PATTERN_TYPES
from helpers import cli_main, pair_args, write_pairs
from test_frames import BLOCKS, framebert_text

COLUMNS = ["--text-column", "premise", "--pair-column", "hypothesis", "--label-column", "label"]
MAP_TOKENS = 39  # whole maps for thumbnail examples up to this long: the pairs have 36 to 42 tokens
TRAIN, DEV = 20, 10  # rows of the two data files
# test_frames' annotations, each filter's a different number of times: block 0 (kept, twice),
# 1 (links too close, 4 times), 2 (no elements, once), 3 (a 13-word sentence, twice), 4 (a
# 4-word element, 3 times), 5 (kept, another sentence).
FRAME_BLOCKS = [0, 1, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 0]


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model_dir) -> dict:
    """A warehouse the real commands filled: two fine-tunings of one tiny BERT (from its weights
    and from scratch), statistics runs of the tuned model with value zeroing per head, of the
    base with value zeroing per layer and of the base with no mixing at all, and a frames run
    of each model (the tuned one with --limit 1); with what each command was given."""
    tmp = tmp_path_factory.mktemp("named-values")
    db = tmp / "w.duckdb"
    base = tiny_model_dir("bert")
    train, dev = write_pairs(tmp / "train.tsv", TRAIN), write_pairs(tmp / "dev.tsv", DEV)
    tuned, scratch = tmp / "tuned", tmp / "scratch"
    data = ["--data", str(train), "--eval-data", str(dev), *COLUMNS, "--db", str(db), "--device", "cpu"]
    cli_main("finetune", "--model", str(base), "--task", "pairs", *data, "--out", str(tuned), "--epochs", "2")
    cli_main(
        "finetune", "--model", str(base), "--task", "pairs-b", *data, "--out", str(scratch), "--epochs", "1",
        "--lr", "1e-3", "--warmup", "0.2", "--max-train-examples", "12", "--from-scratch",
    )  # fmt: skip
    stats = [*pair_args(dev, db), "--device", "cpu", "--map-tokens", str(MAP_TOKENS)]
    cli_main("ingest", "--model", str(tuned), "--task", "pairs", *stats, "--thumbnails", "4", "--value-zeroing", "head")
    cli_main("ingest", "--model", str(base), "--task", "pairs", *stats, "--thumbnails", "3", "--value-zeroing", "layer")
    cli_main("ingest", "--model", str(base), "--task", "plain", *stats, "--thumbnails", "0", "--no-mixing")
    # The shipped classifier calls nearly every tiny map heterogeneous; the rules with a lower
    # vertical threshold give the maps more than one type to tell apart.
    cli_main("patterns", "reclassify", "--classifier", "rules", "--set", "vertical=0.3", "--db", str(db))
    framenet = tmp / "fn-tiny.conll"
    framenet.write_text(framebert_text([BLOCKS[i] for i in FRAME_BLOCKS]), encoding="utf-8")
    frames = ["ingest", "relations", "--framenet", str(framenet), "--db", str(db)]
    cli_main(*frames, "--model", str(base))
    cli_main(*frames, "--model", str(tuned), "--limit", "1")
    return {"db": db, "base": base, "tuned": tuned, "scratch": scratch, "train": train, "dev": dev}


@pytest.fixture(scope="module")
def wh(built) -> Warehouse:
    return Warehouse(built["db"])


def base_tables(built, statement: str, *params) -> pl.DataFrame:
    """A plain SELECT over the base tables, for the reference side of a comparison."""
    with duckdb.connect(str(built["db"]), read_only=True) as con:
        return pl.from_arrow(con.sql(statement, params=list(params)).to_arrow_table())


def rows_of(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def assert_frames_close(actual: pl.DataFrame, expected: pl.DataFrame, keys: list[str]) -> None:
    """The same rows (matched on `keys`) and the same values, floats to 1e-9, NULLs where NULL."""
    assert actual.height == expected.height > 0
    joined = actual.join(expected, on=keys, how="full", suffix="_ref", nulls_equal=True)
    assert joined.height == actual.height, "rows differ"
    for column in expected.columns:
        if column in keys:
            continue
        got, ref = joined[column].to_list(), joined[f"{column}_ref"].to_list()
        for key, a, b in zip(joined.select(keys).rows(), got, ref):
            if isinstance(b, float) and a is not None:
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (column, key, a, b)
            else:
                assert a == b, (column, key, a, b)


# ---------------------------------------------------------------- models and runs


def test_model_lineage_names_each_tuned_model_with_its_base_and_task(built, wh):
    lineage = wh.query("model_lineage")
    expected = {
        str(built["base"]): (None, None),
        str(built["tuned"]): (str(built["base"]), "pairs"),
        str(built["scratch"]): (str(built["base"]), "pairs-b"),
    }
    assert {r["model"]: (r["base_model"], r["finetuned_task"]) for r in lineage.iter_rows(named=True)} == expected
    assert lineage["model_id"].to_list() == sorted(lineage["model_id"].to_list())


def test_finetune_runs_are_the_settings_given_and_the_scores_stored(built, wh):
    found = wh.query("finetune_runs")
    assert found["model"].to_list() == [str(built["tuned"]), str(built["scratch"])]
    given = [
        # (task, from scratch, train examples, epochs, learning rate, warm-up): what the commands got
        ("pairs", False, TRAIN, 2.0, 5e-5, 0.1),
        ("pairs-b", True, 12, 1.0, 1e-3, 0.2),
    ]
    columns = ["task", "from_scratch", "train_examples", "epochs", "learning_rate", "warmup"]
    assert found.select(columns).rows() == given
    assert set(found["base_model"]) == {str(built["base"])}
    assert set(found["split"]) == {"train"} and set(found["eval_split"]) == {"dev"}
    scores = base_tables(built, "SELECT run_id, metric, value, n_examples FROM scores ORDER BY run_id, metric")
    for row in found.iter_rows(named=True):
        mine = scores.filter(pl.col("run_id") == row["run_id"])
        assert row["scores"] == ", ".join(f"{m}={v:.4f}" for m, v in zip(mine["metric"], mine["value"]))
        assert row["scored_examples"] == DEV  # the eval file's rows
        loss = base_tables(built, "SELECT final_loss, train_seconds FROM finetunes WHERE run_id = ?", row["run_id"])
        assert row["final_loss"] == pytest.approx(round(loss["final_loss"][0], 4), abs=1e-12)
        assert row["train_seconds"] == pytest.approx(round(loss["train_seconds"][0], 1), abs=1e-12)
    assert "accuracy=" in found["scores"][0]
    assert wh.query("finetune_runs", task="pairs-b")["run_id"].to_list() == found["run_id"].to_list()[1:]
    assert wh.query("finetune_runs", model=str(built["tuned"]))["run_id"].to_list() == found["run_id"].to_list()[:1]


def test_run_provenance_describes_the_data_and_the_model(built, wh):
    from transformers import AutoTokenizer

    found = wh.query("run_provenance")
    stats = found.filter(pl.col("kind") == "statistics")
    assert stats["task"].to_list() == ["pairs", "pairs", "plain"]
    assert stats["model"].to_list() == [str(built["tuned"]), str(built["base"]), str(built["base"])]
    tokenizer = AutoTokenizer.from_pretrained(built["base"])
    dev = rows_of(built["dev"])
    lengths = [len(tokenizer(r["premise"], r["hypothesis"])["input_ids"]) for r in dev]
    hashes = dict(base_tables(built, "SELECT name, weights_hash FROM models").rows())
    for row in stats.iter_rows(named=True):
        assert (row["n_examples"], row["n_truncated"], row["status"]) == (DEV, 0, "complete")
        assert row["mean_tokens"] == pytest.approx(round(float(np.mean(lengths)), 1), abs=1e-9)
        assert row["sample_text"] == dev[0]["premise"]  # the file's first row
        assert (row["family"], row["num_layers"], row["num_heads"]) == ("bert", 2, 4)
        assert row["weights_hash"] == hashes[row["model"]][:12] and len(row["weights_hash"]) == 12
        assert row["dataset"] == built["dev"].name and row["dtype"] == "float32" and row["device"] == "cpu"
        assert '"torch"' in row["versions"] and row["started_at"] <= row["finished_at"]
    tuning = found.filter(pl.col("kind") == "finetune")
    assert tuning["n_examples"].to_list() == [TRAIN, 12]
    assert found["run_id"].to_list() == sorted(found["run_id"].to_list())
    assert wh.query("run_provenance", task="plain")["run_id"].to_list() == stats["run_id"].to_list()[2:]


def test_frame_coverage_counts_what_the_filters_did(built, wh):
    found = wh.query("frame_coverage")
    assert found["model"].to_list() == [str(built["base"]), str(built["tuned"])]
    # FRAME_BLOCKS counted by hand: 13 read; 1 without elements, 2 with a long sentence, 3 with
    # a long element, 4 with links too close; 3 kept, of 2 sentences; all measured, or one of
    # them with --limit 1. The paper's settings: 12 words, 3 words, 2 apart.
    columns = ["annotations_read", "no_elements", "long_sentence", "long_element", "too_close", "kept"]
    columns += ["measured", "sentences", "max_sentence_words", "max_element_words", "min_distance"]
    assert found.select(columns).rows() == [(13, 1, 2, 3, 4, 3, 3, 2, 12, 3, 2), (13, 1, 2, 3, 4, 3, 1, 1, 12, 3, 2)]
    assert set(found["dataset"]) == {"fn-tiny.conll"}
    assert wh.query("frame_coverage", model=str(built["tuned"]))["run_id"].to_list() == found["run_id"].to_list()[1:]


# ---------------------------------------------------------------- context mixing


TARGETS = {"[CLS]": "cls", "[SEP]": "sep", "punctuation": "punct", "self": "self", "previous": "prev", "next": "next"}


def means(frame: pl.DataFrame, keys: list[str], columns: list[str]) -> dict[tuple, dict[str, float | None]]:
    """Per group of `keys`: the mean of each column over the group's rows (None where all are
    NULL), computed row by row in Python."""
    groups: dict[tuple, list[dict]] = {}
    for row in frame.iter_rows(named=True):
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    out = {}
    for key, rows in groups.items():
        out[key] = {}
        for c in columns:
            values = [r[c] for r in rows if r[c] is not None]
            out[key][c] = float(np.mean(values)) if values else None
        out[key]["examples"] = len({r["example_id"] for r in rows})
    return out


def test_head_lenses_are_the_means_of_the_stored_rows(built, wh):
    stats = base_tables(built, "SELECT * FROM head_stats")
    heads = base_tables(built, "SELECT * FROM head_mixing")
    layers = base_tables(built, "SELECT * FROM layer_mixing")
    names = base_tables(
        built, "SELECT run_id, m.name AS model, task, split FROM runs JOIN models AS m USING (model_id)"
    )
    meta = {r[0]: r[1:] for r in names.rows()}
    w = means(
        stats,
        ["run_id", "layer", "head"],
        [f"to_{t}" for t in TARGETS.values()] + ["norm_to_cls", "norm_to_sep", "norm_to_punct"],
    )
    h = means(
        heads,
        ["run_id", "layer", "head"],
        [f"{p}_to_{t}" for p in ("rn", "vz") for t in TARGETS.values()] + ["rn_residual"],
    )
    z = means(layers, ["run_id", "layer"], [f"vz_to_{t}" for t in TARGETS.values()])
    expected = []
    for (run_id, layer, head), weights in w.items():
        mixed = h.get((run_id, layer, head), {})
        zeroed = z.get((run_id, layer), {})
        scope = (
            "head" if mixed.get("vz_to_cls") is not None else "layer" if zeroed.get("vz_to_cls") is not None else None
        )
        for target, t in TARGETS.items():
            own = mixed.get(f"vz_to_{t}")
            expected.append(
                {
                    "model": meta[run_id][0], "task": meta[run_id][1], "split": meta[run_id][2],
                    "run_id": run_id, "layer": layer, "head": head, "target": target,
                    "weight": weights[f"to_{t}"],
                    "value_norm": weights.get(f"norm_to_{t}"),
                    "residual_ln": mixed.get(f"rn_to_{t}"),
                    "value_zeroing": own if own is not None else zeroed.get(f"vz_to_{t}"),
                    "vz_scope": scope,
                    "residual_vs_head": mixed.get("rn_residual"),
                    "examples": weights["examples"],
                }
            )  # fmt: skip
    found = wh.query("head_lenses")
    assert_frames_close(found, pl.DataFrame(expected), ["run_id", "layer", "head", "target"])
    # Each run's own lens: value zeroing per head, per layer, and neither (no mixing at all).
    scopes = dict(found.group_by("run_id").agg(pl.col("vz_scope").unique()).rows())
    assert sorted(str(v) for v in scopes.values()) == ["['head']", "['layer']", "[None]"]
    assert found["value_zeroing"].drop_nulls().std() > 1e-3 and found["residual_ln"].drop_nulls().std() > 1e-3
    # Rows in the documented order; the parameters narrow them.
    order = found.with_columns(pl.col("target").replace_strict(list(TARGETS), list(range(6))).alias("k"))
    assert order.rows() == order.sort("model", "task", "split", "run_id", "layer", "head", "k").rows()
    narrowed = wh.query("head_lenses", layer=1, head=2, task="plain")
    assert_frames_close(
        narrowed, found.filter((pl.col("layer") == 1) & (pl.col("head") == 2) & (pl.col("task") == "plain")),
        ["run_id", "layer", "head", "target"],
    )  # fmt: skip


def test_mixing_by_layer_is_the_means_of_the_stored_rows(built, wh):
    stats = base_tables(built, "SELECT * FROM head_stats")
    heads = base_tables(built, "SELECT * FROM head_mixing")
    layers = base_tables(built, "SELECT * FROM layer_mixing")
    names = base_tables(
        built, "SELECT run_id, m.name AS model, task, split FROM runs JOIN models AS m USING (model_id)"
    )
    meta = {r[0]: r[1:] for r in names.rows()}
    four = {k: v for k, v in TARGETS.items() if v in ("cls", "sep", "punct", "self")}
    w = means(
        stats, ["run_id", "layer"], [f"to_{t}" for t in four.values()] + ["norm_to_cls", "norm_to_sep", "norm_to_punct"]
    )
    h = means(heads, ["run_id", "layer"], [f"rn_to_{t}" for t in four.values()])
    lm = means(
        layers,
        ["run_id", "layer"],
        [f"{p}_to_{t}" for p in ("rn", "vz") for t in four.values()]
        + ["mixing_ratio", "mixing_share", "residual_share"],
    )
    expected = []
    for (run_id, layer), weights in w.items():
        mixed, block = h.get((run_id, layer), {}), lm.get((run_id, layer), {})
        for target, t in four.items():
            expected.append(
                {
                    "model": meta[run_id][0], "task": meta[run_id][1], "split": meta[run_id][2],
                    "run_id": run_id, "layer": layer, "target": target,
                    "weight": weights[f"to_{t}"], "value_norm": weights.get(f"norm_to_{t}"),
                    "heads_ln": mixed.get(f"rn_to_{t}"), "layer_ln": block.get(f"rn_to_{t}"),
                    "value_zeroing": block.get(f"vz_to_{t}"),
                    "mixing_ratio": block.get("mixing_ratio"), "mixing_share": block.get("mixing_share"),
                    "residual_share": block.get("residual_share"), "examples": weights["examples"],
                }
            )  # fmt: skip
    found = wh.query("mixing_by_layer")
    assert_frames_close(found, pl.DataFrame(expected), ["run_id", "layer", "target"])
    assert found["examples"].unique().to_list() == [DEV]
    assert found["value_zeroing"].null_count() < found.height  # the per-layer run fills it
    assert found["mixing_ratio"].drop_nulls().n_unique() > 2
    assert wh.query("mixing_by_layer", task="plain")["heads_ln"].null_count() == 2 * 4  # no mixing stored


# ---------------------------------------------------------------- stored maps


def stored_maps(built) -> pl.DataFrame:
    """Every thumbnail of the statistics runs with its example, stored type and features, the
    gallery hash and the model, from the base tables."""
    return base_tables(
        built,
        "SELECT t.run_id, t.example_id, t.layer, t.head, t.n_tokens, t.thumbnail, s.pattern AS code,"
        " s.col_cls, s.col_sep, s.col_punct, s.col_other, s.band, s.block, s.pattern_margin,"
        " hash(t.run_id, t.example_id, t.layer, t.head) AS h, m.name AS model, r.task, r.split"
        " FROM pattern_thumbnails AS t JOIN head_stats AS s USING (run_id, example_id, layer, head)"
        " JOIN runs AS r USING (run_id) JOIN models AS m USING (model_id) WHERE r.kind = 'statistics'",
    )


def test_head_thumbnails_pick_the_first_maps_by_the_gallery_hash(built, wh):
    stored = stored_maps(built)
    sampled = dict(stored.group_by("model").agg(pl.col("example_id").n_unique()).rows())
    assert sampled == {str(built["tuned"]): 4, str(built["base"]): 3}  # --thumbnails of each run
    found = {}
    for per_head in (1, 2, 3):
        expected = []
        for _, group in stored.group_by(["run_id", "layer", "head"]):
            ordered = sorted(group.iter_rows(named=True), key=lambda r: (r["h"], r["example_id"]))
            expected += ordered[:per_head]
        # The documented order: layer, head, model, task, run, then the hash.
        expected.sort(key=lambda r: (r["layer"], r["head"], r["model"], r["task"], r["run_id"], r["h"]))
        columns = ["model", "task", "split", "run_id", "layer", "head", "example_id", "n_tokens", "thumbnail"]
        reference = [{**{c: r[c] for c in columns}, "pattern": PATTERN_TYPES[r["code"]]} for r in expected]
        found[per_head] = wh.query("head_thumbnails", **({} if per_head == 2 else {"per_head": per_head}))
        assert found[per_head].select(*columns, "pattern").to_dicts() == reference, per_head
    assert len(set(found[3]["pattern"])) > 1, "the maps should have more than one type"
    one = wh.query("head_thumbnails", layer=1, head=3, model=str(built["tuned"]))
    pick = (pl.col("layer") == 1) & (pl.col("head") == 3) & (pl.col("model") == str(built["tuned"]))
    assert one.height == 2 and one.to_dicts() == found[2].filter(pick).to_dicts()


def test_label_maps_hold_every_sampled_map_as_the_eager_model_computes_it(built, wh):
    from transformers import AutoModel, AutoTokenizer

    keys = ["run_id", "example_id", "layer", "head"]
    stored = {tuple(r[k] for k in keys): r for r in stored_maps(built).iter_rows(named=True)}
    found = wh.query("label_maps")
    assert found.select(keys).rows() == sorted(stored)  # every sampled map, in run, example, layer, head order
    texts = {r[0]: r[1:] for r in base_tables(built, "SELECT example_id, text_a, text_b FROM examples").rows()}
    features = ["col_cls", "col_sep", "col_punct", "col_other", "band", "block"]
    models: dict[str, tuple] = {}
    whole = cut = 0
    for row in found.iter_rows(named=True):
        key = tuple(row[k] for k in keys)
        ref = stored[key]
        assert row["pattern"] == PATTERN_TYPES[ref["code"]] and row["margin"] == ref["pattern_margin"], key
        assert [row[c] for c in features] == [ref[c] for c in features], key
        assert row["thumbnail"] == ref["thumbnail"] and row["model"] == ref["model"], key
        if row["model"] not in models:
            models[row["model"]] = (
                AutoModel.from_pretrained(row["model"], attn_implementation="eager").eval(),
                AutoTokenizer.from_pretrained(row["model"]),
            )
        model, tokenizer = models[row["model"]]
        enc = tokenizer(*texts[row["example_id"]], return_tensors="pt")
        n = enc["input_ids"].shape[1]
        assert row["n_tokens"] == n, key
        if n > MAP_TOKENS:  # too long to keep whole: the thumbnail only
            assert row["attention"] is None and row["tokens"] is None, key
            cut += 1
            continue
        whole += 1
        assert row["tokens"] == tokenizer.convert_ids_to_tokens(enc["input_ids"][0]), key
        with torch.no_grad():
            a = model(**enc, output_attentions=True).attentions[row["layer"]][0, row["head"]].numpy()
        np.testing.assert_allclose(np.array(row["attention"]).reshape(n, n), a, atol=1e-5, err_msg=str(key))
    assert whole and cut, "the sample should hold examples both within and beyond --map-tokens"
    # The parameters narrow the rows.
    run_id, pattern = found["run_id"][0], found["pattern"][0]
    narrowed = wh.query("label_maps", run=run_id, layer=1, pattern=pattern)
    pick = (pl.col("run_id") == run_id) & (pl.col("layer") == 1) & (pl.col("pattern") == pattern)
    assert narrowed.height > 0 and narrowed.to_dicts() == found.filter(pick).to_dicts()
