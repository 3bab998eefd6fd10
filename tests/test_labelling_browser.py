"""The labelling page of `attnwh patterns label` in real headless Chromium, offline: maps
are labelled with key presses (and one corrected after going back), the labels survive a
reload, the export downloads the CSV that `attnwh patterns import-labels` reads, and after
the import the warehouse holds exactly those labels. Skips without Playwright or Chromium,
like the report's browser test."""

from __future__ import annotations

import json

import duckdb

from helpers import run
from test_patterns import ingested  # noqa: F401
from test_report_browser import browser, open_offline  # noqa: F401
from test_tiles import long_maps_warehouse, long_models  # noqa: F401

# Key presses and the types they stand for, one per map in page order; "s" skips a map.
PRESSES = [("v", "vertical"), ("d", "diagonal"), ("s", None), ("4", "vertical+diagonal"), ("b", "block")]


def test_label_export_import_round_trip(browser, ingested, tmp_path, monkeypatch, capsys):  # noqa: F811
    db, _ = ingested
    page_path = tmp_path / "label.html"
    code, out, err = run(monkeypatch, capsys, "patterns", "label", str(page_path), "--db", str(db), "--limit", "8")
    assert code == 0, err
    assert "8 maps (8 whole, 0 thumbnails)" in " ".join(out.split())

    tab, log = open_offline(browser, page_path)
    maps = json.loads(tab.locator("#maps-data").text_content())
    assert len(maps) == 8 and all(m["tokens"] and len(m["cells"]) == m["n_tokens"] ** 2 for m in maps)
    assert "map 1 of 8 · 0 labelled" in tab.locator("#progress").inner_text()
    # The map is drawn: some canvas pixels are not white.
    coloured = tab.evaluate(
        "() => { const c = document.getElementById('map'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
        " for (let i = 0; i < d.length; i += 4) if (d[i] < 200) n++; return n; }"
    )
    assert coloured > 1000
    for key, _ in PRESSES:
        tab.keyboard.press(key)
    assert "map 6 of 8 · 4 labelled · 1 skipped" in tab.locator("#progress").inner_text()
    # Back to the fourth map and relabel it: the last key wins.
    tab.keyboard.press("ArrowLeft")
    tab.keyboard.press("ArrowLeft")
    assert "map 4 of 8" in tab.locator("#progress").inner_text()
    tab.keyboard.press("h")
    expected = {i: name for i, (_, name) in enumerate(PRESSES) if name}
    expected[3] = "heterogeneous"

    tab.reload()  # labels are kept in the browser across a reload
    assert "4 labelled · 1 skipped" in tab.locator("#progress").inner_text()
    with tab.expect_download() as download:
        tab.click("#export")
    csv_path = tmp_path / "labels.csv"
    download.value.save_as(csv_path)
    lines = csv_path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "run,example,layer,head,type" and len(lines) == 1 + len(expected)
    assert log["errors"] == [] and log["requests"] == [] and log["dialogs"] == []
    tab.context.close()

    code, out, err = run(monkeypatch, capsys, "patterns", "import-labels", str(csv_path), "--db", str(db))
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute(
            "SELECT l.run_id, l.example_id, l.layer, l.head, t.name FROM pattern_labels AS l"
            " JOIN pattern_types AS t USING (pattern) WHERE l.source LIKE '%labels.csv'"
        ).fetchall()
    want = {
        (maps[i]["run"], int(maps[i]["example"]), maps[i]["layer"], maps[i]["head"], name)
        for i, name in expected.items()
    }
    assert set(stored) == want


def test_long_maps_zoom_and_name_the_cell_under_the_pointer(  # noqa: F811
    browser,  # noqa: F811
    long_maps_warehouse,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    """A map of over 150 tokens kept whole (--map-tokens; run 2) is drawn without unreadable
    axis labels; + doubles its cells (the frame scrolls), - comes back; the readout names the
    query and key tokens under the pointer; for a thumbnail (run 1) the tokens its cell pools."""
    db, _, _ = long_maps_warehouse
    for run_id, whole in ((2, True), (1, False)):
        page_path = tmp_path / f"label-{run_id}.html"
        code, _, err = run(
            monkeypatch, capsys, "patterns", "label", str(page_path), "--db", str(db), "--run", str(run_id)
        )
        assert code == 0, err
        tab, log = open_offline(browser, page_path)
        first = json.loads(tab.locator("#maps-data").text_content())[0]
        assert first["n_tokens"] > 150 and first["whole"] is whole
        side = round(len(first["cells"]) ** 0.5)
        width = tab.evaluate("() => document.getElementById('map').width")
        tab.keyboard.press("+")
        assert tab.evaluate("() => document.getElementById('map').width") > 1.5 * width or not whole
        assert "zoom ×2" in tab.locator("#meta").inner_text()
        cell = max(1, (720 - 114) // side) * 2
        box = tab.locator("#map").bounding_box()
        # The readout of the cell in row 5, column 3 (the axes' margin is 24 px without token labels).
        margin = 110 if whole and cell >= 7 else 24
        tab.mouse.move(box["x"] + margin + 3 * cell + cell / 2, box["y"] + margin + 5 * cell + cell / 2)
        text = tab.locator("#readout").inner_text()
        if whole:
            assert f"query 5 {first['tokens'][5]} → key 3 {first['tokens'][3]}" in text, text
        else:  # a 32 × 32 thumbnail of n tokens: cell 5 pools tokens 5n/32 to 6n/32
            n = first["n_tokens"]
            assert f"query {5 * n // 32}–{-(-6 * n // 32) - 1} → key {3 * n // 32}–" in text, text
        tab.keyboard.press("-")
        assert tab.evaluate("() => document.getElementById('map').width") == width
        assert log["errors"] == [] and log["requests"] == []
        tab.context.close()
