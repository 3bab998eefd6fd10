"""The notebook tour (docs/notebooks/tour.ipynb): committed without outputs, it runs from a
clean kernel without an error or a warning, offline, and the documentation site shows it as
a page with its outputs (executed at build time by docs/hooks/notebooks.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "notebooks" / "tour.ipynb"
# What rich and tqdm print in a kernel without ipywidgets (the notebook extra installs it).
WARNINGS = ("Warning", 'install "ipywidgets"', "IProgress not found")


def test_the_tour_is_committed_without_outputs():
    cells = json.loads(TOUR.read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code and all(not c["outputs"] and c["execution_count"] is None for c in code)


def output_text(output) -> str:
    return output.get("text", "") + "".join(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))


@pytest.mark.slow
def test_the_tour_runs_from_a_clean_kernel(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the kernel inherits it: nothing from the hub
    notebook = nbformat.read(shutil.copy(TOUR, tmp_path / "tour.ipynb"), as_version=4)
    # Any error in a cell raises CellExecutionError here, naming the cell.
    nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # No cell warns: the first, which imports datasets and transformers (tqdm) and draws
    # rich's progress bars, is where a kernel without ipywidgets would.
    warned = [output_text(o) for o in outputs if any(w in output_text(o) for w in WARNINGS)]
    assert not warned, warned
    # The tour reached its end: the last cell drew the token-level view.
    last = notebook.cells[-1].outputs
    assert any(
        any(key.startswith("application/vnd.vegalite") or key == "text/html" for key in o.get("data", {})) for o in last
    )
    assert (tmp_path / "tour.duckdb").is_file()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documentation site built as CI builds it (--strict). The executed tour is cached
    under build/docs-notebooks/ by its inputs, so after .ci/run's own build this one reuses it."""
    pytest.importorskip("mkdocs_jupyter", reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_site_shows_the_tour_with_its_outputs(site):
    page = site / "notebooks" / "tour" / "index.html"
    assert page.is_file()
    html = page.read_text(encoding="utf-8")
    # Tables (polars frames), the report's chart with its Vega-Lite spec, the token view (the
    # `attnwh show` page in a frame, its maps inline), printed output, and not one warning.
    assert html.count("<table") >= 4
    assert html.count('class="attnwh-notebook-chart"') == 1 and html.count("vega-lite/v") >= 1
    assert html.count("<iframe srcdoc=") == 1 and 'title="Attention of example' in html
    assert "to [CLS] from the maps" in html and "sink head" in html
    assert not [w for w in WARNINGS if w in html]
    # The nav and the Python API page link to the page.
    python = (site / "python" / "index.html").read_text(encoding="utf-8")
    assert python.count('href="../notebooks/tour/"') >= 2  # the nav entry and the text's link


@pytest.mark.slow
def test_the_tour_page_draws_its_charts_offline(site):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from test_report_browser import CHROMIUM_ARGS, _chromium

    executable = _chromium()
    page_path = site / "notebooks" / "tour" / "index.html"
    outside: list[str] = []
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        # The site's own files may load; anything else is recorded and aborted.
        own = site.resolve().as_uri()

        def route(r):
            if r.request.url.startswith(own):
                r.continue_()
            else:
                outside.append(r.request.url)
                r.abort()

        tab.route("**/*", route)
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto(page_path.resolve().as_uri())
        tab.wait_for_function(
            "() => [...document.querySelectorAll('.attnwh-notebook-chart')]"
            ".every(el => el.querySelectorAll('svg path, canvas').length > 0)",
            timeout=30_000,
        )
        charts = tab.locator(".attnwh-notebook-chart")
        assert charts.count() == 1
        assert charts.nth(0).bounding_box()["height"] > 100
        # The token view: the show page in its frame draws its head maps on canvases.
        frame = tab.frame_locator('iframe[title^="Attention of example"]')
        frame.locator("canvas").first.wait_for(timeout=30_000)
        assert frame.locator("canvas").count() >= 2
        assert tab.locator('iframe[title^="Attention of example"]').bounding_box()["height"] > 100
        assert tab.locator(".jp-OutputArea-output table").count() >= 4
        browser.close()
    assert outside == [], f"requests left the site: {outside}"
    # Material's search worker cannot load its index from file:// (a served site can); any
    # other error on the page counts.
    assert [e for e in errors if "/search/" not in e] == [], errors
