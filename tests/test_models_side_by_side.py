"""Models side by side in one warehouse: two tiny random decoders of different depth and
grouping (a Llama of 2 layers, 4 query heads on 2 key/value heads; a Qwen2 of 3 layers, 4
query heads on 1) read on the same prose, probes and text. The named query
models_side_by_side is checked against the same numbers computed here from the stored tables
with plain SQL and polars, at each grain (relative depth in bins, layer, key/value group), and
the report's comparison section draws them with a model selector (in Chromium too)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from attnwh.errors import UsageError
from attnwh.sql.queries import get_query, run_query
from helpers import cli_main
from test_report_browser import browser, open_offline  # noqa: F401
from tiny_models import make_tiny_decoder

SHAPES = {"llama": (2, 4), "qwen2": (3, 4)}  # family: (layers, query heads); KV heads from the family


def make_lm(family: str, folder: Path, layers: int, heads: int) -> Path:
    base = make_tiny_decoder(family, folder / "base", layers, heads, seed=5, positions=640)
    torch.manual_seed(1)
    out = folder / f"{family}-{layers}x{heads}"
    AutoModelForCausalLM.from_pretrained(base).save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """Both models: a statistics run on 4 prose examples, an induction and a needle head-roles
    run of 3 probes each, a random-token and a text run of 4 probes of 20 tokens, a restriction
    run on 2 sequences, and the findings page's streaming, loss-curve, massive-ablation and
    pass-key head-set runs, each as small as it goes. Some stored hidden-state entries
    are then made massive, so the query has massive activations to find in random weights."""
    tmp = tmp_path_factory.mktemp("side-by-side")
    db = tmp / "both.duckdb"
    for family, (layers, heads) in SHAPES.items():
        model = str(make_lm(family, tmp / family, layers, heads))
        common = ["--model", model, "--device", "cpu", "--db", str(db)]
        cli_main("ingest", *common, "--task", "prose", "--limit", "4", "--max-length", "24")
        cli_main("ingest", "roles", *common, "--examples", "3", "--repeat-length", "10", "--context-length", "160",
                 "--depths", "0,1", "--local-window", "8")  # fmt: skip
        cli_main("ingest", "roles", *common, "--examples", "4", "--probes", "random,text", "--sink-length", "20")
        cli_main("ingest", "restriction", *common, "--sink-tokens", "2", "--window", "4", "--context-length", "96",
                 "--limit", "2", "--needles", "0")  # fmt: skip
        # The findings page's other measurements, each as small as it goes.
        cli_main("ingest", "streaming", *common, "--sink-tokens", "0,4", "--window", "8", "--context-lengths", "48",
                 "--limit", "3")  # fmt: skip
        cli_main("ingest", "loss-curve", *common, "--context-length", "560", "--limit", "2")
        cli_main("ingest", "massive-ablation", *common, "--context-length", "48", "--limit", "3",
                 "--min-magnitude", "0", "--ratio", "3")  # fmt: skip
        cli_main("ingest", "ablation", *common, "--probe", "passkey", "--max-length", "96", "--limit", "3",
                 "--mode", "zero", "--no-sweep", "--disable-top", "retrieval:2", "--random-heads", "2",
                 "--draws", "2")  # fmt: skip
    with duckdb.connect(str(db)) as con:
        # Every third (example, layer)'s largest entry becomes massive: > 100 and > 1000 × median.
        con.execute(
            "UPDATE massive_activations SET magnitude = 2000 * median + 200 WHERE (example_id + layer) % 3 = 0 "
            "AND dim = (SELECT min(dim) FROM massive_activations AS b WHERE b.run_id = massive_activations.run_id "
            "AND b.example_id = massive_activations.example_id AND b.layer = massive_activations.layer)"
        )
    return db


def side_by_side(db: Path, **params) -> pl.DataFrame:
    with duckdb.connect(str(db), read_only=True) as con:
        frame = pl.from_arrow(run_query(con, get_query("models_side_by_side"), params, check=True))
    assert isinstance(frame, pl.DataFrame)
    return frame


def plain_units(db: Path, eps: float, budget: float) -> pl.DataFrame:
    """Every unit of every measure, from the stored tables: (model, run_id, num_layers, measure,
    layer, kv_group, x)."""
    with duckdb.connect(str(db), read_only=True) as con:
        models = con.sql(
            "SELECT r.run_id, m.name AS model, m.num_layers, m.num_heads, m.num_key_value_heads "
            "FROM runs r JOIN models m USING (model_id)"
        ).pl()
        stats = con.sql("SELECT run_id, layer, head, avg(to_cls) AS x FROM head_stats GROUP BY ALL").pl()
        roles = con.sql(
            "SELECT run_id, layer, head, avg(induction) AS induction, avg(previous_token) AS previous_token, "
            "avg(retrieval) AS retrieval FROM head_roles GROUP BY ALL"
        ).pl()
        massive = con.sql(
            "SELECT run_id, example_id, layer, max(CASE WHEN magnitude > 100 AND magnitude > 1000 * median "
            "THEN 1.0 ELSE 0.0 END) AS x FROM massive_activations GROUP BY ALL"
        ).pl()
        groups = con.sql("SELECT run_id, layer, kv_group, rank FROM restriction_groups").pl()
        plan = con.sql("SELECT run_id, k, delta FROM restriction_plan").pl()
    heads = stats.join(models, on="run_id").with_columns(
        kv_group=pl.col("head") // (pl.col("num_heads") // pl.col("num_key_value_heads"))
    )
    role_heads = roles.join(models, on="run_id").with_columns(
        kv_group=pl.col("head") // (pl.col("num_heads") // pl.col("num_key_value_heads"))
    )
    chosen = plan.filter(pl.col("delta") <= budget).group_by("run_id").agg(k=pl.col("k").max())
    kept = groups.join(chosen, on="run_id", how="left").with_columns(
        x=(pl.col("rank") > pl.col("k").fill_null(0)).cast(pl.Float64)
    )
    cols = ["run_id", "layer", "kv_group", "measure", "x"]
    induction = role_heads.filter(pl.col("induction").is_not_null())
    needles = role_heads.filter(pl.col("retrieval").is_not_null())
    parts = [
        heads.with_columns(measure=pl.lit("first_token")),
        heads.with_columns(measure=pl.lit("sink_share"), x=(pl.col("x") > eps).cast(pl.Float64)),
        massive.with_columns(measure=pl.lit("massive"), kv_group=pl.lit(None, pl.Int64)),
        induction.with_columns(measure=pl.lit("induction_max"), x=pl.col("induction")),
        induction.with_columns(measure=pl.lit("previous_token_max"), x=pl.col("previous_token")),
        needles.with_columns(measure=pl.lit("retrieval_share"), x=(pl.col("retrieval") > 0.1).cast(pl.Float64)),
        kept.with_columns(measure=pl.lit("kept_whole")),
    ]
    units = pl.concat([p.select(pl.col(c).cast(pl.Float64 if c == "x" else None) if c == "x" else pl.col(c)
                                for c in cols).with_columns(pl.col("layer", "kv_group").cast(pl.Int64))
                       for p in parts])  # fmt: skip
    return units.join(models.select("run_id", "model", "num_layers"), on="run_id")


def expected(units: pl.DataFrame, keys: list[str]) -> dict[tuple, tuple[float, int]]:
    value = (
        pl.when(pl.col("measure").first().str.ends_with("_max")).then(pl.col("x").max()).otherwise(pl.col("x").mean())
    )
    grouped = units.group_by(["model", "run_id", "measure", *keys]).agg(value=value, units=pl.len())
    return {tuple(r[:-2]): (r[-2], r[-1]) for r in grouped.select(["model", "run_id", "measure", *keys, "value",
                                                                    "units"]).iter_rows()}  # fmt: skip


def got(frame: pl.DataFrame, keys: list[str]) -> dict[tuple, tuple[float, int]]:
    return {tuple(r[:-2]): (r[-2], r[-1]) for r in frame.select(["model", "run_id", "measure", *keys, "value",
                                                                 "units"]).iter_rows()}  # fmt: skip


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key][1] == b[key][1], key
        assert math.isclose(a[key][0], b[key][0], rel_tol=1e-9, abs_tol=1e-12), (key, a[key], b[key])


def test_the_two_models_differ_in_depth_and_grouping(warehouse):
    with duckdb.connect(str(warehouse), read_only=True) as con:
        shapes = con.sql("SELECT name, num_layers, num_heads, num_key_value_heads FROM models ORDER BY name").fetchall()
    assert [s[1:] for s in shapes] == [(2, 4, 2), (3, 4, 1)]


@pytest.mark.parametrize(("eps", "budget"), [(0.3, 0.05), (0.1, 0.0), (0.5, 10.0)])
def test_by_layer_and_by_group_match_plain_sql(warehouse, eps, budget):
    units = plain_units(warehouse, eps, budget)
    by_layer = side_by_side(warehouse, by="layer", eps=eps, budget=budget)
    assert_same(got(by_layer, ["layer"]), expected(units, ["layer"]))
    by_group = side_by_side(warehouse, by="group", eps=eps, budget=budget)
    assert_same(got(by_group, ["layer", "kv_group"]), expected(units, ["layer", "kv_group"]))
    # Relative depth of a layer: layer / layers, the next layer's depth where it ends.
    for r in by_layer.iter_rows(named=True):
        assert r["depth_from"] == r["layer"] / r["num_layers"] and r["depth_to"] == (r["layer"] + 1) / r["num_layers"]
    # Every measure is there for both models, and the massive entries made above are found.
    assert by_layer.group_by("model").agg(pl.col("measure").n_unique())["measure"].to_list() == [7, 7]
    assert by_layer.filter(pl.col("measure") == "massive")["value"].max() > 0
    # Where the grouping differs: 2 groups per layer on the Llama, 1 on the Qwen2.
    groups = by_group.filter(pl.col("measure") == "kept_whole").group_by("model").agg(pl.len()).sort("model")
    assert groups["len"].to_list() == [2 * 2, 3 * 1]


@pytest.mark.parametrize("bins", [1, 2, 5])
def test_by_relative_depth_matches_plain_sql(warehouse, bins):
    units = plain_units(warehouse, 0.3, 0.05).with_columns(
        depth_bin=(pl.col("layer") * bins / pl.col("num_layers")).floor().cast(pl.Int64)
    )
    frame = side_by_side(warehouse, bins=bins)
    assert_same(got(frame, ["depth_bin"]), expected(units, ["depth_bin"]))
    for r in frame.iter_rows(named=True):
        assert (r["depth_from"], r["depth_to"]) == (r["depth_bin"] / bins, (r["depth_bin"] + 1) / bins)
        assert (
            r["depth_from"] <= r["first_layer"] / r["num_layers"] <= r["last_layer"] / r["num_layers"] < r["depth_to"]
        )
    if bins == 1:  # the whole model: one row per model, run and measure
        assert frame.select("model", "run_id", "measure").is_unique().all()


def test_filters_and_refusals(warehouse):
    name = next(m for m in side_by_side(warehouse)["model"] if m.endswith("llama-2x4"))
    llama = side_by_side(warehouse, model=name, by="layer")
    assert set(llama["model"]) == {name} and llama.height
    assert set(side_by_side(warehouse, task="induction")["measure"]) == {"induction_max", "previous_token_max"}
    assert side_by_side(warehouse, task="random").height == 0  # random-token probes define no compared measure
    with pytest.raises(UsageError, match="by 'width' is not one of depth, layer, group"):
        side_by_side(warehouse, by="width")
    with pytest.raises(UsageError, match="bins must be 1 or more"):
        side_by_side(warehouse, bins=0)
    with pytest.raises(UsageError, match="budget must be 0 or more"):
        side_by_side(warehouse, budget=-1)


def test_a_copy_without_runs_gives_an_empty_table(warehouse, tmp_path):
    copy = tmp_path / "empty.duckdb"
    shutil.copy(warehouse, copy)
    with duckdb.connect(str(copy)) as con:
        for table in ("head_stats", "head_roles", "massive_activations", "restriction_groups", "restriction_plan"):
            con.execute(f"DELETE FROM {table}")
    assert side_by_side(copy).height == 0


SECTION = "models-side-by-side"


@pytest.fixture(scope="module")
def report(warehouse):
    from attnwh.reports.build import build_report

    return build_report(warehouse, token_maps=False)


def blocks(report) -> dict:
    section = next(s for s in report.sections if s.section.id == SECTION)
    assert section.note is None
    return {b.id: b for b in section.blocks}


def test_the_report_table_holds_each_model_whole(warehouse, report):
    whole = side_by_side(warehouse, bins=1)
    table = blocks(report)["table-models-side-by-side"]
    assert table.columns[:2] == ("model", "shape") and len(table.rows) == 2
    labels = table.columns[2:]
    for row in table.rows:
        model = row[0][-1]
        assert row[1] == [f"{n} layers" for n in whole.filter(pl.col("model") == model)["num_layers"][:1]] + [
            f"4 heads on {whole.filter(pl.col('model') == model)['num_key_value_heads'][0]} KV"
        ]
        for label, cell in zip(labels, row[2:], strict=True):
            measure = next(k for k, v in MEASURE_LABELS().items() if v == label)
            runs = whole.filter((pl.col("model") == model) & (pl.col("measure") == measure)).sort("run_id")
            assert cell == [f"{r['value']:.3f} (run {r['run_id']} · {r['task']})" for r in runs.iter_rows(named=True)]


def MEASURE_LABELS() -> dict[str, str]:
    from attnwh.reports.side_by_side_charts import MEASURES

    return MEASURES


def chart_rows(block) -> list[dict]:
    spec = block.spec()
    return [row for rows in spec["datasets"].values() for row in rows]


def test_the_report_charts_draw_the_query_with_a_model_selector(warehouse, report, tmp_path):
    from attnwh.reports.build import write_images
    from attnwh.reports.side_by_side_charts import GROUP_MEASURES, MODEL_SELECTOR

    found = blocks(report)
    depth = found["chart-models-by-depth"]
    by_layer = side_by_side(warehouse, by="layer")
    drawn = {(r["model"], r["run_id"], r["measure"], r["layer"]): r["value"] for r in chart_rows(depth)}
    assert drawn == {(r["model"], r["run_id"], r["measure"], r["layer"]): r["value"]
                     for r in by_layer.iter_rows(named=True)}  # fmt: skip
    spec = depth.spec()
    params = [p for p in spec["params"] if p["name"] == MODEL_SELECTOR]
    assert params and params[0]["bind"] == "legend" and params[0]["select"]["fields"] == ["name"]
    by_group = side_by_side(warehouse, by="group").filter(pl.col("measure").is_in(GROUP_MEASURES))
    cells = {(r["model"], r["measure"], r["layer"], r["kv_group"]): r["value"]
             for r in chart_rows(found["chart-models-by-group"])}  # fmt: skip
    assert cells == {(r["model"], r["measure"], r["layer"], r["kv_group"]): r["value"]
                     for r in by_group.iter_rows(named=True)}  # fmt: skip
    written = write_images(report, tmp_path, "png", only={"chart-models-by-depth", "chart-models-by-group"})
    assert [p.stat().st_size > 5_000 for p in written] == [True, True]


def test_one_model_gets_the_note(warehouse):
    from attnwh.reports.build import build_report

    name = next(m for m in side_by_side(warehouse)["model"] if m.endswith("qwen2-3x4"))
    section = next(s for s in build_report(warehouse, model=name, token_maps=False).sections
                   if s.section.id == SECTION)  # fmt: skip
    assert section.note and "covers one model" in section.note and section.looked


def test_the_model_selector_in_chromium(browser, report, tmp_path):  # noqa: F811
    """The comparison drawn offline in Chromium: every line opaque; a click on a model in the
    legend leaves only that model's lines opaque; shift-click adds the other back."""
    from attnwh.reports.build import write_html

    page, log = open_offline(browser, write_html(report, tmp_path / "report.html"))
    page.wait_for_selector("#chart-models-by-depth svg .mark-line path", timeout=20_000)
    page.wait_for_selector("#chart-models-by-group svg .mark-rect path", timeout=20_000)

    def opaque() -> dict[str, set[str]]:
        lines = page.eval_on_selector_all(
            "#chart-models-by-depth .mark-line path",
            "ps => ps.map(p => [p.getAttribute('stroke'), Number(p.getAttribute('opacity'))])",
        )
        return {"opaque": {s for s, o in lines if o > 0.5}, "faded": {s for s, o in lines if o < 0.5}}

    colours = opaque()["opaque"]
    assert len(colours) == 2 and not opaque()["faded"]
    labels = page.query_selector_all("#chart-models-by-depth .role-legend-label text")
    assert [label.text_content() for label in labels] == ["llama-2x4", "qwen2-3x4"]
    labels[1].click()
    page.wait_for_timeout(300)
    one = opaque()
    assert len(one["opaque"]) == 1 and one["faded"] == colours - one["opaque"]
    labels[0].click(modifiers=["Shift"])
    page.wait_for_timeout(300)
    assert opaque()["opaque"] == colours
    assert log == {"requests": [], "errors": [], "dialogs": []}


