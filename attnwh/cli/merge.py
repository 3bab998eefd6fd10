"""`attnwh merge`: store the Parquet shards written by `--shard I/N` (or `--shard-index I
--shards N`) in the warehouse.

No torch: merging needs only the warehouse and the shard folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from attnwh.cli.summaries import print_merge
from attnwh.options import DEFAULT_DB, DbOpt
from attnwh.progress import Bars, interrupts_as


def merge(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="The --shard-dir the shards were written to.", show_default=False)
    ],
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Merge the shards of `--shard I/N` or `--shard-index I --shards N` runs (ingest, compare, ablation) into the warehouse.

    Every file is checked first: a partial part (left by a shard that stopped while writing) or a foreign file is refused with one line, and nothing is written. Each part is stored in its own transaction; merging again, or a shard merged twice, adds nothing. A run holding all its examples is complete; one still missing shards is partial until they are merged. An ablation sweep is finished (significance, combinations, importance) by its command without the shard options, which merge prints.
    """
    from attnwh.ingest.runs.shards import merge_shards
    from attnwh.sql import warehouse

    warehouse.check_writable(db)
    console = Console(stderr=True)
    started = time.perf_counter()
    with (
        Bars(console, unit="parts") as bars,
        interrupts_as(f"interrupted; rerun the merge to finish it (the parts merged so far are in {db})"),
    ):
        summaries = merge_shards(db, folder, bars.start, bars.advance)
    print_merge(summaries, db, time.perf_counter() - started)
