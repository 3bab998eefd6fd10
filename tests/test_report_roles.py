"""The report's head roles section on a warehouse holding a tiny random Llama (grouped-query
attention: 4 query heads, 2 key/value heads) with a statistics run and `attnwh ingest roles`
runs: the heatmaps' specs hold the means of head_roles recomputed here in plain SQL, the top
heads table and the findings name the heads a plain ranking gives, the head panel carries the
scores, the top probes and their maps, the chart renders to PNG, and a warehouse without roles runs shows
the section's note and nothing else of it."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from attnwh.reports.build import build_report, write_html, write_images
from attnwh.reports.head_panel import head_panel_data
from attnwh.reports.sections import SECTIONS, ReportContext
from attnwh.sql import warehouse
from helpers import cli_main
from test_report_browser import browser, open_offline  # noqa: F401
from tiny_models import make_tiny_decoder

LAYERS, HEADS, KV_HEADS = 2, 4, 2
PROBES = 3
ROLES_SECTION = next(s for s in SECTIONS if s.id == "head-roles")
SCORES = ("previous_token", "induction", "duplicate", "retrieval", "sink", "local_mass")
LABELS = {
    "previous_token": "previous token",
    "induction": "induction",
    "duplicate": "duplicate token",
    "retrieval": "retrieval",
    "sink": "sink (first token)",
    "local_mass": "local mass",
}


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory) -> tuple[Path, Path]:
    """(with roles, without): a statistics run of the decoder on 4 prose windows, then a copy,
    then an induction and a needle roles run of 3 probes each on the first."""
    tmp = tmp_path_factory.mktemp("report-roles")
    decoder = make_tiny_decoder("llama", tmp / "llama", LAYERS, HEADS, seed=3, positions=256)
    db, plain = tmp / "roles.duckdb", tmp / "plain.duckdb"
    cli_main("ingest", "--model", str(decoder), "--task", "prose", "--limit", "4", "--max-length", "24",
             "--db", str(db))  # fmt: skip
    shutil.copy(db, plain)
    cli_main("ingest", "roles", "--model", str(decoder), "--device", "cpu", "--db", str(db),
             "--examples", str(PROBES), "--repeat-length", "10", "--context-length", "160", "--depths", "0,1",
             "--local-window", "8")  # fmt: skip
    return db, plain


def means(db: Path) -> pl.DataFrame:
    """Each roles run's mean of each score per layer and head, by plain SQL on head_roles."""
    averages = ", ".join(f"avg({c}) AS {c}" for c in SCORES)
    with duckdb.connect(str(db), read_only=True) as con:
        return con.sql(
            f"SELECT h.run_id, r.task AS probe, h.layer, h.head, {averages} FROM head_roles AS h "
            "JOIN runs AS r USING (run_id) GROUP BY ALL ORDER BY ALL"
        ).pl()


def top(frame: pl.DataFrame, probe: str, score: str, k: int) -> list[tuple[int, int]]:
    """The k heads of the highest mean `score` on `probe` probes, ties to the lower layer, head."""
    ranked = frame.filter(pl.col("probe") == probe).sort([score, "layer", "head"], descending=[True, False, False])
    return [(r["layer"], r["head"]) for r in ranked.head(k).iter_rows(named=True)]


def chart_cells(spec: dict) -> dict[tuple[str, str, int, int], float]:
    """(run label's first line, score, layer, head) → value, from every dataset of a spec."""
    found = {}
    for rows in spec["datasets"].values():
        for r in rows:
            found[(r["panel"].split("\n")[0], r["score"], r["layer"], r["head"])] = r["value"]
    return found


@pytest.fixture(scope="module")
def report(warehouses):
    return build_report(warehouses[0])


def _section(report):
    return next(s for s in report.sections if s.section.id == "head-roles")