def test_the_findings_page(warehouse, tmp_path):
    """`attnwh report results --page findings`: each model's sink share on random tokens and
    on text, and its retrieval-head share, are the ones plain SQL gives, each inside its own
    interval; the memory factor is the whole cache over what the chosen set leaves."""
    from attnwh.reports.results import write_results_page
    from attnwh.sql.restriction import choose

    written = write_results_page(warehouse, "findings", tmp_path / "findings.md")
    text = written.page.read_text()
    assert sorted(p.name for p in written.figures) == ["chart-models-by-depth.png", "chart-models-by-group.png"]
    assert "attnwh report results --page findings" in text
    with duckdb.connect(str(warehouse), read_only=True) as con:
        shares = con.sql(
            "SELECT m.name, r.task, count(*) FILTER (WHERE s > 0.3) AS above, count(*) AS heads, "
            "count(*) FILTER (WHERE rt > 0.1) AS retrieval FROM (SELECT run_id, layer, head, avg(sink) AS s, "
            "avg(retrieval) AS rt FROM head_roles GROUP BY ALL) JOIN runs AS r USING (run_id) "
            "JOIN models AS m USING (model_id) GROUP BY ALL"
        ).fetchall()
        restriction = con.sql("SELECT run_id, m.name FROM restriction_runs JOIN runs USING (run_id) "
                              "JOIN models AS m USING (model_id) ORDER BY run_id").fetchall()  # fmt: skip
        chosen = {name: choose(con, 0.05, run) for run, name in restriction}
    rows = {tuple(c.strip() for c in line.strip("|").split("|")) for line in text.splitlines() if line.startswith("|")}
    for model, task, above, heads, retrieval in shares:
        name = Path(model).name
        if task in ("random", "text"):
            setting = "random tokens" if task == "random" else "natural text"
            row = next(r for r in rows if r[:2] == (name, setting))
            assert row[4] == f"{above} of {heads}" and row[5] == f"{100 * above / heads:.1f} %"
            low, high = (float(x) for x in row[6].strip("[] %").split(","))
            assert low <= 100 * above / heads <= high
        if task == "needle":
            row = next(r for r in rows if r[0] == name and r[3] == f"{retrieval} of {heads}")
            assert row[4] == f"{100 * retrieval / heads:.1f} %"
    for name, choice in chosen.items():
        left = choice.kv_bytes - choice.kv_bytes_saved
        factor = f"{choice.kv_bytes / left:.2f}×" if left > 0 else "all"
        assert any(r[0] == Path(name).name and r[1] == "0.05" and r[-1] == factor for r in rows)


