"""`attnwh status`: what the command writing a warehouse is doing, from another terminal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnwh.cli.output import results_console
from attnwh.errors import UsageError
from attnwh.options import DEFAULT_DB, ReadDbOpt
from attnwh.sql.status import WarehouseStatus


def status(
    db: ReadDbOpt = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as one JSON object.")] = False,
) -> None:
    """Show what the command writing the warehouse is doing: its command line, study stage, each task's examples (or steps, or sets) done of total, elapsed time and the time left; or how the last command ended (finished, failed, interrupted) and the runs it left unfinished.

    It reads the status file the writing command keeps beside the warehouse, never the warehouse itself, so it neither waits for the writer nor slows it.
    """
    from attnwh.api import Warehouse
    from attnwh.sql.status import read_status

    # A command may hold the warehouse before it has created the file (loading its model).
    found = Warehouse(db).status() if db.exists() else read_status(db)
    if not db.exists() and found.state == "idle":
        raise UsageError(f"no warehouse at {db}, and no attnwh command is writing one there")
    if as_json:
        record = dataclasses.asdict(found)
        record["db"] = str(found.db)
        print(json.dumps(record, default=str))
        return
    print_status(results_console(), found)


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _when(epoch: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S") if epoch else "–"


def print_status(console: Console, found: WarehouseStatus) -> None:
    """The status as a few lines and a table of the command's bars."""
    if found.state == "idle":
        console.print(f"{found.db}: no attnwh command is writing it, and none has kept a status here", highlight=False)
    else:
        console.print(Text(found.command or "an attnwh command", style="bold"))
        where = f"process {found.pid}" + (f" on {found.host}" if found.host else "")
        if found.running:
            console.print(
                f"{where}: running for {clock(found.elapsed_seconds)}, since {_when(found.started)}", highlight=False
            )
        else:
            console.print(
                f"{where}: {found.state} at {_when((found.started or 0) + (found.elapsed_seconds or 0))} after "
                f"{clock(found.elapsed_seconds)}",
                highlight=False,
            )
        if found.message and found.state != "finished":
            console.print(f"  {found.message}", highlight=False)
        if found.stage is not None:
            console.print(f"stage {found.stage.index}/{found.stage.of}: {found.stage.name}", highlight=False)
    if found.stages or found.bars:
        console.print(_bars_table(found))
    if found.runs:
        table = Table(title="runs left unfinished", title_justify="left")
        for column in ("run", "kind", "model", "task", "status", "examples"):
            table.add_column(column)
        for run in found.runs:
            table.add_row(*(str(run.get(k, "")) for k in ("run_id", "kind", "model", "task", "status", "n_examples")))
        console.print(table)


def _bars_table(found: WarehouseStatus) -> Table:
    """A row per bar (and per stage without one); the stage column only for a study."""
    staged = bool(found.stages)
    table = Table(box=None, pad_edge=False)
    for column, justify in (
        *((("stage", "left"),) if staged else ()),
        ("task", "left"),
        ("done", "right"),
        ("rate", "right"),
        ("elapsed", "right"),
        ("eta", "right"),
        ("", "left"),
    ):
        table.add_column(column, justify=justify)
    shown = set()
    for bar in found.bars:
        rate = bar.rate
        speed = "–" if rate is None else f"{rate:.1f} {bar.unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{bar.unit}"
        total = "?" if bar.total is None else f"{bar.total:,}"
        state = "done" if bar.finished else "running" if found.running else found.state
        table.add_row(
            *((bar.stage or "",) if staged else ()),
            bar.name,
            f"{bar.done:,}/{total}" + (f" · batch at pass {bar.passes[0]}/{bar.passes[1]}" if bar.passes else ""),
            speed,
            clock(bar.seconds),
            clock(bar.eta_seconds) if found.running else "",
            state,
        )
        shown.add(bar.stage)
    for stage in found.stages:  # a stage without bars (skipped: everything was there)
        if stage.name not in shown:
            table.add_row(stage.name, "", "", "", clock(stage.seconds), "", stage.outcome or found.state)
    return table