def test_heatmaps_hold_the_stored_means(report, warehouses, tmp_path) -> None:
    section = _section(report)
    assert section.note is None
    chart = next(b for b in section.blocks if b.id == "chart-head-roles")
    cells = chart_cells(chart.spec())
    want = means(warehouses[0])
    expected = {}
    for r in want.iter_rows(named=True):
        for score in SCORES:
            if r[score] is not None:
                expected[(f"run {r['run_id']} · llama", LABELS[score], r["layer"], r["head"])] = r[score]
    assert cells.keys() == expected.keys()
    for key, value in expected.items():
        assert cells[key] == pytest.approx(value, abs=1e-9), key
    # Each run draws exactly the scores its probe kind defines.
    per_run = {}
    for run, score, _, _ in cells:
        per_run.setdefault(run, set()).add(score)
    assert sorted(map(sorted, per_run.values())) == [
        sorted(LABELS[s] for s in ("previous_token", "induction", "duplicate", "sink", "local_mass")),
        sorted(LABELS[s] for s in ("previous_token", "retrieval", "sink", "local_mass")),
    ]
    # The heatmaps are layer × head charts the page can select heads in, and render as PNG.
    assert {p["name"] for p in chart.spec()["params"]} == {"selected_layer", "selected_head"}
    alone = build_report(warehouses[0], sections=(ROLES_SECTION,))
    (png,) = write_images(alone, tmp_path, "png")
    assert png.name == "chart-head-roles.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_top_heads_table_names_the_ranked_heads(report, warehouses, tmp_path) -> None:
    table = next(b for b in _section(report).blocks if b.id == "table-head-roles-top")
    frame = means(warehouses[0])
    for probe, score, role in [
        ("induction", "induction", "induction"),
        ("induction", "previous_token", "previous token"),
        ("induction", "duplicate", "duplicate token"),
        ("needle", "retrieval", "retrieval"),
    ]:
        rows = [r for r in table.rows if r[1] == [role]]
        got = [(int(r[3][0]), int(r[4][0])) for r in rows]
        values = [float(r[6][0]) for r in rows]
        if probe == "needle":  # random weights: retrieval ties at 0 among most heads, the rank too
            assert len(rows) >= 5 and values == sorted(values, reverse=True)
            best = frame.filter(pl.col("probe") == "needle")["retrieval"].max()
            assert values[0] == pytest.approx(best, abs=5e-4)
            continue
        assert got == top(frame, probe, score, 5), role
        # The key/value group: 2 query heads share one under this model's GQA.
        assert [r[5] for r in rows] == [[str(h // (HEADS // KV_HEADS))] for _, h in got]
    # Each head cell opens that head's panel.
    html = write_html(report, tmp_path / "r.html").read_text(encoding="utf-8")
    first = table.rows[0]
    assert f'<a href="#head-{first[3][0]}-{first[4][0]}">{first[4][0]}</a>' in html
    assert 'id="chart-head-roles"' in html


def test_findings_name_the_top_heads_and_the_retrieval_share(warehouses, tmp_path) -> None:
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouses[0], db)
    with duckdb.connect(str(db)) as con:  # one head a retrieval head, as Wu et al. count them
        con.execute("UPDATE head_roles SET retrieval = 0.5 WHERE layer = 1 AND head = 2 AND retrieval IS NOT NULL")
    built = build_report(db, sections=(ROLES_SECTION,))
    group = next(g for g in built.findings.groups if g.task == "head roles")
    lines = [f.text for f in group.findings]
    frame = means(db)
    induction = next(line for line in lines if "top induction heads" in line)
    named = re.findall(r"L(\d+)H(\d+) ", induction)
    assert [(int(a), int(b)) for a, b in named] == top(frame, "induction", "induction", 3)
    retrieval = next(line for line in lines if "retrieval heads" in line)
    assert "1 of 8 heads (12.5\u00a0%)" in retrieval and "L1H2 0.500" in retrieval
    assert "Run 3: 1 of 8 heads (12.5 %) have a retrieval score above 0.1" in built.charts()[0].caption


def test_head_panel_carries_the_scores_and_the_top_probes(warehouses) -> None:
    frame = means(warehouses[0])
    layer, head = top(frame, "induction", "induction", 1)[0]
    con = warehouse.connect(warehouses[0], read_only=True)
    try:
        # With token maps: the probes are run again through the run's model.
        data = head_panel_data(ReportContext(con, {"model": None, "task": None}), warehouses[0])
        run_id, best_probe, score, segments = con.execute(
            "SELECT h.run_id, h.example_id, h.induction, p.segments FROM head_roles AS h "
            "JOIN runs AS r USING (run_id) JOIN role_probes AS p USING (run_id, example_id) "
            "WHERE r.task = 'induction' AND layer = ? AND head = ? ORDER BY induction DESC, example_id LIMIT 1",
            [layer, head],
        ).fetchone()
    finally:
        con.close()
    col = {name: k for k, name in enumerate(data["columns"])}
    strings = data["strings"]
    rows = [
        r
        for r in data["rows"]
        if strings[r[col["section"]]] == "head-roles" and (r[col["layer"]], r[col["head"]]) == (layer, head)
    ]
    induction = [r for r in rows if strings[r[col["measure"]]] == "induction score"]
    want = frame.filter(pl.col("probe") == "induction", pl.col("layer") == layer, pl.col("head") == head)
    assert len(induction) == 1 and induction[0][col["value"]] == pytest.approx(want["induction"][0], rel=1e-5)
    assert len(rows) == 5 + 4  # the scores of each run's probe kind
    listed = [e for e in data["examples"][f"{layer}-{head}"] if e[1] == "induction"]
    assert [e[2] for e in listed] == [1, 2, 3] and listed[0][4] == str(best_probe)
    assert "head-roles" in data["sections"]
    # The panel's map of the top probe is that probe's: its induction score read back from the
    # embedded bytes (a byte a cell) is the stored one.
    side = len(data["tokenMaps"]["examples"][f"{run_id}-{best_probe}"][0])
    cells = np.frombuffer(
        base64.b64decode(data["tokenMaps"]["maps"][f"{run_id}-{best_probe}-{layer}-{head}"]), np.uint8
    )
    weights = cells.reshape(side, side) / 255
    spans = json.loads(segments)
    m = spans["first"][1] - spans["first"][0]
    rows = range(*spans["repeat"])
    assert np.mean([weights[r, r - m + 1] for r in rows]) == pytest.approx(score, abs=1 / 255)


def test_a_warehouse_without_roles_has_no_such_section(warehouses, tmp_path) -> None:
    built = build_report(warehouses[1])
    section = _section(built)
    assert section.blocks == [] and "attnwh ingest roles" in (section.note or "")
    assert not any(g.task == "head roles" for g in built.findings.groups)
    # A decoder's warehouse: the findings say what adds the roles.
    assert "the decoder head roles (run `attnwh ingest roles --model DECODER`)" in (built.findings.missing or "")
    html = write_html(built, tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="chart-head-roles"' not in html and "table-head-roles-top" not in html


def test_chromium_draws_the_heatmaps_and_a_top_head_opens_its_panel(browser, report, tmp_path) -> None:  # noqa: F811
    """In real headless Chromium, offline: the heatmaps draw, and following a top head's link
    opens the panel on that head with its role scores and its top probes."""
    page = write_html(report, tmp_path / "r.html")
    tab, log = open_offline(browser, page)
    tab.wait_for_selector("#chart-head-roles svg", timeout=20_000)
    assert "retrieval" in tab.locator("#chart-head-roles").inner_html()
    link = tab.locator("#table-head-roles-top a").first
    target = link.get_attribute("href")
    link.click()
    tab.wait_for_selector("#head-panel:not([hidden])")
    layer, head = target.removeprefix("#head-").split("-")
    panel = tab.locator("#head-panel")
    assert (panel.get_attribute("data-layer"), panel.get_attribute("data-head")) == (layer, head)
    assert tab.locator('#head-panel table[data-section="head-roles"]').count() == 1
    assert "induction score" in tab.locator('#head-panel table[data-section="head-roles"]').inner_text()
    assert tab.locator('#head-panel ol[data-statistic="induction"] li').count() == 3
    assert not log["errors"] and not log["requests"], log
    tab.context.close()
