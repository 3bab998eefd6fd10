"""Benchmark: the same ingest (and ablation sweep) on each engine, whole commands timed.

- local: one process (the baseline);
- ray: ``--engine ray --workers N`` on a local Ray instance that attnwh starts (startup,
  actors loading the model and the driver storing the parts all counted);
- shards: N static shards (``--shard I/N``) run at the same time as separate processes, as
  a Slurm array would, then ``attnwh merge``.

Every variant writes its own warehouse, and the benchmark checks that they hold the same
head statistics (within 1e-6) before it prints seconds and ratios to local.
Usage: ``python bench/engine.py [--glue-dir ../shared/data/glue --task sst2] [--limit 872] [--workers 2]``
Needs the ray extra (``pip install 'attnwh[ray]'``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

ATTNWH = [sys.executable, "-m", "attnwh"]
STATS = "to_cls, to_sep, to_punct, to_self, entropy, norm_to_cls, norm_to_sep"


def timed(*commands: list[str], threads: int | None = None) -> float:
    """Run the commands at the same time (each with `threads` torch threads when given);
    seconds until the last one ends."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "120"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    running = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands]
    for process in running:
        _, err = process.communicate()
        if process.returncode:
            raise SystemExit(f"failed: {' '.join(process.args)}\n{err.decode()[-2000:]}")  # type: ignore[arg-type]
    return time.perf_counter() - start


def stats(db: Path) -> np.ndarray:
    with duckdb.connect(str(db), read_only=True) as con:
        return np.array(
            con.execute(f"SELECT {STATS} FROM head_stats ORDER BY example_id, layer, head").fetchall(), dtype=float
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", type=Path, default=Path(__file__).parents[2] / "shared" / "data" / "glue")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    data = ["--glue-dir", str(args.glue_dir), "--task", args.task] if args.glue_dir.is_dir() else []
    if not data:
        print(f"{args.glue_dir} not found: the bundled sample tasks instead", file=sys.stderr)
    reading = [*data, "--batch-size", str(args.batch_size), "--device", "cpu"]
    if args.limit:
        reading += ["--limit", str(args.limit)]
    n = args.workers
    work = Path(tempfile.mkdtemp(prefix="attnwh-bench-engine-"))
    try:
        seconds = {}
        seconds["local"] = timed([*ATTNWH, "ingest", *reading, "--db", str(work / "local.duckdb")])
        seconds[f"ray, {n} workers"] = timed(
            [*ATTNWH, "ingest", *reading, "--db", str(work / "ray.duckdb"), "--engine", "ray", "--workers", str(n)]
        )
        shard_dir = work / "shards"
        shards = [
            [*ATTNWH, "ingest", *reading, "--shard", f"{i}/{n}", "--shard-dir", str(shard_dir)] for i in range(1, n + 1)
        ]
        # Each shard gets its share of the cores, as a Slurm array task would (Ray gives each
        # actor one CPU and one thread the same way).
        compute = timed(*shards, threads=max(1, (os.cpu_count() or 1) // n))
        merge = timed([*ATTNWH, "merge", str(shard_dir), "--db", str(work / "shards.duckdb")])
        seconds[f"{n} shards + merge"] = compute + merge

        reference = stats(work / "local.duckdb")
        for name in ("ray", "shards"):
            other = stats(work / f"{name}.duckdb")
            assert other.shape == reference.shape, (name, other.shape, reference.shape)
            assert np.abs(other - reference).max() <= 1e-6, name
        print(f"{len(reference):,} head-statistics rows, identical (≤ 1e-6) on every engine; {os.cpu_count()} CPUs")
        print(f"{'engine':<22} {'seconds':>8} {'× local':>8}")
        for name, value in seconds.items():
            print(f"{name:<22} {value:8.1f} {value / seconds['local']:8.2f}")
        print(f"  (shards: {compute:.1f} s computing, {merge:.1f} s merging)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
