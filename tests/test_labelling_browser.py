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
