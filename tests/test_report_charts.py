"""The report's charts say what the data says (issue 26, items 5 and 7): no top-k curve and no
"best head" when no head's disabling helped, a sentence instead of an empty chart, no empty
panels, every line and legend entry visible, one meaning of ●, tokens in the gallery, no
markup in legends, the midpoint of a diverging scale named. Chart-spec assertions on the
synthetic warehouse, altered where a case needs it; the page's width is checked in Chromium
by tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from attnwh.sql import warehouse
from attnwh.sql.queries import get_query, run_query

LAYERS, HEADS = 3, 4


def _synthetic(path: Path, *updates: str, examples: int = 3) -> Path:
    """The synthetic warehouse (4 statistics runs, 2 ablation runs, …) with `updates` applied."""
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    build_synthetic_warehouse(path, examples=examples, layers=LAYERS, heads=HEADS)
    with duckdb.connect(str(path)) as con:
        for sql in updates:
            con.execute(sql)
    return path


def _report(db: Path):
    from attnwh.reports.build import build_report

    return build_report(db)


def _blocks(report) -> dict:
    return {b.id: b for s in report.sections for b in s.blocks}


def _section(report, section_id: str):
    return next(s for s in report.sections if s.section.id == section_id)


def _values(spec: dict) -> list[dict]:
    return [row for values in spec["datasets"].values() for row in values]


def _find(spec: object, key: str) -> list:
    """Every value of `key` anywhere in a nested spec."""
    found = []
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == key:
                found.append(v)
            found.extend(_find(v, key))
    elif isinstance(spec, list):
        for v in spec:
            found.extend(_find(v, key))
    return found


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return _synthetic(tmp_path_factory.mktemp("charts") / "w.duckdb")


@pytest.fixture(scope="module")
def report(synthetic):
    return _report(synthetic)


# ---------------------------------------------------------------- 5: when no head helped

# Every head's own disabling changed nothing (Δ = 0), the case of the issue: the sweep then
# ranks the heads in index order and the top-k curve is a flat line of heads that did not help.
NO_HEAD_HELPED = (
    "UPDATE ablations AS a SET delta = 0, value = baseline, p_value = 1, p_adjusted = 1 FROM ablation_configs AS c"
    " WHERE c.run_id = a.run_id AND c.config_id = a.config_id AND c.kind = 'head'",
    "UPDATE ablations AS a SET delta = 0, value = baseline FROM ablation_configs AS c"
    " WHERE c.run_id = a.run_id AND c.config_id = a.config_id AND c.kind = 'top_k'",
)


@pytest.fixture(scope="module")
def none_helped(tmp_path_factory) -> Path:
    return _synthetic(tmp_path_factory.mktemp("none-helped") / "w.duckdb", *NO_HEAD_HELPED)


def test_no_curve_and_a_sentence_when_no_head_helped(none_helped, tmp_path):
    from attnwh.reports.build import write_html

    report = _report(none_helped)
    assert "chart-ablation-curve" not in {c.id for c in report.charts()}
    note = _blocks(report)["chart-ablation-curve"]
    assert "none helped" in note.text and "no top-k curve" in note.text
    # One sentence per run; the rest of the section is still drawn.
    runs = {r["run_id"] for r in _values(_blocks(report)["chart-ablation-heads"].spec())}
    assert len(runs) == 2 and all(f"Run {run} (accuracy)" in note.text for run in runs)
    assert _section(report, "ablation").note is None
    html = write_html(report, tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'data-chart="chart-ablation-curve"' not in html and 'id="chart-ablation-curve"' not in html
    sentence = re.search(r'<p class="chart-note" id="note-chart-ablation-curve">([^<]*)</p>', html)
    assert sentence and "(none helped)" in sentence.group(1)


def test_ablation_summary_names_no_best_head_when_none_helped(none_helped):
    con = warehouse.connect(none_helped, read_only=True)
    try:
        rows = run_query(con, get_query("ablation_summary")).to_pylist()
        study = run_query(con, get_query("study_summary"), {"metric": "accuracy"}).to_pylist()
    finally:
        con.close()
    assert rows and all(r["n_helpful"] == 0 for r in rows)
    for row in rows:
        # Not head 0-0 "best" with Δ 0.0: none helped, as the study's table says.
        assert row["best_head_layer"] is None and row["best_head"] is None and row["best_head_p_adjusted"] is None
        assert row["best_head_name"] == "none helped" and row["best_head_delta"] == 0
    assert study and all(r["helpful_head"] is None for r in study)


def test_ablation_summary_names_the_best_head_when_one_helped(synthetic):
    con = warehouse.connect(synthetic, read_only=True)
    try:
        rows = run_query(con, get_query("ablation_summary")).to_pylist()
    finally:
        con.close()
    assert rows and all(r["best_head_delta"] > 0 for r in rows)
    assert all(r["best_head_name"] == f"{r['best_head_layer']}-{r['best_head']}" for r in rows)


def test_curve_stops_where_the_heads_stop_helping(tmp_path):
    """One head helped alone in each run: the curve is that head, not the 3 of the sweep."""
    db = _synthetic(
        tmp_path / "one.duckdb",
        *NO_HEAD_HELPED,
        "UPDATE ablations AS a SET delta = 0.01 FROM ablation_configs AS c"
        " WHERE c.run_id = a.run_id AND c.config_id = a.config_id AND c.kind = 'head' AND c.layer = 1 AND c.head = 2",
    )
    block = _blocks(_report(db))["chart-ablation-curve"]
    assert {row["k"] for row in _values(block.spec()) if "k" in row} == {1}
    assert "1 head helped, so its curve stops at k = 1 of the 3 disabled together" in block.caption
    assert "the k whose own disabling helped most" in json.dumps(block.spec(), ensure_ascii=False)


# ---------------------------------------------------------------- 7: a sentence, not an empty chart


def test_massive_activations_without_a_massive_entry_is_a_sentence(tmp_path):
    from attnwh.reports.build import write_html

    db = _synthetic(tmp_path / "calm.duckdb", "UPDATE massive_activations SET magnitude = 10")
    report = _report(db)
    section = _section(report, "massive-activations")
    assert section.blocks == [] and section.looked
    assert section.note and section.note.startswith("No massive activations found")
    assert "chart-massive-activations" not in {c.id for c in report.charts()}
    # Not counted among the sections with data (the count `attnwh report` prints): the
    # synthetic warehouse has no fine-tuning run (nor head-roles or restriction run) either.
    expected = {"finetuning", "head-roles", "whole-context", "massive-activations"}
    assert {s.section.id for s in report.sections if s.note} == expected
    html = write_html(report, tmp_path / "r.html").read_text(encoding="utf-8")
    assert (
        'id="note-massive-activations"' in html
        and 'Massive activations</a> <span class="absent">(nothing found)' in html
    )


def test_every_chart_has_data(report):
    """A chart is drawn only with rows to draw; otherwise its section says why in a sentence."""
    for chart in report.charts():
        assert _values(chart.spec()), f"{chart.id} is drawn without data"


def test_sinks_against_ablation_without_pairs_is_a_sentence(tmp_path):
    # The sweep's examples are not those of any statistics run: no sink score for its heads.
    db = _synthetic(
        tmp_path / "apart.duckdb",
        "DELETE FROM run_examples WHERE run_id IN (SELECT run_id FROM runs WHERE kind = 'ablation')",
    )
    report = _report(db)
    assert "chart-sinks-vs-ablation" not in {c.id for c in report.charts()}
    assert "attnwh ingest --model FINETUNED" in _section(report, "sinks-vs-ablation").note


# ---------------------------------------------------------------- 7: panels, lines, legends


def test_pattern_layers_has_no_empty_panels(report):
    """4 runs in rows of 3: the last row's empty places drew axes, two untitled empty panels."""
    import vl_convert

    from attnwh.reports.page import vegalite_version

    spec = _blocks(report)["chart-pattern-layers"].spec()
    assert len({row["panel"] for row in _values(spec)}) == 4 and spec["columns"] == 3
    vega = json.dumps(vl_convert.vegalite_to_vega(spec, vl_version=vegalite_version()))
    assert "column_footer" not in vega  # axes under every column of the last row, data or not
    # Every panel is titled: its run's label, one line per part.
    assert spec["facet"]["header"]["labelExpr"] == "split(datum.label, '\\n')"


