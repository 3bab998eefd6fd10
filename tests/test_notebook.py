"""The notebook tour (docs/notebooks/tour.ipynb) runs from a clean kernel without an error,
offline, and is committed without outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

TOUR = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "tour.ipynb"


def test_the_tour_is_committed_without_outputs():
    cells = json.loads(TOUR.read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code and all(not c["outputs"] and c["execution_count"] is None for c in code)


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
    # The tour reached its end: the last cell drew the token-level view.
    last = notebook.cells[-1].outputs
    assert any(
        "application/vnd.vegalite.v5+json" in o.get("data", {}) or "text/html" in o.get("data", {}) for o in last
    )
    assert (tmp_path / "tour.duckdb").is_file()
