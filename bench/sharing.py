"""Benchmark: a reader polling the warehouse while a command writes it.

Two writers, each the real command in a process of its own, into a fresh warehouse:

- ingest: `attnwh ingest` of 2,000 SST-2 train examples (with --glue-dir; else the two
  bundled sample tasks, 800 examples) on the bundled MiniLM;
- study: `attnwh study` on the bundled MiniLM and sample task, its fine-tuned model reused
  from a warm-up run, so that what is timed is its statistics, comparison, ablation sweep
  and report.

Each runs alone, with a reader that reads the warehouse every --every seconds through
`attnwh.api.Warehouse` (a count of the committed examples, and the runs table, in one
``with`` block) from this process, and beside the same reader reading another (finished) warehouse, which costs the
writer the reader's CPU without any hand-over; the three take turns, --repeats times after a
warm-up round (`common.alternate`).
Prints, per writer: its best seconds alone and polled, the median over repeats of the
ratio polled / alone with its range, and the reader's reads: tried, succeeded, the longest
and the median wait (the whole read: opening, waiting for the writer's hand-over, the query).
Usage: ``python bench/sharing.py [--glue-dir ../shared/data/glue] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import alternate

from attnwh.api import Warehouse
from attnwh.errors import AttnwhError


class Poller:
    """Reads `db` every `every` seconds on a thread until stopped, timing each read."""

    def __init__(self, db: Path, every: float) -> None:
        self.db, self.every = db, every
        self.waits: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if not self.db.exists():
                continue
            started = time.perf_counter()
            try:
                with Warehouse(self.db) as found:  # one opening (one hand-over) for the poll's two reads
                    found.sql("SELECT count(*) AS n FROM run_examples")
                    found.runs()
            except AttnwhError as exc:
                if any(s in str(exc) for s in ("not an attnwh warehouse", "no warehouse", "not a DuckDB")):
                    continue  # the writer is still creating the file and its schema
                self.failures.append(str(exc))
                continue
            self.waits.append(time.perf_counter() - started)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def attnwh(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "attnwh", *args], capture_output=True, text=True, env=ENV)
    if done.returncode:
        raise SystemExit(f"attnwh {' '.join(args)} failed: {done.stderr.strip()[-500:]}")


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--writers", default="ingest,study")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="attnwh-sharing-"))
    if args.glue_dir:
        data = ["--glue-dir", str(args.glue_dir), "--task", "sst2", "--split", "train", "--limit", "2000"]
    else:
        data = ["--task", "sentiment,entailment"]
    writers = {
        "ingest": lambda db: attnwh("ingest", *data, "--db", str(db)),
        "study": lambda db: attnwh(
            "study", "--db", str(db), "--out-dir", str(tmp / "models"), "--report", str(db.with_suffix(".html"))
        ),
    }
    for name in args.writers.split(","):
        write = writers[name]
        polls: list[Poller] = []

        def alone(repeat: int, write=write, name=name) -> None:
            write(tmp / f"{name}-alone-{repeat}.duckdb")

        def polled(repeat: int, write=write, name=name, polls=polls) -> None:
            db = tmp / f"{name}-polled-{repeat}.duckdb"
            with Poller(db, args.every) as poller:
                write(db)
            if repeat:
                polls.append(poller)

        elsewhere: list[Poller] = []

        def beside(repeat: int, write=write, name=name, elsewhere=elsewhere) -> None:
            # The same reader on a finished warehouse of the same kind: what its reads cost
            # the writer's CPU without any hand-over (this machine's cores are shared).
            other = next(tmp.glob(f"{name}-alone-*.duckdb"))
            with Poller(other, args.every) as poller:
                write(tmp / f"{name}-beside-{repeat}.duckdb")
            if repeat:
                elsewhere.append(poller)

        times = alternate({"alone": alone, "polled": polled, "beside": beside}, args.repeats)
        ratios = sorted(p / a for p, a in zip(times["polled"], times["alone"], strict=True))
        waits = [w for p in polls for w in p.waits]
        failures = [f for p in polls for f in p.failures]
        print(
            f"{name}: alone best {min(times['alone']):.1f} s, polled best {min(times['polled']):.1f} s; "
            f"polled / alone median {statistics.median(ratios):.3f} [{ratios[0]:.3f}, {ratios[-1]:.3f}] "
            f"over {args.repeats} repeats"
        )
        print(
            f"  reads every {args.every:g} s: {len(waits) + len(failures)} tried, {len(waits)} succeeded; "
            f"wait longest {max(waits, default=0):.3f} s, median {statistics.median(waits) if waits else 0:.3f} s"
        )
        for failure in sorted(set(failures)):
            print(f"  failed: {failure}")
        beside_ratios = sorted(b / a for b, a in zip(times["beside"], times["alone"], strict=True))
        shared = sorted(p / b for p, b in zip(times["polled"], times["beside"], strict=True))
        print(
            f"  the reader on another warehouse: beside / alone median {statistics.median(beside_ratios):.3f} "
            f"[{beside_ratios[0]:.3f}, {beside_ratios[-1]:.3f}]; polled / beside (the hand-overs) "
            f"{statistics.median(shared):.3f} [{shared[0]:.3f}, {shared[-1]:.3f}]"
        )


if __name__ == "__main__":
    main()
