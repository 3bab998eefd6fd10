"""The rate a progress bar shows is the one the summary prints: both count a run from when its
first unit starts computing, and the bar shows a rate as soon as one unit is done."""

from __future__ import annotations

import contextlib
import io
import re
import time
from dataclasses import dataclass, field

from rich.console import Console

from attnwh.ingest.runs import loop
from attnwh.ingest.runs.loop import OpenRun, store_stream
from attnwh.progress import Bars, make_progress


@dataclass
class _Table:
    num_rows: int


@dataclass
class _Unit:
    run_key: str
    name: str
    positions: tuple[int, ...]


@dataclass
class _Part:
    run_key: str
    name: str
    n_examples: int
    tables: dict[str, _Table] = field(default_factory=dict)


class _SlowExecutor:
    """Computes each unit in `seconds` (a sleep: a lower bound whatever the machine does)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def map(self, units):
        for unit in units:
            time.sleep(self.seconds)
            yield _Part(unit.run_key, unit.name, len(unit.positions), {"head_stats": _Table(len(unit.positions))})


def test_a_runs_seconds_include_its_first_unit(monkeypatch):
    monkeypatch.setattr(loop.rows, "store_part", lambda con, run_id, part: None)
    monkeypatch.setattr(loop.runs, "marking_failure", lambda con, *ids: contextlib.nullcontext())
    opened = [
        OpenRun(key, key, i, [_Unit(key, f"{b:06d}", (0, 1)) for b in range(units)])  # type: ignore[list-item]
        for i, (key, units) in enumerate((("a", 3), ("b", 2)))
    ]
    began: list[tuple[str, int, float]] = []
    store_stream(None, _SlowExecutor(0.05), opened, "head_stats", lambda name, total: began.append((name, total, 0)))
    assert [b[:2] for b in began] == [("a", 6), ("b", 4)]
    # Every unit of a run is counted in its time: three units of 0.05 s, not the two after the first.
    assert opened[0].seconds >= 3 * 0.05
    assert opened[1].seconds >= 2 * 0.05
    assert opened[0].n_rows == 6 and opened[1].n_rows == 4


def test_the_bar_shows_the_mean_rate_after_one_update():
    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    progress = make_progress(console)
    task = progress.add_task("sentiment", total=4)
    time.sleep(0.2)
    progress.advance(task, 4)  # one unit did everything: rich's own estimate has one sample
    shown = progress.columns[3].render(progress.tasks[0]).plain
    rate = 4 / progress.tasks[0].finished_time
    assert shown == f"{rate:.1f} ex/s"
    progress.stop()


def test_a_bar_in_a_log_reports_every_interval():
    def lines(log_every: float) -> list[str]:
        out = io.StringIO()
        console = Console(file=out, width=100, force_terminal=False)  # a log, not a terminal
        with Bars(console, log_every=log_every) as bars:
            bars.start("sst2", 10)
            for _ in range(3):
                bars.advance(1)
        return [line for line in out.getvalue().splitlines() if "sst2" in line]

    logged = lines(0.0)
    # One line per advance (interval 0), then the finished bar rich prints at the end.
    assert [re.search(r"\b(\d+)/10\b", line).group(1) for line in logged] == ["1", "2", "3", "3"]
    assert all("ex/s" in line and "eta" in line for line in logged)
    assert len(lines(3600.0)) == 1  # within the interval: only the end


def test_the_eta_follows_the_mean_rate_after_one_update():
    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    progress = make_progress(console)
    task = progress.add_task("sst2", total=10)
    time.sleep(0.2)
    progress.advance(task, 2)  # one update: rich's own estimate has no speed yet
    state = progress.tasks[0]
    expected = round(8 * state.elapsed / 2)
    shown = progress.columns[-1].render(state).plain
    assert shown == f"{expected // 3600}:{expected // 60 % 60:02d}:{expected % 60:02d}"
    progress.advance(task, 8)
    assert progress.columns[-1].render(progress.tasks[0]).plain == "0:00:00"
    progress.stop()


def test_a_slow_bar_shows_seconds_per_unit():
    """Below one unit a second the rate turns around (a fine-tuning step of a 12-layer model
    on a CPU takes seconds): "s/step", never "0.0 step/s"."""
    from attnwh.progress import rate_text

    class Task:
        finished, finished_time = True, 30.0

        def __init__(self, completed: float) -> None:
            self.completed = completed

    assert rate_text(Task(2), "step") == "15.0 s/step"
    assert rate_text(Task(60), "ex") == "2.0 ex/s"
    assert rate_text(Task(0), "step") == "– step/s"
