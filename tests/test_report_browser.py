"""The report in real headless Chromium, offline: every chart is drawn, the console stays
clean, no request leaves the page, and hostile names show as text without running.

Needs Playwright for Python and a Chromium executable (Debian's /usr/bin/chromium; .ci/run
installs both). Playwright's own browser download is not used. Skips when either is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from test_report import (  # noqa: F401
    ARTIFACTS,
    CHART_IDS,
    HOSTILE,
    PATTERN_CHART_IDS,
    _report,
    hostile_warehouse,
    page,
    tuned_synthetic,
    warehouse,
)

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    for candidate in (
        os.environ.get("ATTNWH_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        shutil.which("google-chrome"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("no Chromium executable (install it with `apt-get install chromium`, or set ATTNWH_CHROMIUM)")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    executable = _chromium()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_offline(browser, path: Path, width: int = 1280):
    """Open `path` with the network off in a `width` px wide window; returns (page, log).
    Every request other than the file itself is recorded and aborted; console errors, page
    errors and dialogs are logged."""
    context = browser.new_context(offline=True, viewport={"width": width, "height": 900})
    page = context.new_page()
    own = path.resolve().as_uri()
    log = {"requests": [], "errors": [], "dialogs": []}

    def route(r):
        # Only the page's own file may load; anything else is aborted (and logged below).
        r.continue_() if r.request.url == own else r.abort()

    page.route("**/*", route)
    page.on("request", lambda req: req.url != own and log["requests"].append(req.url))
    page.on("console", lambda msg: msg.type == "error" and log["errors"].append(msg.text))
    page.on("pageerror", lambda exc: log["errors"].append(str(exc)))

    def dialog(d):
        log["dialogs"].append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.goto(own)
    return page, log


def _wait_for_charts(page, ids: tuple[str, ...] = (*CHART_IDS, *PATTERN_CHART_IDS)) -> None:
    for chart_id in ids:
        page.wait_for_selector(f"#{chart_id} svg, #{chart_id} canvas", timeout=20_000)
    # vega-embed draws asynchronously; marks are in once every view holds some.
    page.wait_for_function(
        "ids => ids.every(id => document.querySelectorAll('#' + id + ' svg .mark-rect path, #' + id"
        " + ' svg .mark-line path, #' + id + ' svg .mark-symbol path').length > 0)",
        arg=list(ids),
        timeout=20_000,
    )


@pytest.mark.slow
def test_report_renders_offline_in_chromium(browser, page):
    tab, log = open_offline(browser, page)
    _wait_for_charts(tab)
    for chart_id in (*CHART_IDS, *PATTERN_CHART_IDS):
        marks = tab.locator(f"#{chart_id} svg path").count()
        assert marks > 10, f"{chart_id} drew {marks} paths"
        assert "could not be drawn" not in tab.locator(f"#{chart_id}").inner_text()
    assert tab.locator("#table-provenance tbody tr").count() == 2
    from attnwh.reports.sections import SECTIONS

    # Drawn: special tokens, attention sinks, context mixing, pattern types, pattern gallery,
    # provenance; the others have a note (massive activations: a random model has none).
    assert tab.locator(".note").count() == len(SECTIONS) - 6 and tab.locator(
        'section[id^="section-"] > h2'
    ).count() == len(SECTIONS)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    tab.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert log["errors"] == [], log["errors"]
    assert log["requests"] == [], f"requests left the page: {log['requests']}"
    assert log["dialogs"] == []
    tab.context.close()


def test_hostile_names_show_as_text_in_chromium(browser, hostile_warehouse, tmp_path):
    out = tmp_path / "hostile.html"
    _report(hostile_warehouse, out)
    tab, log = open_offline(browser, out)
    _wait_for_charts(tab)
    table = tab.locator("#table-provenance").inner_text()
    assert HOSTILE in table and "<img src=x onerror=alert(2)>" in table
    # The facet headers of the charts carry the model path as SVG text (wrapped to the panel,
    # one SVG text line per line: inner_text joins them without the space).
    header = tab.locator(f"#{CHART_IDS[0]}").inner_text()
    assert "run 1 · <img src=x" in header and "onerror=alert(2)>" in header
    assert tab.locator("#table-provenance script, #table-provenance img").count() == 0
    tab.screenshot(path=str(ARTIFACTS / "report-hostile.png"), full_page=True) if ARTIFACTS.exists() else None
    assert log["dialogs"] == [], f"a script from the data ran: {log['dialogs']}"
    assert log["errors"] == [] and log["requests"] == []
    tab.context.close()


@pytest.mark.slow
def test_every_section_renders_in_chromium(browser, tmp_path):
    """The synthetic warehouse has data for every section: each chart draws, with no error."""
    from attnwh.reports.build import build_report
    from fixtures.synthetic_warehouse import add_head_roles, add_restriction

    # With a fine-tuning run, for its table, head-roles runs and a restriction run.
    db = add_restriction(add_head_roles(tuned_synthetic(tmp_path / "synthetic.duckdb")))
    ids = tuple(c.id for c in build_report(db).charts())
    out = tmp_path / "all.html"
    _report(db, out)
    tab, log = open_offline(browser, out)
    _wait_for_charts(tab, ids)
    assert tab.locator(".note").count() == 0
    for chart_id in ids:
        assert tab.locator(f"#{chart_id} svg path").count() > 3, chart_id
        assert "could not be drawn" not in tab.locator(f"#{chart_id}").inner_text()
    if ARTIFACTS.exists():
        tab.screenshot(path=str(ARTIFACTS / "report-all-sections.png"), full_page=True)
    assert log["errors"] == [] and log["requests"] == [] and log["dialogs"] == []
    tab.context.close()


@pytest.mark.slow
@pytest.mark.parametrize("width", [800, 1400])
def test_page_never_scrolls_sideways(browser, tmp_path, width):
    """At 800 and 1400 px the page is no wider than the window, no chart is cut or scrolls in its
    box (a wide one is drawn smaller), the tables fit the page without scrolling, even with a long path in a
    run's command (it made the provenance table 1,224 px wide at any window width), and a
    class name in the provenance table stays whole."""
    import duckdb

    from attnwh.reports.build import build_report

    db = tuned_synthetic(tmp_path / "synthetic.duckdb")
    with duckdb.connect(str(db)) as con:
        long = "/home/researcher/experiments/attention-warehouse-study-2025-01-01/sentiment-minilm-l6-v2"
        con.execute(
            "UPDATE runs SET command = ? WHERE run_id = 1",
            [f"attnwh study --db {long}/attnwh.duckdb --out-dir {long}/models --report {long}/report.html"],
        )
    ids = tuple(c.id for c in build_report(db).charts())
    out = tmp_path / "all.html"
    _report(db, out)
    tab, log = open_offline(browser, out, width=width)
    _wait_for_charts(tab, ids)
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"report-{width}px.png"), full_page=True)
    scroll, inner = tab.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the page is {scroll} px wide in a {inner} px window"
    cut = tab.evaluate(
        "() => [...document.querySelectorAll('.chart-view')].filter(v => v.scrollWidth > v.clientWidth).map(v => v.id)"
    )
    assert cut == [], f"these charts are wider than their box at {width} px: {cut}"
    for table in ("table-provenance", "table-finetunes"):
        wide, box = tab.evaluate(
            "id => { const wrap = document.getElementById(id).parentElement; return [wrap.scrollWidth, wrap.clientWidth]; }",
            table,
        )
        assert wide <= box, f"{table} is {wide} px wide in its {box} px box: it scrolls sideways"
    # The word is drawn on one line (one client rect), not broken after "BertForSequence".
    rects = tab.evaluate(
        """() => {
            const word = 'BertForSequenceClassification';
            const span = [...document.querySelectorAll('#table-provenance .line')].find(s => s.textContent.includes(word));
            const node = span.firstChild, start = node.textContent.indexOf(word), range = document.createRange();
            range.setStart(node, start);
            range.setEnd(node, start + word.length);
            return range.getClientRects().length;
        }"""
    )
    assert rects == 1, "BertForSequenceClassification breaks inside the word"
    assert log["errors"] == [] and log["requests"] == []
    tab.context.close()