def test_wrapped_panels_draw_their_own_axes(report):
    """Every chart of panels in rows (facet with columns) draws each panel's x axis itself."""
    import vl_convert

    from attnwh.reports.page import vegalite_version

    for chart in report.charts():
        spec = chart.spec()
        if "columns" in spec and "facet" in spec:
            vega = json.dumps(vl_convert.vegalite_to_vega(spec, vl_version=vegalite_version()))
            assert "column_footer" not in vega, chart.id


@pytest.fixture(scope="module")
def weights_only(tmp_path_factory) -> Path:
    """Runs without value zeroing, whose weight × value norm share equals the heads' share
    after LayerNorm (on MiniLM they nearly coincide)."""
    return _synthetic(
        tmp_path_factory.mktemp("mixing") / "w.duckdb",
        "UPDATE layer_mixing SET vz_to_cls = NULL, vz_to_sep = NULL, vz_to_punct = NULL, vz_to_self = NULL,"
        " vz_to_prev = NULL, vz_to_next = NULL",
        "UPDATE head_mixing AS m SET rn_to_cls = s.norm_to_cls, rn_to_sep = s.norm_to_sep,"
        " rn_to_punct = s.norm_to_punct FROM head_stats AS s"
        " WHERE s.run_id = m.run_id AND s.example_id = m.example_id AND s.layer = m.layer AND s.head = m.head",
    )


