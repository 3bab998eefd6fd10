"""Progress bars and Ctrl-C for the long commands (ingest, compare, relations, ablation,
finetune, study): one look for every bar, one way to stop.

rich.progress is imported when a bar is first shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console

from attnwh.errors import Interrupted

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

    from attnwh.cli.options import DataSource

T = TypeVar("T")


def make_progress(console: Console, unit: str = "ex", stat: ProgressColumn | None = None) -> Progress:
    """A progress display: name, bar, done/total, `stat` (default: speed in `unit`/s), elapsed, eta."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Speed(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.speed:.1f} {unit}/s" if task.speed else f"– {unit}/s", style="cyan")

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        stat or Speed(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    )


class Bars:
    """A bar per task, shown from the first `start` until `close`: `start` and `advance` are the
    callbacks the ingest loops take."""

    def __init__(self, console: Console, unit: str = "ex", stat: ProgressColumn | None = None) -> None:
        self._make = lambda: make_progress(console, unit, stat)
        self._progress: Progress | None = None
        self._current: Any = None

    def start(self, name: str, total: int | None, **fields: Any) -> None:
        if self._progress is None:
            self._progress = self._make()
            self._progress.start()
        self._current = self._progress.add_task(name, total=total, **fields)

    def starter(self, name: str) -> Callable[[int], None]:
        """`start` for loops whose callback takes only the total."""
        return lambda total: self.start(name, total)

    def advance(self, n: int) -> None:
        if self._progress is not None and self._current is not None:
            self._progress.advance(self._current, n)

    def update(self, completed: int, total: int | None, **fields: Any) -> None:
        if self._progress is not None and self._current is not None:
            self._progress.update(self._current, completed=completed, total=total, **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._current = None

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def interrupts_as(message: str | Callable[[], str]) -> Iterator[None]:
    """Ctrl-C in the block becomes :class:`Interrupted` (one line, exit 130) saying what was
    kept; `message` may be a function, for a message that depends on how far the block got."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(message() if callable(message) else message) from None


def resume_message(db: object) -> str:
    """What Ctrl-C says where rerunning resumes (ingest, compare, ablation)."""
    return f"interrupted; rerun the same command to resume (the work so far is in {db})"


@contextmanager
def loading(
    console: Console,
    db: Path,
    source: DataSource | None = None,
    what: str = "model",
    models: Sequence[str | None] = (),
) -> Iterator[None]:
    """Refuse bad data options, a warehouse another process holds and `models` that cannot
    load (a missing folder; a hub name not cached while the hub is offline) before anything
    loads, then show a status line while the block loads data and models. All of it without
    torch: the block should read its data before importing the model libraries, so bad input
    fails at once."""
    if source is not None:
        source.check()
    from attnwh.ingest.encoder.available import check_model
    from attnwh.sql import warehouse

    warehouse.check_writable(db)
    for model in models:
        check_model(model)
    with console.status(f"Loading data and {what}…"):
        yield


def run_resumable(console: Console, db: Path, work: Callable[[Bars], Sequence[T]]) -> tuple[Sequence[T], float]:
    """`work(bars)` under a bar per task, where rerunning resumes; returns its summaries and seconds."""
    started = time.perf_counter()
    with Bars(console) as bars, interrupts_as(resume_message(db)):
        summaries = work(bars)
    return summaries, time.perf_counter() - started
