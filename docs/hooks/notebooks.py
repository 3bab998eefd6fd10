"""MkDocs hook: the notebooks under docs/ are executed at build time, so that their pages show
outputs made by the code being documented.

The notebooks are committed without outputs (tests/test_notebook.py checks it); committed
outputs would go stale without a word when the code changes. Before mkdocs-jupyter renders a
notebook, this hook runs it from a clean kernel in a temporary folder (the tour writes its
warehouse in the current folder, which must not be docs/), offline (HF_HUB_OFFLINE=1), and
hands mkdocs-jupyter the executed copy under build/docs-notebooks/. A cell that raises fails
the build. The copy is reused while the notebook, the attnwh source and the versions of the
libraries that shape the outputs are unchanged, so `mkdocs serve` does not run it again on
every edit.

For the static page:

- Altair charts run with the `json` renderer (the Vega-Lite spec, data included, as
  application/json: the `mimetype` renderer's media type is one nbformat refuses) and become
  HTML that draws them with the Vega bundle vl-convert ships, inlined once before the
  first chart: the page needs no network, unlike the default renderer's scripts from a CDN.
- Jupyter widget outputs are dropped (rich's live progress bars): they are live displays of
  a kernel, with nothing to show on a page.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import os
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

OUT = Path("build", "docs-notebooks")
# The folders whose files shape the outputs (the package-dir mapping's sources).
SOURCES = ("attnwh", "ingest", "sql", "reports")
LIBRARIES = ("torch", "transformers", "tokenizers", "altair", "polars", "duckdb", "rich", "vl-convert-python")
RENDERER = "import altair; altair.renderers.enable('json')"
WIDGET = "application/vnd.jupyter.widget-view+json"
TIMEOUT = 900


def cache_key(notebook: Path, root: Path) -> str:
    """A digest of the notebook, every source file of attnwh and the libraries' versions."""
    digest = hashlib.sha256(notebook.read_bytes())
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    for library in LIBRARIES:
        try:
            digest.update(f"{library}={importlib.metadata.version(library)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{library}=none".encode())
    return digest.hexdigest()[:16]


def execute(notebook: Path) -> Any:
    """The notebook run from a clean kernel in a temporary folder, offline; raises
    PluginError naming the cell where a cell fails."""
    import nbclient
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="attnwh-notebook-") as folder:
        client = nbclient.NotebookClient(
            nb,
            timeout=TIMEOUT,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
            extra_arguments=[f"--IPKernelApp.exec_lines={RENDERER}"],
        )
        try:
            client.execute(env=env, cwd=folder)
        except nbclient.exceptions.CellExecutionError as error:
            raise PluginError(f"{notebook}: a cell failed while building its page:\n{error}") from None
    return nb


def chart_html(spec: Any, bundle: str | None) -> str:
    """A Vega-Lite spec drawn by vega-embed in the page; `bundle`: the Vega script, given
    with the page's first chart."""
    from attnwh.reports.page import script_json

    script = f"<script>{bundle}</script>\n" if bundle else ""
    return (
        f'{script}<div class="attnwh-notebook-chart"></div>\n'
        "<script>(function () {\n"
        "  const el = document.currentScript.previousElementSibling;\n"
        f"  vegaEmbed(el, {script_json(spec)}, {{actions: false}})"
        ".catch(function (error) { el.textContent = String(error); });\n"
        "})();</script>\n"
    )


def for_the_page(executed: Any) -> Any:
    """The executed notebook with its charts as self-contained HTML and its widget outputs
    dropped."""
    from attnwh.reports.page import javascript_bundle

    nb = copy.deepcopy(executed)
    nb.metadata.pop("widgets", None)
    bundled = False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            data = output.get("data", {})
            if WIDGET in data:
                continue
            spec = data.get("application/json")
            if isinstance(spec, dict) and "vega-lite" in str(spec.get("$schema", "")):
                html = chart_html(spec, None if bundled else javascript_bundle())
                bundled = True
                output["data"] = {"text/html": html, "text/plain": "Altair chart"}
            kept.append(output)
        cell.outputs = kept
    return nb


def executed_copy(notebook: Path, root: Path) -> Path:
    """build/docs-notebooks/NAME-KEY.ipynb, the notebook executed and made ready for its page;
    made when missing (older copies of the same notebook removed)."""
    import nbformat

    out = root / OUT
    key = cache_key(notebook, root)
    target = out / f"{notebook.stem}-{key}.ipynb"
    if target.is_file():
        return target
    page = for_the_page(execute(notebook))
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{notebook.stem}-*.ipynb"):
        old.unlink()
    partial = target.with_suffix(".partial")
    nbformat.write(page, partial)
    partial.replace(target)
    return target


# After mkdocs-jupyter's own on_files, which wraps each notebook in a File of its own that
# works its source path out anew: the path is set on that wrapper.
@event_priority(-100)
def on_files(files: Any, config: Any) -> Any:
    root = Path(config.config_file_path).resolve().parent
    for file in files:
        if file.src_uri.endswith(".ipynb") and file.abs_src_path is not None:
            file.abs_src_path = str(executed_copy(Path(file.abs_src_path), root))
    return files