def test_context_mixing_legend_lists_only_lenses_with_data(weights_only):
    spec = _blocks(_report(weights_only))["chart-context-mixing"].spec()
    drawn = {row["lens"] for row in _values(spec)}
    assert "value zeroing" not in drawn
    for channel in ("color", "strokeDash"):
        assert spec["spec"]["encoding"][channel]["scale"]["domain"] == [
            lens
            for lens in (
                "attention weight",
                "weight × value norm",
                "after residual + LayerNorm (heads)",
                "after residual + LayerNorm (whole block)",
            )
            if lens in drawn
        ], channel


def test_context_mixing_lines_that_coincide_stay_visible(weights_only):
    """Where two lenses give the same shares, the line drawn over the other is dashed, so the
    one under it shows through: colour alone left 'weight × value norm' hidden."""
    spec = _blocks(_report(weights_only))["chart-context-mixing"].spec()
    rows = _values(spec)
    norm = {(r["panel"], r["target"], r["layer"]): r["share"] for r in rows if r["lens"] == "weight × value norm"}
    heads = {(r["panel"], r["target"], r["layer"]): r["share"] for r in rows if r["lens"].endswith("(heads)")}
    assert norm and all(abs(norm[k] - heads[k]) < 1e-9 for k in norm)  # the two lines coincide
    dash = spec["spec"]["encoding"]["strokeDash"]["scale"]
    dashes = dict(zip(dash["domain"], dash["range"]))
    assert dashes["weight × value norm"] != dashes["after residual + LayerNorm (heads)"]
    assert (
        len(dashes["after residual + LayerNorm (heads)"]) == 2 and dashes["after residual + LayerNorm (heads)"][1] > 0
    )


