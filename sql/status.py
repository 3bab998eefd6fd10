"""What a command writing a warehouse is doing, for `attnwh status` in another terminal.

The writing command keeps ``DB.status`` (JSON, replaced whole, so a reader never sees half
of it) beside the warehouse: its command line and process, the study stage it is in, and a
row per progress bar (task, done of total, when it started and last moved). It is written
whenever a bar starts, moves (once per stored unit: a batch, a fine-tuning step) or ends,
and once more when the command ends: finished, failed (with the error) or interrupted. So
it counts what is committed, the moment the writer has stored it. Reading it never
touches the warehouse, so it never waits for the writer nor slows it.

A status that says running while no process holds the writer lock (``DB.lock``) is from a
command that was killed: it reads as interrupted.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Seconds between two writes of the status for passes within a batch.
PASS_WRITE_EVERY = 1.0


def status_path(db: Path) -> Path:
    return db.with_name(db.name + ".status")


class Activity:
    """The status file of one command writing `db`, kept up to date from its progress."""

    def __init__(self, db: Path, command: str) -> None:
        self.path = status_path(db)
        # The status before this command, put back if it is refused before it starts any work.
        try:
            self._before: bytes | None = self.path.read_bytes()
        except OSError:
            self._before = None
        now = time.time()
        self.record: dict[str, Any] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "started": now,
            "updated": now,
            "state": "running",
            "message": None,
            # A study stage begun before the command first wrote (and so before this status).
            "stage": _stage,
            "stages": [{**_stage, "started": now, "ended": None}] if _stage else [],
            "bars": [],
        }
        self.write()

    def write(self) -> None:
        self.record["updated"] = time.time()
        temporary = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(self.record), encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError:
            pass  # a status that cannot be written must not stop the work it describes

    def stage(self, name: str, index: int, of: int) -> None:
        self.record["stage"] = {"name": name, "index": index, "of": of}
        self.record["stages"].append({"name": name, "index": index, "of": of, "started": time.time(), "ended": None})
        self.write()

    def stage_done(self, outcome: str) -> None:
        if self.record["stages"]:
            self.record["stages"][-1].update(ended=time.time(), outcome=outcome)
        self.record["stage"] = None
        self.write()

    def bar(self, name: str, total: int | None, unit: str) -> None:
        self._end_bar()
        stage = self.record["stage"]
        now = time.time()
        self.record["bars"].append(
            {
                "name": name,
                "stage": stage["name"] if stage else None,
                "unit": unit,
                "done": 0,
                "total": total,
                "started": now,
                "moved": now,
                "ended": None,
            }
        )
        self.write()

    def progress(self, done: int | None = None, total: int | None = None, advance: int = 0) -> None:
        if not self.record["bars"]:
            return
        bar = self.record["bars"][-1]
        bar["done"] = (bar["done"] if done is None else done) + advance
        if total is not None:
            bar["total"] = total
        bar["moved"] = time.time()
        bar["passes"] = None  # the next batch's passes have not begun
        self.write()

    def passes(self, done: int, of: int) -> None:
        if not self.record["bars"]:
            return
        now = time.time()
        # At most one write a second: a pass of a small model takes milliseconds.
        if done < of and now - self.record["updated"] < PASS_WRITE_EVERY:
            return
        bar = self.record["bars"][-1]
        bar["passes"] = [done, of]
        bar["moved"] = now
        self.write()

    def end_bars(self) -> None:
        self._end_bar()
        self.write()

    def _end_bar(self) -> None:
        if self.record["bars"] and self.record["bars"][-1]["ended"] is None:
            self.record["bars"][-1]["ended"] = time.time()

    def finish(self, state: str, message: str | None = None) -> None:
        if state == "failed" and not self.record["bars"] and not self.record["stages"]:
            self._restore()  # refused before any work (bad input): it leaves no status of its own
            return
        self._end_bar()
        self.record.update(state=state, message=message, stage=None, ended=time.time())
        self.write()

    def _restore(self) -> None:
        try:
            if self._before is None:
                self.path.unlink(missing_ok=True)
            else:
                self.path.write_bytes(self._before)
        except OSError:
            pass


# The activities of this process (one per warehouse it writes under a command).
_active: list[Activity] = []


def start(db: Path, command: str) -> Activity:
    """Begin the status of a command writing `db` (attnwh.sql.sharing.writing, once it holds
    the writer lock); this process's progress goes to it until :func:`stop`."""
    activity = Activity(db, command)
    _active.append(activity)
    return activity


