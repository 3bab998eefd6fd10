"""Benchmark: `attnwh report` on a warehouse of one million head-statistics rows.

Builds a synthetic warehouse in a temporary folder (fixtures.synthetic_warehouse: the real schema,
2 models × 2 tasks × 1737 examples × 12 layers × 12 heads = 1,000,512 head_stats rows, with
matching runs, models, examples and run_examples rows), then measures in the same run:

- baseline: only the report's named queries, run into polars — the floor any report pays;
- report: `build_report` + `write_html`, i.e. the whole `attnwh report` minus process start;
- of which, the JavaScript bundle: vl-convert's Vega/Vega-Lite/vega-embed bundle, built once
  per process (its first call starts vl-convert's JavaScript runtime).

Prints seconds and the ratio of the report to the baseline. Target: under 10 s on a 2-core
machine. Usage: ``python bench/report.py [--examples 1737] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from attnwh.reports.build import build_report, write_html

# The synthetic fixtures live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from attnwh.sql import queries as named
from attnwh.sql import warehouse
from fixtures.synthetic_warehouse import build_synthetic_warehouse

QUERIES = ("head_summary", "special_tokens_by_layer", "run_provenance")


def run_queries(db: Path) -> int:
    """The baseline: the report's queries into polars, nothing drawn; returns the row count."""
    con = warehouse.connect(db, read_only=True)
    try:
        return sum(pl.from_arrow(named.run_query(con, named.get_query(q))).height for q in QUERIES)
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1737, help="examples per task (1737 → 1,000,512 rows)")
    parser.add_argument("--keep", type=Path, help="write the warehouse and page here instead of a temp folder")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        db = folder / "bench.duckdb"
        db.unlink(missing_ok=True)
        start = time.perf_counter()
        rows = build_synthetic_warehouse(db, examples=args.examples, layers=12, heads=12)
        print(
            f"warehouse: {rows:,} head_stats rows in {time.perf_counter() - start:.1f} s ({db.stat().st_size / 1e6:.0f} MB)"
        )

        start = time.perf_counter()
        result_rows = run_queries(db)
        baseline = time.perf_counter() - start
        print(f"baseline (report's queries into polars, {result_rows:,} result rows): {baseline:.2f} s")

        start = time.perf_counter()
        report = build_report(db)
        built = time.perf_counter() - start
        page = write_html(report, folder / "report.html")
        total = time.perf_counter() - start
        print(
            f"report: {total:.2f} s (queries + charts {built:.2f} s, page with JavaScript bundle {total - built:.2f} s),"
            f" {page.stat().st_size / 1e6:.1f} MB page"
        )
        print(
            f"ratio report / baseline: {total / baseline:.1f}x; target under 10 s: {'met' if total < 10 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