def test_context_mixing_panel_titles_are_whole(tmp_path):
    """A fine-tuned model's label was one line, cut ('fine-tuned on senti…'): now its lines
    are wrapped to fit the panel's width, and the tooltip has the whole label."""
    from test_report import tuned_synthetic

    report = _report(tuned_synthetic(tmp_path / "tuned.duckdb"))
    spec = _blocks(report)["chart-context-mixing"].spec()
    header = spec["facet"]["row"]["header"]
    assert spec["facet"]["row"]["field"] == "header" and header["labelExpr"] == "split(datum.label, '\\n')"
    rows = _values(spec)
    lines = [line for row in rows for line in row["header"].split("\n")]
    assert "fine-tuned on sentiment from" in lines and "all-MiniLM-L6-v2" in lines
    # 7 px a character is more than the bold 11 px font needs; the panels are as wide.
    assert header["labelLimit"] >= 7 * max(len(line) for line in lines)
    assert spec["spec"]["width"] >= header["labelLimit"]
    assert all(row["header"].replace("\n", " ") == row["panel"].replace("\n", " ") for row in rows)
    assert {"field": "panel", "title": "run", "type": "nominal"} in spec["spec"]["encoding"]["tooltip"]


def test_filled_dot_means_significant_everywhere(report):
    blocks = _blocks(report)
    heads = blocks["chart-ablation-heads"]
    assert "● marks a change whose paired test" in heads.caption
    assert {r["mark"] for r in _values(heads.spec()) if r["significant"]} <= {"●"}
    layers = blocks["chart-ablation-layers"]
    shape = _find(layers.spec(), "shape")[0]
    scale = dict(zip(shape["scale"]["domain"], shape["scale"]["range"]))
    assert scale[True] == "circle" and scale[False] != "circle"  # filled = significant, a ring = not
    assert shape["title"] == "adjusted p < 0.05" and "'yes: significant'" in shape["legend"]["labelExpr"]
    marks = [m for m in _find(layers.spec(), "mark") if isinstance(m, dict) and m.get("type") == "point"]
    assert marks and all(m.get("filled") for m in marks)
    assert "filled dot ● = adjusted p < 0.05" in layers.caption and "diamond" not in layers.caption


def test_gallery_shows_the_tokens_of_each_map(tmp_path):
    tokens = ["[CLS]", "the", "film", "was", "great", "fun", ".", "[SEP]"] + [f"w{i}" for i in range(12)]
    db = _synthetic(tmp_path / "tokens.duckdb")
    with duckdb.connect(str(db)) as con:
        # Tokens for every example with a stored thumbnail (20 or 21 real tokens each).
        con.execute(
            "INSERT INTO example_tokens SELECT DISTINCT run_id, example_id, ? FROM pattern_thumbnails", [tokens]
        )
        con.execute("UPDATE pattern_thumbnails SET n_tokens = 20")
    spec = _blocks(_report(db))["chart-pattern-gallery"].spec()
    rows = _values(spec)
    captions = [r["caption"] for r in rows if r.get("caption")]
    maps = {(r["pattern"], r["column"]) for r in rows}
    assert len(captions) == len(maps)  # one caption under each map
    assert all(re.fullmatch(r"run \d+ · L\d H\d · n=20", c[0]) for c in captions)
    assert all(c[1].startswith("[CLS] the film was") for c in captions)
    # Each cell names the tokens it pools: the first row of 16 holds query token 0 and 1 of 20.
    first = next(r for r in rows if r["query"] == 0)
    assert first["query_tokens"] == "[CLS] the"
    assert {"query_tokens", "key_tokens"} <= {t["field"] for t in _find(spec, "tooltip")[0]}
    # The text is drawn: a text layer of the caption field.
    assert any(e.get("text", {}).get("field") == "caption" for e in _find(spec, "encoding"))


def test_gallery_says_when_tokens_were_not_kept(report):
    captions = [r["caption"] for r in _values(_blocks(report)["chart-pattern-gallery"].spec()) if r.get("caption")]
    assert captions and all(c[1] == "tokens not stored" for c in captions)