def test_the_findings_page_reads_every_measurement(warehouse, tmp_path):
    """The page's streaming, pass-key, in-context-learning and massive-ablation tables hold the
    named queries' numbers, and each section ends on whether attnwh agrees on each model."""
    from attnwh.reports.results import write_results_page

    text = write_results_page(warehouse, "findings", tmp_path / "f.md", figures=False).page.read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        streaming = run_query(con, get_query("streaming_loss")).to_pylist()
        massive = run_query(con, get_query("massive_ablation")).to_pylist()
        icl = run_query(con, get_query("icl_score"), {"window": 21}).to_pylist()
        sets = run_query(con, get_query("head_set_effect")).to_pylist()
    for r in streaming:
        cells = [Path(r["model"]).name, f"{r['context_length']:,}", str(r["sinks"]), str(r["sequences"])]
        row = next(x for x in rows if x[:4] == cells)
        assert row[5] == f"{r['loss']:.3f} ({r['perplexity']:.1f})" and row[6].startswith(f"{r['delta']:+.3f} [")
    for r in massive:
        row = next(x for x in rows if x[:2] == [Path(r["model"]).name, r["intervention"]])
        assert row[4:6] == [f"{r['loss']:.3f}", f"{r['perplexity']:,.1f}"]
    for r in icl:
        assert any(
            x[0] == Path(r["model"]).name and x[5:] and x[5].startswith(f"{r['icl_score']:+.3f} [") for x in rows
        )
    assert {r["label"] for r in sets} <= {x[4] for x in rows if len(x) > 4} | {"random-2"}
    for title in ("Eviction breaks streaming", "Disabling the retrieval heads", "in-context learning score",
                  "Setting them to zero and to their mean"):  # fmt: skip
        section = text[text.index(title) :].split("\n#")[0]
        assert "llama-2x4" in section.split("Queries:")[1] and "qwen2-3x4" in section.split("Queries:")[1]
