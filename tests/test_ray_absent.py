"""`--ray-address auto` where no Ray cluster runs: one line, nothing written. Its own module,
so that it runs while no test's Ray instance is up (`auto` finds any instance on the machine).

Needs the ray extra (`pip install 'attnwh[ray]'`), which CI installs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pair_args

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'attnwh[ray]'")


def _ray_running() -> bool:
    """Whether a Ray instance's GCS server runs on this machine (what `auto` looks for)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"gcs_server" in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def test_a_cluster_that_is_not_there_is_one_line_and_nothing_written(tiny_model_dir, pairs, tmp_path):
    if _ray_running():
        pytest.skip("a Ray instance runs on this machine, so `auto` would find it")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    db = tmp_path / "w.duckdb"
    done = subprocess.run(
        [sys.executable, "-m", "attnwh", "ingest", *pair_args(pairs, db), "--model", str(tiny_model_dir("bert"))]
        + ["--engine", "ray", "--ray-address", "auto"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnwh: error: --ray-address auto found no Ray cluster"), lines
    assert "Traceback" not in done.stderr
    assert not db.exists()