def test_token_helpers():
    from attnwh.reports.charts import covered_tokens, token_lines

    tokens = [f"t{i}" for i in range(40)]
    # 40 tokens pooled to 32 bins, two bins a cell: cell 0 covers tokens 0 to 2, cell 15 37 to 39.
    assert covered_tokens(tokens, 32, 16, 0) == ["t0", "t1", "t2"]
    assert covered_tokens(tokens, 32, 16, 15) == ["t37", "t38", "t39"]
    # 8 tokens: each cell covers one token, two cells each.
    assert [covered_tokens(tokens[:8], 32, 16, c) for c in (0, 1, 2, 15)] == [["t0"], ["t0"], ["t1"], ["t7"]]
    assert token_lines(["[CLS]", "a", "b"]) == ["[CLS] a b"]
    lines = token_lines(tokens, width=10, lines=2)
    assert len(lines) == 2 and all(len(line) <= 10 for line in lines) and lines[-1].endswith("…")


def test_sinks_legend_has_no_markup(report):
    block = _blocks(report)["chart-attention-sinks"]
    titles = _find(block.spec(), "title")
    text = json.dumps(titles, ensure_ascii=False)
    assert "^" not in text and "sink share (ε = 0.3)" in text
    assert "^" not in block.caption and "ε = 0.3" in block.caption


def test_times_uniform_legend_names_its_midpoint(report):
    spec = _blocks(report)["chart-relations-features"].spec()
    colour = _find(spec, "color")[0]
    assert colour["title"] == "× uniform head" and colour["scale"]["domainMid"] == 1
    assert 1 in colour["legend"]["values"] and "1 = uniform" in colour["legend"]["labelExpr"]
    assert colour["scale"]["domain"][0] == 0 and colour["scale"]["domain"][1] >= 2


@pytest.mark.parametrize(("runs", "step"), [(1, 28), (6, 13)])
def test_layer_ablation_chart_stays_about_a_page_wide(runs, step):
    """Six runs of a 12-layer model: 72 (layer, run) slots narrowed to fit ~1,000 px rather than
    2,016 px that the page would shrink, text and all; one run keeps the wide step."""
    import polars as pl

    from attnwh.reports import charts

    frame = pl.DataFrame(
        [
            {
                "run_id": run,
                "model": "m",
                "task": "sst2",
                "split": "dev",
                "mode": "uniform",
                "metric": "accuracy",
                "layer": layer,
                "baseline": 0.9,
                "value": 0.9,
                "delta": 0.0,
                "ci_low": -0.01,
                "ci_high": 0.01,
                "p_adjusted": 1.0,
                "significant": False,
            }
            for run in range(runs)
            for layer in range(12)
        ]
    )
    spec = charts.ablation_layers(frame).to_dict()
    assert spec["width"] == {"step": step}
    assert 12 * runs * step <= max(charts.LAYER_CHART_WIDTH, 12 * 28)


# ---------------------------------------------------------------- runs in number order

RUNS = (1, 2, 9, 10, 11, 12)


def _drawn_runs(chart) -> list[int]:
    """The run numbers of a chart's labels (axis, facet headers, legend) in the order the
    rendered SVG draws them: Vega lays out a nominal domain in its sort order."""
    import vl_convert

    svg = vl_convert.vegalite_to_svg(chart.to_dict())
    return list(dict.fromkeys(int(n) for n in re.findall(r">run (\d+) ·", svg)))


def _runs_frame(**columns):
    import polars as pl

    base = {"model": "m", "task": "sst2", "split": "dev"}
    return pl.DataFrame(
        [
            {"run_id": run, **base, **{k: v(run, i) if callable(v) else v for k, v in columns.items()}, "layer": i}
            for run in RUNS
            for i in range(2)
        ]
    )