def stop(activity: Activity, state: str, message: str | None) -> None:
    global _stage
    activity.finish(state, message)
    _active.remove(activity)
    _stage = None


# The study stage this process is in, for an activity that starts within it.
_stage: dict[str, Any] | None = None


def on_stage(name: str, index: int, of: int) -> None:
    global _stage
    _stage = {"name": name, "index": index, "of": of}
    for activity in _active:
        activity.stage(name, index, of)


def on_stage_done(outcome: str) -> None:
    global _stage
    _stage = None
    for activity in _active:
        activity.stage_done(outcome)


def on_bar(name: str, total: int | None, unit: str) -> None:
    for activity in _active:
        activity.bar(name, total, unit)


def on_progress(done: int | None = None, total: int | None = None, advance: int = 0) -> None:
    for activity in _active:
        activity.progress(done, total, advance)


def on_pass(done: int, of: int) -> None:
    """A forward pass of the batch being computed is done (`done` of `of`): the sweeps and the
    restriction run many passes on one batch, and the status moves with each."""
    for activity in _active:
        activity.passes(done, of)


def on_bars_closed() -> None:
    for activity in _active:
        activity.end_bars()


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BarStatus:
    """One progress bar of the command: a task of a stage, in examples, steps or sets."""

    name: str
    stage: str | None
    unit: str
    done: int
    total: int | None
    seconds: float  # from its start to its last move (or its end)
    finished: bool  # ended with all of its total done (a bar a command stopped short is not)
    passes: tuple[int, int] | None = None  # forward passes done of the batch being computed, of how many

    @property
    def rate(self) -> float | None:
        """Units per second since the bar started."""
        return self.done / self.seconds if self.done and self.seconds > 0 else None

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the mean rate since the bar started (0 when finished)."""
        if self.finished:
            return 0.0
        if self.total is None or not self.rate:
            return None
        return max(0.0, (self.total - self.done) / self.rate)


@dataclass(frozen=True)
class StageStatus:
    name: str
    index: int
    of: int
    seconds: float
    outcome: str | None  # None while it runs


@dataclass(frozen=True)
class WarehouseStatus:
    """What the last (or current) command writing a warehouse did: `state` is running,
    finished, failed or interrupted; "idle" when no command has written it since attnwh
    kept a status."""

    db: Path
    state: str
    command: str | None = None
    pid: int | None = None
    host: str | None = None
    started: float | None = None  # epoch seconds
    updated: float | None = None
    elapsed_seconds: float | None = None
    message: str | None = None
    stage: StageStatus | None = None
    stages: tuple[StageStatus, ...] = ()
    bars: tuple[BarStatus, ...] = ()
    runs: list[dict[str, Any]] = field(default_factory=list)  # runs left unfinished, when no writer runs

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def current(self) -> BarStatus | None:
        """The bar moving now, if any."""
        return self.bars[-1] if self.running and self.bars and not self.bars[-1].finished else None


def read_status(db: Path) -> WarehouseStatus:
    """The status of `db`'s writer from its status file, without touching the warehouse."""
    from attnwh.sql.sharing import writer_running

    path = status_path(db)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        # No command kept a status here; a writer may still hold it (a library call).
        writer = writer_running(db)
        if writer is None:
            return WarehouseStatus(db, "idle")
        return WarehouseStatus(db, "running", writer.get("command"), writer.get("pid"), writer.get("host"))
    except ValueError:
        return WarehouseStatus(db, "idle", message=f"{path} is not readable")
    now = time.time()
    state, message = record["state"], record.get("message")
    if state == "running" and writer_running(db) is None:
        state = "interrupted"
        message = f"process {record['pid']} ended without finishing (killed?); rerun the command to resume"
    end = now if state == "running" else record.get("ended") or record["updated"]
    stages = tuple(
        StageStatus(s["name"], s["index"], s["of"], (s["ended"] or end) - s["started"], s.get("outcome"))
        for s in record["stages"]
    )
    bars = tuple(
        BarStatus(
            b["name"],
            b["stage"],
            b["unit"],
            b["done"],
            b["total"],
            (b["ended"] or b["moved"]) - b["started"],
            b["ended"] is not None and (b["total"] is None or b["done"] >= b["total"]),
            tuple(b["passes"]) if b.get("passes") and b["ended"] is None else None,
        )
        for b in record["bars"]
    )
    current = stages[-1] if state == "running" and stages and stages[-1].outcome is None else None
    return WarehouseStatus(
        db,
        state,
        record["command"],
        record["pid"],
        record.get("host"),
        record["started"],
        record["updated"],
        end - record["started"],
        message,
        current,
        stages,
        bars,
    )