def test_runs_are_drawn_in_number_order_not_as_text():
    """Run 10 after run 9, not after run 1: in a chart's rows (the pattern shares), in its
    panels (pattern types per layer) and in its legend and offsets (the per-layer ablation)."""
    import polars as pl

    from attnwh.reports import charts

    patterns = _runs_frame(
        pattern=lambda run, i: ("vertical", "diagonal")[i], share=0.5, share_low=0.4, share_high=0.6, maps=4, examples=2
    )
    ablation = _runs_frame(
        mode="uniform",
        metric="accuracy",
        baseline=0.9,
        value=0.9,
        delta=0.0,
        ci_low=-0.01,
        ci_high=0.01,
        p_adjusted=1.0,
        significant=False,
    )
    drawn = {
        "pattern_frequency": _drawn_runs(charts.pattern_frequency(patterns.filter(pl.col("layer") == 0))),
        "pattern_layers": _drawn_runs(charts.pattern_layers(patterns)),
        "ablation_layers": _drawn_runs(charts.ablation_layers(ablation)),
    }
    assert drawn == dict.fromkeys(drawn, list(RUNS))
    assert charts.run_order(["run 10 · m", "run 2 · m", "run 1 · m", "other"]) == [
        "run 1 · m",
        "run 2 · m",
        "run 10 · m",
        "other",
    ]


# ---------------------------------------------------------------- the heatmap's colour scale


def test_one_flip_in_a_hundred_does_not_saturate_the_heatmap(tmp_path):
    """Every head's Δ 0 but one, which changed one prediction of 100: the colour scale stays
    symmetric and reaches ±(the smallest change one head alone could show significantly),
    computed here from scipy's exact binomial test (McNemar's, all discordant pairs one way)
    with the Benjamini–Hochberg factor of the run's 3 × 4 heads and 3 layers, so the flip
    reads at a tenth of full colour; the legend says what full colour means."""
    from scipy.stats import binomtest

    db = _synthetic(
        tmp_path / "w.duckdb",
        NO_HEAD_HELPED[0],
        "UPDATE ablations AS a SET delta = -0.01, value = baseline - 0.01 FROM ablation_configs AS c"
        " WHERE c.run_id = a.run_id AND c.config_id = a.config_id AND c.kind = 'head' AND c.layer = 1 AND c.head = 2",
        examples=100,
    )
    spec = _blocks(_report(db))["chart-ablation-heads"].spec()
    colour = next(c for c in _find(spec, "color") if isinstance(c, dict) and c.get("field") == "delta")
    low, high = colour["scale"]["domain"]
    tests = LAYERS * HEADS + LAYERS
    smallest = next(d for d in range(1, 101) if binomtest(d, d, 0.5).pvalue * tests < 0.05) / 100
    assert low == -high and high == pytest.approx(smallest) and smallest == 0.1
    flipped = [r["delta"] for r in _values(spec) if r["delta"] != 0]
    assert flipped == [-0.01, -0.01]  # one head in each of the two runs
    assert abs(flipped[0]) / high <= 0.1
    assert "full colour: ±0.1, the least" in colour["title"]


def test_heatmap_scale_follows_the_largest_change_when_it_is_larger(synthetic):
    """Where some Δ exceeds what one head alone needs, full colour is that largest |Δ|."""
    from attnwh.reports import charts

    with duckdb.connect(str(synthetic), read_only=True) as con:
        import polars as pl

        heads = pl.from_arrow(run_query(con, get_query("ablation_effect")))
        detect = pl.from_arrow(run_query(con, get_query("findings_ablation")))
    frame = heads.join(detect.select("run_id", "metric", "detect_delta_alone"), on=["run_id", "metric"], how="left")
    largest = frame["delta"].abs().max()
    reach, significance = charts.delta_reach(frame.with_columns(detect_delta_alone=pl.lit(largest / 2)))
    assert (reach, significance) == (pytest.approx(largest), False)
    reach, significance = charts.delta_reach(frame.with_columns(detect_delta_alone=pl.lit(largest * 2)))
    assert (reach, significance) == (pytest.approx(largest * 2), True)
